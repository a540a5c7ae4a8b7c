"""The timing phase of one evaluation, as the worker runs it, and the
profile phase after it (`profile_phase`).

After warm-ups, reference and candidate alternate (ABBA), each sample one
command to one process (`rep N`: N calls) measured by that process's timer
and bounded by the worker's own clock, from sending the command to reading
the reply, and by the process's CPU time as the kernel counts it (on one
CPU, the speedup by the timers may not pass the speedup by the CPU times).
The candidate cannot reach these clocks. Between its commands the
candidate process must be idle: CPU it uses while the reference runs or the
worker waits is work it left running (background threads or processes) and
rejects it. One sample, at a position the candidate cannot know, runs on
fresh inputs (a new secret seed) whose output the reference process checks.
After the samples, the fresh-input re-measurement (`remeasure.py`).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import statistics
import time
from typing import Any, Callable, TypeVar

from sage_engine.evaluation.common import timing
from sage_engine.evaluation.common.processes import proc_table, stat_fields
from sage_engine.evaluation.protocol import ProfileOptions, ProfileReport, Report, TimingOptions, TimingReport, wire
from sage_engine.evaluation.protocol.profile import side_profile, work
from sage_engine.evaluation.protocol.wire import ProtocolError
from sage_engine.evaluation.worker.children import Child
from sage_engine.evaluation.worker.guards import (
    MISREPORT_FLOOR_S,
    MISREPORT_SHARE,
    CpuMeter,
    ReferenceGuard,
    pin_together,
    thread_ids,
    widened_threads,
)
from sage_engine.evaluation.worker.remeasure import Remeasure
from sage_engine.evaluation.worker.supervisor import Ended, Supervisor, decided

INNER_TARGET_S = 2e-3  # calls per sample so one lasts this long: fewer round trips per budget
MAX_INNER = 100
CHURN_SLACK = 2.0
# CPU the candidate process may use while it is not being called: returning
# from the reply and blocking again costs microseconds per sample.
IDLE_CPU_FLOOR_S = 0.005
IDLE_CPU_SHARE = 0.02
# On one CPU, where the speedup by the processes' CPU times (as the kernel
# counts them) is at most `CPU_GAIN_MAX`, the speedup credited is at most
# `CPU_CREDIT` times it: a timer the candidate's process slowed reads as a
# speedup its CPU does not show, in the same ratio however much the machine
# preempts either side. Honest references against themselves over
# KernelBench level 1 read the timers' speedup over the CPU's at 0.89-1.11
# idle, up to 1.40 with four busy loops on two cores (the timers' noise,
# which this pulls back); the cheat halving its clock, 1.86-2.35. Not past
# `CPU_GAIN_MAX`: there a fast kernel's CPU holds harness work its timer
# rightly leaves out (a fused C++ RMSNorm read 4.45x by its timer, 2.11x by
# CPU, on a loaded machine), and the misreport gap is the bound.
CPU_CREDIT = 1.15
CPU_GAIN_MAX = 1.25
# Compared only where the inputs' changes are at most this share of either
# side's CPU a call: the speedup by CPU is a ratio of what is left.
CHURN_SHARE_MAX = 0.5


T = TypeVar("T")
# The parts of the timing phase a result's `phases` names (seconds by the
# worker's clock): the samples, the checks among them, the re-measurement.
TIMING_PARTS = ("timing_warmup", "timing_samples", "spot_checks", "fresh_checks", "fresh_inputs")


def spent(parts: dict[str, float], part: str, run: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`run(*args, **kwargs)`, its seconds added to `parts[part]`."""
    start = time.perf_counter()
    try:
        return run(*args, **kwargs)
    finally:
        parts[part] = parts.get(part, 0.0) + time.perf_counter() - start


