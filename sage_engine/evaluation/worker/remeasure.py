"""The fresh-input re-measurement: the candidate's speedup measured where the
kernel cannot shape it.

After the timed samples, `samples` pairs of candidate samples of the same
length run back to back (ABBA): one on the timed inputs as they were timed
(changed between calls by the churn), one on input sets it has never seen,
a new set of values in new memory for every call, made by the reference
from secret seeds and copied in the candidate's process before the sample
(`child/remeasure.py`). Each sample is measured twice: by the candidate
process's timer and by the worker's own clock around the command, which
code in the candidate's process cannot reach. One call of every fresh
sample, drawn after it ran, is judged by the reference.

Whatever a kernel remembers of the calls before (an answer keyed on the
inputs' addresses, version counters or values, the rows a swap touched), a
call on a new set has none of it: an honest kernel takes as long on either.
A ratio of the fresh median to the churned one past `bound`, by either
clock, is `rejected` ("fast only on inputs it had seen"); below it, a ratio
above 1 is charged to the credited speedup.

Standard library only (torch lives in the children).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from sage_engine.evaluation.protocol import wire
from sage_engine.evaluation.worker.guards import thread_ids
from sage_engine.evaluation.worker.supervisor import decided

# Input bytes one fresh sample copies, at most: its calls are fewer where the
# timed case's inputs are large (one call, at least).
SAMPLE_BYTES = 64 << 20
# Pairs run before a ratio past the bound rejects, as a multiple of `samples`.
EXTEND = 3
# The worker's clock holds what each call's copy costs too, and a fresh
# set's copy reads memory the reference wrote, the timed inputs' copy memory
# in the caches: its bound is this much wider (measured on the suite's
# adam_step, 16 MB of inputs a call: 1.07x by its own clock, 1.23x by the worker's).
WORKER_CLOCK_SLACK = 1.2


def calls_per_sample(inner: int, input_bytes: int) -> int:
    """Calls in each sample of a pair: the timed samples' count, as far as the byte cap allows."""
    return max(1, min(inner, SAMPLE_BYTES // max(1, input_bytes)))


def ratio(fresh: list[float], churned: list[float]) -> float:
    """The fastest fresh sample over the fastest churned one (1 where either
    is empty or zero). The fastest, not the median: a loaded machine only
    ever adds time to a sample, and a few samples' medians move with it
    (measured: medians of five pairs 0.7-1.4x apart for an honest kernel on
    a loaded two-core host, fastest within a few percent), while a kernel
    fast only on inputs it had seen is slow on every fresh sample."""
    if not fresh or not churned:
        return 1.0
    base = min(churned)
    return min(fresh) / base if base > 0 else 1.0


class Remeasure:
    """Runs the pairs on a `TimingPhase`'s children and decides."""

    def __init__(self, phase: Any, input_bytes: int, samples: int, bound: float):
        self.phase, self.samples, self.bound = phase, samples, bound
        self.n = calls_per_sample(phase.inner.get("candidate", 1), input_bytes)
        # Per call, seconds: the candidate process's claim and the worker's clock.
        self.claims: dict[str, list[float]] = {"fresh": [], "churned": []}
        self.walls: dict[str, list[float]] = {"fresh": [], "churned": []}
        self.judged = 0
        self.skipped = 0

    def run(self) -> dict[str, Any]:
        """The re-measurement's figures (`ratio` is what the credited speedup is divided by, when above 1); raises `Ended` to reject."""
        pairs = 0
        while True:
            self.prepare()
            order = ("churned", "fresh") if pairs % 2 == 0 else ("fresh", "churned")
            for kind in order:
                self.fresh_sample() if kind == "fresh" else self.churned_sample()
            pairs += 1
            by_claim = ratio(self.claims["fresh"], self.claims["churned"])
            by_wall = ratio(self.walls["fresh"], self.walls["churned"])
            past = by_claim > self.bound or by_wall > self.bound * WORKER_CLOCK_SLACK
            # Past the bound, more pairs before deciding: a busy moment may have
            # slowed every fresh sample so far; a kernel fast only on inputs it
            # had seen stays past it however many run.
            if pairs >= self.samples * (EXTEND if past else 1):
                break
        phase = self.phase
        phase.sup.command(phase.cand, "remeasure-end", phase.end)
        figures = {
            "samples": pairs,
            "calls": self.n,
            "fresh_ms": round(min(self.claims["fresh"]) * 1e3, 4),
            "churned_ms": round(min(self.claims["churned"]) * 1e3, 4),
            "ratio": round(by_claim, 4),
            "by_own_clock": round(by_claim, 4),
            "by_worker_clock": round(by_wall, 4),
            "bound": self.bound,
            "judged": self.judged,
            "judged_skipped": self.skipped,
        }
        if by_claim > self.bound or by_wall > self.bound * WORKER_CLOCK_SLACK:
            worst = max(by_claim, by_wall)
            clock = "its own clock" if by_claim >= by_wall else "the worker's clock"
            raise decided(
                "rejected",
                f"fast only on inputs it had seen: on input sets it had never seen (new values in new memory "
                f"every call) its calls took {worst:.2f}x as long as on the timed inputs by {clock} "
                f"(own clock {by_claim:.2f}x, worker's {by_wall:.2f}x; an honest kernel stays within "
                f"{self.bound:g}x by its own clock, {self.bound * WORKER_CLOCK_SLACK:.2g}x by the worker's): its "
                "speed comes from remembering earlier calls, not from computing",
                "cheat",
                f"fresh-input time {worst:.2f}x the timed time",
            )
        return figures

    def churned_sample(self) -> None:
        phase = self.phase
        text, wall = self.timed(f"rep {self.n} remeasure-churned")
        # The inputs' changes ran between these calls, inside the worker's
        # clock: the reference's own measure of them is taken out.
        churn = statistics.median(phase.churn) if phase.churn else 0.0
        self.record("churned", text, wall, deduct=self.n * churn)

    def prepare(self) -> None:
        """A pair's input sets: made by the reference, mapped by the candidate, outside both samples."""
        phase = self.phase
        phase.sup.command_both(phase.ref, f"remeasure-make {self.n}", phase.cand, "remeasure-prepare", phase.end)

    def fresh_sample(self) -> None:
        phase = self.phase
        sup, end = phase.sup, phase.end
        text, wall = self.timed(f"rep {self.n} remeasure")
        self.record("fresh", text, wall)
        # The reference starts reading before the candidate writes (a frame larger than a pipe buffer).
        wire.write_all(phase.ref.cmd, b"remeasure-judge\n")
        sup.command(phase.cand, "remeasure-send", end)
        verdict = sup.reply(phase.ref, end)
        if verdict.startswith("bad "):
            message = str(_message(verdict[4:]))
            raise decided(
                "rejected",
                f"while timed on input sets it had never seen, a call drawn after the sample ran returned a wrong "
                f"output ({message}): the calls timed must compute what the checked calls do",
                "cheat",
                f"a wrong output on fresh inputs while timed: {message}",
            )
        if verdict.startswith("ok skipped"):
            self.skipped += 1
        else:
            self.judged += 1

    def timed(self, line: str) -> tuple[str, float]:
        """One command to the candidate and the worker's own clock around it; threads it left running reject it."""
        phase = self.phase
        t0 = time.perf_counter()
        text = phase.sup.command(phase.cand, line, phase.end)
        wall = time.perf_counter() - t0
        left = thread_ids(phase.cand.pid) - phase.known
        if left:
            raise decided(
                "rejected",
                f"a timed call of the candidate started {len(left)} thread(s) that were still running after it "
                "returned; work left on background threads is not allowed",
                "cheat",
                "threads left running after forward returned",
            )
        return text, wall

    def record(self, kind: str, text: str, wall: float, deduct: float = 0.0) -> None:
        phase = self.phase
        claimed = phase.claimed(phase.cand, text) * self.n
        if claimed > wall:
            raise phase.misreported(f"a batch took {wall * 1e3:.3f} ms by the worker's clock but was reported as {claimed * 1e3:.3f} ms")
        self.claims[kind].append(claimed / self.n)
        self.walls[kind].append(max(wall - deduct, claimed) / self.n)


def _message(text: str) -> str:
    import json

    try:
        value = json.loads(text)
    except ValueError:
        return text[:200]
    return str(value.get("message", "")) if isinstance(value, dict) else text[:200]