class TimingPhase:
    """Samples of both sides, and the checks that run alongside them."""

    def __init__(self, sup: Supervisor, ref: Child, cand: Child, options: TimingOptions, input_bytes: int = 0, phases: dict | None = None):
        self.sup, self.ref, self.cand, self.opts = sup, ref, cand, options
        self.input_bytes = input_bytes  # the timed case's (sizes the fresh-input re-measurement's samples)
        self.checks_at = check_positions(options.min_reps, sup.req.verdict.stale_checks)
        self.checked: dict[str, int] = {"fresh": 0, "stale": 0, "stale_inconclusive": 0, "spot": 0, "spot_skipped": 0}
        self.churn: list[float] = []  # the reference's host seconds per call spent changing inputs
        self.churn_cpu: list[float] = []  # the same, as CPU: each batch's by its CPU over the worker's wall
        self.n = 0  # candidate samples so far
        # A timing that is not representative (an interpreter) gets a short
        # wall of its own: going past it ends timing, not the evaluation.
        self.end = sup.deadline if options.wall_s is None else min(sup.deadline, time.monotonic() + options.wall_s)
        self.idle = self.busy = 0.0  # candidate CPU between and during its commands
        self.after: float | None = None
        self.unchecked = False  # a candidate sample ran since the last spot check
        self.gaps: dict[str, list[float]] = {"reference": [], "candidate": []}  # worker's wall - claim
        self.cpu_gaps: dict[str, list[float]] = {"reference": [], "candidate": []}  # the process's CPU - claim
        self.claims: list[float] = []  # the candidate's, per batch
        # Per side, seconds a call: its timer's claims, and its process's CPU (the inputs' changes included).
        self.own: dict[str, list[float]] = {"reference": [], "candidate": []}
        self.cpu_s: dict[str, list[float]] = {"reference": [], "candidate": []}
        self.cpu_bound = False  # the claims held to the CPU times (`claims_past_cpu`)
        self.batches: list[tuple[int, int, bool]] = []  # (calls, seed, held) since the last spot check (`spot_draw`)
        self.numerics: set[str] = set()  # switches the candidate's process found changed and reset
        self.all_streams: set[str] = set()
        self.inner: dict[str, int] = {}
        self.spent: dict[str, float] = phases if phases is not None else {}  # by `TIMING_PARTS`

    def run(self) -> tuple[list[float], list[float], dict[str, Any]]:
        """(reference samples, candidate samples, checks), seconds per call; raises `Ended` for a cheat."""
        own_cpus = os.sched_getaffinity(0)
        cpus = self.cpus = pin_together([self.ref.pid, self.cand.pid, os.getpid()], self.sup.req.threads)
        try:
            return self._run(cpus)
        finally:
            os.sched_setaffinity(0, own_cpus)  # the next evaluation's children inherit it

    def _run(self, cpus: list[int]) -> tuple[list[float], list[float], dict[str, Any]]:
        opts, end = self.opts, self.end
        # Where a process's CPU time is its calls' time: one CPU, no device, a timing that credits a speedup.
        self.cpu_bound = len(cpus) == 1 and not opts.device_clock and opts.wall_s is None
        seeds, started = {c.role: secrets.randbits(SEED_BITS) for c in (self.ref, self.cand)}, time.perf_counter()
        fastest = {c.role: self.claimed(c, self.sup.command(c, f"warm {opts.warmup} {seeds[c.role]}", end)) for c in (self.ref, self.cand)}
        self.batches = [(1, seeds["candidate"] + j, False) for j in range(max(1, opts.warmup))]
        # Calls per sample, so one sample lasts about INNER_TARGET_S: fewer
        # command round trips per budget (a device timer's own clock excludes them anyway).
        self.inner = {role: max(1, min(MAX_INNER, math.ceil(INNER_TARGET_S / max(t, 1e-7)))) for role, t in fastest.items()}
        # Watched from here on: stops and continues of the pauses before timing are not counted.
        self.guard = ReferenceGuard(self.ref)
        self.cpu = CpuMeter(self.cand.pid)
        self.meters = {"reference": CpuMeter(self.ref.pid), "candidate": self.cpu}
        reaped = self.cpu.reaped()
        # Threads alive now (torch's, a pool the candidate made while checked) may
        # stay; one that a timed call starts and leaves running is work after the timer.
        self.known = thread_ids(self.cand.pid)
        sampling = self.spent["timing_warmup"] = time.perf_counter() - started
        ref_s, cand_s = timing.measure_alternating(
            lambda: self.sample(self.ref),
            self.candidate_sample,
            warmup=0,
            min_reps=opts.min_reps,
            max_reps=opts.max_reps,
            budget_s=opts.budget_s,
            precision=opts.precision,
            between=self.between_rounds,
        )
        self.between_rounds(last=True)
        checked = self.spent.get("spot_checks", 0.0) + self.spent.get("fresh_checks", 0.0)
        self.spent["timing_samples"] = time.perf_counter() - started - sampling - checked
        reject_leftover_processes(self.sup, self.cand)
        if self.idle > max(IDLE_CPU_FLOOR_S, IDLE_CPU_SHARE * self.busy):
            raise decided(
                "rejected",
                f"the candidate kept computing after its calls returned: "
                f"{self.idle * 1000:.1f} ms of CPU while it was not being called ({self.busy * 1000:.1f} ms "
                "while it was); work left on background threads or processes is not allowed",
                "cheat",
                "background work after forward returned",
            )
        # The median gaps: the speedup is a ratio of medians, so a process
        # that under-reports in more than half its samples moves it, and a
        # median is where that shows (a smallest gap would be one of its
        # honest samples). Both clocks must say so: the worker's wall, which a
        # loaded machine lengthens for either side alike (they alternate on
        # the same CPUs), and the process's own CPU time (a process with
        # threads of its own uses more CPU than wall). A preempted process's
        # claim grows and its CPU does not, so its CPU gap only shrinks: an
        # honest single-threaded process never uses more CPU than it reports,
        # in any sample, and the reference's typical one, never below 0, is
        # what honest bookkeeping outside the timed calls costs (its largest
        # is a loaded machine's outlier, hundreds of microseconds).
        gap_ref, gap_cand = statistics.median(self.gaps["reference"]), statistics.median(self.gaps["candidate"])
        cpu_ref, cpu_cand = max(0.0, statistics.median(self.cpu_gaps["reference"])), statistics.median(self.cpu_gaps["candidate"])
        bound = MISREPORT_FLOOR_S + MISREPORT_SHARE * statistics.median(self.claims)
        # On one CPU a process's CPU time never passes its wall time: its CPU
        # gap alone says it (the worker's wall gaps, which a loaded machine
        # moves by milliseconds either way, let a clock slowed 16% through).
        walled = len(cpus) == 1 or gap_cand - gap_ref > bound
        # Only where a speedup is credited: an interpreter's times credit none, and its
        # calls' bookkeeping (Python-level launches) reads as a gap on a loaded machine.
        if not opts.device_clock and opts.wall_s is None and walled and cpu_cand - cpu_ref > bound:
            raise self.misreported(
                f"its batches took a median {gap_cand * 1e3:.3f} ms longer by the worker's clock "
                f"than reported, and used a median {cpu_cand * 1e3:.3f} ms more CPU; the reference's, "
                f"{gap_ref * 1e3:.3f} ms and {cpu_ref * 1e3:.3f} ms"
            )
        held = claims_past_cpu(self) if self.cpu_bound else None
        verdict = self.sup.req.verdict
        # Where the times mean something (not an interpreter's): the credited
        # speedup re-measured on inputs the candidate has never seen.
        fresh = (
            spent(self.spent, "fresh_inputs", Remeasure(self, self.input_bytes, verdict.fresh_samples, verdict.fresh_bound).run)
            if verdict.fresh_samples > 0 and opts.wall_s is None
            else None
        )
        if self.cpu_bound:  # the processes it ran while timed, the re-measurement's samples included
            reject_other_processes(self.sup, self.cand, self.cpu.reaped() - reaped)
        checks: dict[str, Any] = {
            "cpus": cpus,
            "cpu_us": {role: round(statistics.median(v) * 1e6, 2) for role, v in self.cpu_s.items() if v},
            "churn_cpu_us": round(statistics.median(self.churn_cpu) * 1e6, 2) if self.churn_cpu else 0.0,
            "inner_calls": self.inner,
            "idle_cpu_ms": round(self.idle * 1000, 3),
            "clock_gap_us": {"reference": round(gap_ref * 1e6, 1), "candidate": round(gap_cand * 1e6, 1)},
            "cpu_gap_us": {"reference": round(cpu_ref * 1e6, 1), "candidate": round(cpu_cand * 1e6, 1)},
            "fresh_inputs_checked": self.checked["fresh"],
            "stale_checks": self.checked["stale"],
            "stale_inconclusive": self.checked["stale_inconclusive"],
            "spot_checks": self.checked["spot"],
            "spot_skipped": self.checked["spot_skipped"],
            "churn_us": round(statistics.median(self.churn) * 1e6, 2) if self.churn else 0.0,
        }
        if self.numerics:  # process-wide switches (matmul precision, TF32) it changed: reset before each batch
            checks["numerics_reset"] = sorted(self.numerics)
        if fresh is not None:
            checks["fresh_inputs"] = fresh
        if held is not None:
            checks["cpu_bound"] = held
        if self.all_streams:
            # Device work left on another stream after a call's end event: from then on
            # that side was timed with the device synchronised inside each call's events.
            checks["other_streams"] = sorted(self.all_streams)
        return ref_s, cand_s, checks

    def sample(self, c: Child) -> float:
        n = self.inner[c.role]
        meter = self.meters[c.role]
        seed = secrets.randbits(SEED_BITS)
        cpu0, t0 = meter.seconds(), time.perf_counter()
        text = self.sup.command(c, f"rep {n} {seed}", self.end, timed=True)
        wall, cpu = time.perf_counter() - t0, meter.seconds() - cpu0
        meddled = self.guard.meddled()
        if meddled:
            raise decided(
                "rejected",
                f"while the reference process was being timed, something {meddled}: only the candidate's process could have",
                "cheat",
                f"the reference process was {meddled}",
            )
        claimed = self.claimed(c, text) * n
        if text.endswith(" all-streams"):
            self.all_streams.add(c.role)
        if claimed > wall:
            raise self.misreported(f"a batch took {wall * 1e3:.3f} ms by the worker's clock but was reported as {claimed * 1e3:.3f} ms")
        if c is self.ref:
            self.churn.append(churn_of(text))
            self.churn_cpu.append(self.churn[-1] * min(1.0, cpu / wall))  # by its clock, a preempted batch's read long
        # The inputs' changes between calls are outside the claim and inside the
        # worker's clock: the reference's own measure of them (it runs the
        # same changes on the same inputs) is what either side may spend so,
        # twice over (a loaded machine preempts a process between its calls
        # too). A process hiding work there gains at most that: microseconds.
        allowance = CHURN_SLACK * n * statistics.median(self.churn) if self.churn else 0.0
        self.gaps[c.role].append(wall - claimed - allowance)
        self.cpu_gaps[c.role].append(cpu - claimed - allowance)
        if c is self.cand:
            self.claims.append(claimed)
            self.batches.append((n, seed, False))
            self.numerics.update(numerics_of(text))
        self.own[c.role].append(claimed / n)
        self.cpu_s[c.role].append(cpu / n)
        return claimed / n

    def between_rounds(self, last: bool = False) -> None:
        """The checks among the samples, run before each round whichever side
        goes first (and once after the last): the candidate's last batch
        spot-checked, then a fresh or stale check where one is due. Run
        after each candidate sample, they put their work (the reference
        judging a call, copies between the processes) before every next
        candidate sample and before half the reference's, whose others
        followed its own sample with its data still in the caches
        (docs/evaluation.md, "fair to both sides"). The candidate's CPU in
        them is neither idle nor timed."""
        before = self.cpu.seconds()
        if self.after is not None:
            self.idle += before - self.after
        if self.unchecked and self.sup.req.verdict.spot_checks:
            spent(self.spent, "spot_checks", spot_check, self)
            self.batches.clear()
        self.unchecked = False
        check = None if last else self.checks_at.get(self.n)
        if check is not None:
            spent(self.spent, "fresh_checks", checked_call, self, check)
        self.after = self.cpu.seconds()

    def candidate_sample(self) -> float:
        before = self.cpu.seconds()
        if self.after is not None:
            self.idle += before - self.after
        value = self.sample(self.cand)
        after = self.cpu.seconds()
        self.busy += after - before
        now = thread_ids(self.cand.pid)
        if now - self.known:
            raise decided(
                "rejected",
                f"a timed call of the candidate started {len(now - self.known)} thread(s) that "
                "were still running after it returned; work left on background threads is not allowed",
                "cheat",
                "threads left running after forward returned",
            )
        self.known.update(now)
        reject_widened_cpus(self.cand, self.cpus)
        if not self.sup.req.verdict.spot_checks:
            self.batches.clear()
        self.unchecked = True  # its batch is spot-checked before the next round
        self.after = after
        self.n += 1
        return value

    def claimed(self, c: Child, text: str) -> float:
        try:
            value = float(text.split()[1])
        except (IndexError, ValueError):
            value = -1.0
        if not value >= 0:
            if c.role == "candidate":
                raise self.misreported(f"its reply {text[:60]!r} carries no time")
            raise Ended(report=Report("crashed", f"the reference process sent no time ({text[:60]!r})"))
        return value

    def misreported(self, detail: str) -> Ended:
        return decided(
            "rejected",
            f"the candidate's process misreported how long its calls took: {detail}",
            "cheat",
            "timing reports that the worker's clock contradicts",
        )


SEED_BITS = 62  # a batch's swaps follow from one of these (torch.Generator takes 64-bit seeds)
# Draws of the checked samples' positions before settling for fewer pairs than asked.
CHECK_DRAWS = 64


def check_positions(min_reps: int, pairs: int) -> dict[int, str]:
    """Secret candidate samples that run on checked inputs: `pairs` pairs of
    a fresh sample and a stale check right after it, all within the first
    `min_reps` samples (timing may stop there), a plain sample between two
    pairs; at least one fresh check. Redrawn until every pair fits where
    `min_reps` has room for them (with 5, one draw in two left one pair)."""
    rng = secrets.SystemRandom()
    best: dict[int, str] = {}
    for _ in range(CHECK_DRAWS):
        out = _draw_checks(rng, min_reps, pairs)
        if len(out) > len(best):
            best = out
        if len(best) == 2 * pairs:
            break
    return best


def _draw_checks(rng: secrets.SystemRandom, min_reps: int, pairs: int) -> dict[int, str]:
    free = list(range(max(1, min_reps)))
    out: dict[int, str] = {}
    for _ in range(pairs):
        starts = [p for p in free if p + 1 in free]
        if not starts:
            break
        p = rng.choice(starts)
        out[p], out[p + 1] = "fresh", "stale"
        free = [q for q in free if q not in (p - 1, p, p + 1, p + 2)]
    if not out:
        out[rng.choice(free)] = "fresh"
    return out


def numerics_of(reply: str) -> list[str]:
    """The numerics switches a side's reply says it found changed (`reset a,b`)."""
    words = reply.split()
    try:
        return [w for w in words[words.index("reset") + 1].split(",") if w]
    except (ValueError, IndexError):
        return []


def churn_of(reply: str) -> float:
    """Host seconds per call a side's reply says its inputs' changes took (0 when it says none)."""
    words = reply.split()
    try:
        return max(0.0, float(words[words.index("churn") + 1]))
    except (ValueError, IndexError):
        return 0.0


def spot_draw(batches: list[tuple[int, int, bool]]) -> tuple[int, str]:
    """The call of the last batch a spot check judges, drawn here after the
    batch ran (from a secret the candidate's process never holds), and the
    batches since the last check as the reference repeats their swaps."""
    return secrets.randbelow(batches[-1][0]), ",".join(f"{n}:{seed}:{int(held)}" for n, seed, held in batches)


def reject_widened_cpus(cand: Child, cpus: list[int]) -> None:
    """A candidate thread allowed beyond the CPUs both sides are timed on widened its own affinity."""
    widened = widened_threads(cand.pid, cpus)
    if widened:
        raise decided(
            "rejected",
            f"{len(widened)} thread(s) of the candidate's process were allowed on CPUs beyond the ones both sides are "
            f"timed on ({cpus}): a kernel may not widen its own CPU set",
            "cheat",
            "widened its CPU affinity",
        )


def claims_past_cpu(phase: TimingPhase) -> dict[str, float] | None:
    """The speedup by the timers against the speedup by the CPU times, and
    what the speedup is divided by (`credited`) so that it is at most
    `CPU_CREDIT` times the CPU's, where that is at most `CPU_GAIN_MAX`.
    Both sides on one CPU: time a process is preempted inside its calls
    lengthens its claims and not its CPU, on either side alike (they
    alternate on that CPU); a clock slowed to half speed shows as half the
    claims per CPU second, however loaded the machine (the misreport check's
    CPU gap does not: preempted for over half a batch, a halved claim passes
    the CPU). The CPU covers all of the candidate's work
    (`reject_other_processes`)."""
    own, cpu = phase.own, phase.cpu_s
    churn = statistics.median(phase.churn_cpu)
    ref_cpu, cand_cpu = statistics.median(cpu["reference"]) - churn, statistics.median(cpu["candidate"]) - churn
    if churn > CHURN_SHARE_MAX * min(ref_cpu + churn, cand_cpu + churn):  # a side's calls too short to tell from the changes
        return None
    by_timer = statistics.median(own["reference"]) / max(statistics.median(own["candidate"]), 1e-12)
    by_cpu = ref_cpu / cand_cpu
    credited = max(1.0, by_timer / (CPU_CREDIT * by_cpu)) if by_cpu <= CPU_GAIN_MAX else 1.0
    return {"by_timer": round(by_timer, 4), "by_cpu": round(by_cpu, 4), "credited": round(credited, 4)}


def reject_other_processes(sup: Supervisor, cand: Child, reaped: float) -> None:
    """The candidate's claims are held to its own process's CPU (`claims_past_cpu`):
    work it has another process do while its calls wait is off that CPU. Every
    process it started stays under the worker (the subreaper its orphans go
    to, which collects them only between evaluations), running or exited,
    unless the candidate collected it, which adds that child's CPU to its
    process's count of its children's (in clock ticks: less than one tick
    over the whole timing shows as none). Either rejects it."""
    born = stat_fields(cand.pid)
    table = proc_table()
    under: dict[int, list[int]] = {}
    for info in table.values():
        under.setdefault(info.ppid, []).append(info.pid)
    ours, stack = [], list(under.get(os.getpid(), []))
    while stack:
        pid = stack.pop()
        stack.extend(under.get(pid, []))
        ours.append(pid)
    # Started since the candidate's process was: an earlier evaluation's may still be exiting.
    started = [p for p in ours if p not in {c.pid for c in sup.children.values()} and born and table[p].start >= int(born[19])]
    if started or reaped > 0:
        detail = (
            f"{len(started)} process(es) it started were still there"
            if started
            else f"it collected child processes that used {reaped * 1e3:.0f} ms of CPU"
        )
        raise decided(
            "rejected",
            f"the candidate's process ran other processes while it was timed ({detail}): on one CPU a side's time is "
            "held to its own process's CPU, so a kernel does its work in that process",
            "cheat",
            "work in other processes while timed",
        )


def reject_leftover_processes(sup: Supervisor, cand: Child) -> None:
    """Between calls the candidate's process is alone: anything it started and left running is work off the clock."""
    leftover = [p.pid for p in sup.watch.members() if p.pid != cand.pid] if sup.watch is not None else []
    if leftover:
        raise decided(
            "rejected",
            f"the candidate left {len(leftover)} process(es) running after its calls returned",
            "cheat",
            "background processes left running",
        )


def device_profile(sup: Supervisor) -> dict[str, Any]:
    """Profiler device-only time per call (µs) of each side, after timing."""
    try:
        return {role: float(sup.command(c, "profile", sup.deadline).split()[1]) for role, c in sup.children.items()}
    except (Ended, ValueError, IndexError) as exc:
        return {"error": f"device profile failed: {exc}"}


def _json_object(text: str) -> dict[str, Any]:
    import json

    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# How an evaluation may end while profiled and still be reported: a side that
# failed, hung or died only now. Cancels, the host going away and too many
# processes end it as they would anywhere.
PROFILE_SURVIVES = (None, "timeout")


def profile_phase(sup: Supervisor, timing: TimingReport, options: ProfileOptions) -> ProfileReport:
    """Once timing is over, each side in turn answers `profile-kernels N` (its
    kernels over N calls of the timed case; the reference adds the call's
    work), N sized from its timed median so the phase costs about
    `budget_s` a side. Medians are never re-timed; a side that cannot be
    profiled leaves the result as it was, its reason in `errors`."""
    out = ProfileReport()
    for role in ("reference", "candidate"):
        child = sup.children[role]
        median_s = getattr(timing, role).median_ms / 1000.0
        try:
            text = sup.command(child, f"profile-kernels {options.calls(median_s)}", sup.deadline)
            reply = json.loads(text.partition(" ")[2])
            if not isinstance(reply, dict):
                raise ProtocolError("the reply is not a JSON object")
            setattr(out, role, side_profile(reply.get("side")))
            if role == "reference" and reply.get("work") is not None:
                out.work = work(reply["work"])  # the candidate's claim of its work is never asked for
        except Ended as end:
            if end.killed not in PROFILE_SURVIVES:
                raise
            out.errors[role] = (
                end.report.message if end.report is not None else f"the {role} process ended while profiled ({end.killed or 'exited'})"
            )
        except (ValueError, TypeError, ProtocolError) as exc:
            out.errors[role] = f"the {role}'s profile could not be read: {exc}"
    return out


def spot_check(phase: TimingPhase) -> None:
    """The candidate's last batch judged on one of its calls, drawn after
    they ran (`SpotCall`): a candidate that computes only the calls a
    check could see (the first after a pause, values it has not seen) is
    caught on the others. Every sample, one call long too: a candidate
    that returns an earlier output for values that only moved does so
    in a sample of one call as well."""
    call, log = spot_draw(phase.batches)
    wire.write_all(phase.ref.cmd, f"spot {call} {log}\n".encode())  # reading before the candidate writes, as in `fresh_check`
    phase.sup.command(phase.cand, f"spot {call}", phase.end)
    verdict = phase.sup.reply(phase.ref, phase.end)
    if verdict.startswith("bad "):
        message = str(_json_object(verdict[4:]).get("message", ""))
        if message.startswith("the candidate's process skipped"):
            raise decided("rejected", f"while timed, {message}", "cheat", "a spot check the candidate's process skipped")
        raise decided(
            "rejected",
            f"while timed, one call inside a timed batch, drawn after the batch ran, returned a wrong output "
            f"({message}): the calls timed must compute what the checked calls do",
            "cheat",
            f"a wrong output inside a timed batch: {message}",
        )
    phase.checked["spot_skipped" if verdict.startswith("ok skipped") else "spot"] += 1


def checked_call(phase: TimingPhase, check: str) -> None:
    """One call on inputs the reference makes from a seed the candidate
    never learns (`fresh`, or the last ones with a few values changed:
    `stale`), its output judged by the reference; outside the samples, so
    its time (with the output kept for the check) is in no median."""
    phase.sup.command_both(phase.ref, f"{check} {secrets.randbits(31)}", phase.cand, "fresh", phase.end)
    # The reference's copy of the candidate's inputs starts again from these: the batches before are done with.
    seed = secrets.randbits(SEED_BITS)
    phase.batches[:] = [(1, seed, True)]
    phase.sup.command(phase.cand, f"rep 1 {seed}", phase.end)
    fresh_check(phase, check)
    phase.known.update(thread_ids(phase.cand.pid))


def fresh_check(phase: TimingPhase, check: str) -> None:
    # The reference starts reading before the candidate writes: a frame
    # larger than a pipe buffer would otherwise block the candidate.
    wire.write_all(phase.ref.cmd, b"check\n")
    phase.sup.command(phase.cand, "check", phase.end)
    verdict = phase.sup.reply(phase.ref, phase.end)
    if verdict.startswith("bad "):
        message = str(_json_object(verdict[4:]).get("message", ""))
        if message.startswith("returned a stored answer"):
            raise decided(
                "rejected", f"while timed, the candidate {message}", "cheat", "a stored answer for new input values during timing"
            )
        raise decided(
            "rejected",
            f"while timed, on inputs it had not seen before, the candidate's output was "
            f"wrong ({message}): it returns results computed for earlier inputs",
            "cheat",
            f"stale output on fresh inputs during timing: {message}",
        )
    phase.checked[check] += 1
    if verdict.startswith("ok inconclusive"):
        phase.checked["stale_inconclusive"] += 1
