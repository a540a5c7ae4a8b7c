"""One evaluation, as the worker runs it.

Forks the reference and candidate processes (`child.py`), relays their
progress and case rows to the harness, enforces the deadline and the
process limit, honours `cancel`, then times both sides with the worker's
own clock and builds the report `results.py` turns into an `EvalResult`.

Timing: after warm-ups, reference and candidate alternate (ABBA), each
sample one command to one process (`rep N`: N calls, then a device-wide
sync) measured by the worker from sending the command to reading the
reply, minus the median round trip of a no-op to the same process. The
candidate cannot reach this clock. Between its commands the candidate
process must be idle: CPU it uses while the reference runs or the worker
waits is work it left running (background threads or processes) and
rejects it. One sample, at a position the candidate cannot know, runs on
fresh inputs (a new secret seed) whose output the reference process checks.

Standard library only (torch lives in the children).
"""

from __future__ import annotations

import fcntl
import gc
import json
import math
import os
import secrets
import select
import signal
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from sage_engine.evaluation import diagnostics, sandbox, timing, wire

POLL_S = 0.05
STACK_DUMP_S = 0.5  # on timeout, time the candidate gets to print its stack before SIGKILL
LOST_GRACE_S = 2.0
EXTRAS_WAIT_S = 0.5  # how long a verdict waits for the candidate's hook report of the same trial  # after one side ends, how long the other may take to say why
INNER_TARGET_S = 2e-3  # calls per sample so one lasts this long: fewer round trips per budget
MAX_INNER = 100
# Each side measures its own batches (the precise clock on a loaded machine)
# and the worker's clock bounds what it may claim: a candidate process whose
# batches always take longer by the worker's clock than by its report, by more
# than the reference's smallest gap plus this much, misreports its time.
MISREPORT_FLOOR_S = 3e-4
MISREPORT_SHARE = 0.05
# CPU the candidate process may use while it is not being called: returning
# from the reply and blocking again costs microseconds per sample.
IDLE_CPU_FLOOR_S = 0.005
IDLE_CPU_SHARE = 0.02
# The timing phase holds the host's timing turn: a command (per call it
# asks for) may take this long, or this many times the slowest call seen
# during the correctness checks, whichever is more.
TIMING_SLACK_S = 30.0
TIMED_CALL_FACTOR = 10.0
CANDIDATE_STATUSES = ("compile_error", "runtime_error", "rejected")  # all a candidate may say of itself


class Stop(Exception):
    """Ends the evaluation early: killed (timeout, cancelled, processes) or decided."""

    def __init__(self, killed: str | None = None, result: dict[str, Any] | None = None):
        super().__init__(killed or (result or {}).get("message", ""))
        self.killed, self.result = killed, result


@dataclass
class Child:
    role: str
    pid: int
    cmd: int
    replies: wire.LineReader
    events: wire.LineReader
    output: int
    tail: sandbox.TailBuffer = field(default_factory=sandbox.TailBuffer)
    exit_code: int | None = None
    out_open: bool = True
    job_changes: int = 0  # times it was stopped or continued (by the worker's pauses, or by someone else)

    def poll(self) -> int | None:
        while self.exit_code is None:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG | os.WUNTRACED | os.WCONTINUED)
            except ChildProcessError:
                self.exit_code = -signal.SIGKILL
                break
            if not done:
                break
            if os.WIFSTOPPED(status) or os.WIFCONTINUED(status):
                self.job_changes += 1
                continue
            self.exit_code = os.waitstatus_to_exitcode(status)
        return self.exit_code


BULK_PIPE_BYTES = 1 << 20  # the default limit for unprivileged users (/proc/sys/fs/pipe-max-size)


def bulk_pipe() -> tuple[int, int]:
    """A pipe for tensor bytes. At 1 MiB instead of 64 KiB a trial's inputs
    and outputs cross in a sixteenth of the wake-ups: about 2.5x faster."""
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, BULK_PIPE_BYTES)
    except OSError:
        pass  # a lowered pipe-max-size: the default size still works, slower
    return r, w


def spawn(role: str, request: dict[str, Any], workdir: str, data_fd: int, inputs_fd: int, cgroup: str | None) -> Child:
    """Fork one child that runs `child.child_main(role, ...)` in its own session."""
    from sage_engine.evaluation import child

    cmd_r, cmd_w = os.pipe()
    rep_r, rep_w = os.pipe()
    evt_r, evt_w = os.pipe()
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            gc.freeze()  # what the worker holds is not this child's garbage: see worker.main
            os.setsid()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.dup2(out_w, 1)
            os.dup2(out_w, 2)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            keep = {0, 1, 2, cmd_r, rep_w, evt_w, data_fd, inputs_fd}
            # Nothing of the worker's may stay open here: not its protocol,
            # not the other side's pipes.
            for name in os.listdir("/proc/self/fd"):
                if int(name) not in keep:
                    try:
                        os.close(int(name))
                    except OSError:
                        pass
            if cgroup:
                try:
                    with open(os.path.join(cgroup, "cgroup.procs"), "w") as fh:
                        fh.write(str(os.getpid()))
                except OSError:
                    pass  # the process watch still applies
            child.child_main(role, request, child.Channels(cmd_r, rep_w, evt_w, data_fd, inputs_fd), workdir)
        finally:
            os._exit(70)
    for fd in (cmd_r, rep_w, evt_w, out_w):
        os.close(fd)
    for fd in (rep_r, evt_r, out_r):
        os.set_blocking(fd, False)
    return Child(role, pid, cmd_w, wire.LineReader(rep_r), wire.LineReader(evt_r), out_r)


class Evaluation:
    """Runs one request. `send` writes an event to the harness; `ops` reads
    the harness's operations (cancel, timing-go, pause, resume, quit)."""

    def __init__(self, request: dict[str, Any], *, send: Callable[[dict[str, Any]], None], ops: wire.LineReader,
                 workdir: str, cgroup: sandbox.PidsCgroup | None, worker_cgroup: sandbox.PidsCgroup | None):
        self.req = request
        self.send = send
        self.ops = ops
        self.workdir = workdir
        self.token = request["token"]
        self.timeout_s = float(request.get("timeout_s", 180.0))
        self.cgroup = cgroup  # this evaluation's own (limits-only), or None
        self.worker_cgroup = worker_cgroup  # the whole sandbox's (confined), or None
        self.max_tasks = int(request.get("limits", {}).get("max_tasks", sandbox.MAX_TASKS))
        self.memory_mb = int(request.get("limits", {}).get("memory_mb") or 0)
        self.pids_baseline = worker_cgroup.events_max() if worker_cgroup is not None else 0
        self.children: dict[str, Child] = {}
        self.cases: list[dict[str, Any]] = []
        self.done: dict[str, dict[str, Any]] = {}  # "reference"/"candidate": their done event; "result": a runner's
        self.report: dict[str, Any] = {}
        self.extras: dict[str, Any] = {}  # from the candidate's backend hook
        self.forged = 0
        self.last_progress = ""
        self.deadline = 0.0
        self.dump_at: float | None = None
        self.lost_at: float | None = None  # when the reference stopped getting frames
        self.held_since: float | None = None  # paused, or waiting for the timing turn: the deadline stops
        self.stopped = False  # children SIGSTOPped while another evaluation times
        self.granted = False
        self.timing_active = False
        self.quit = False  # the harness asked the worker to end
        self.watch: sandbox.ProcessWatch | None = None
        self.call_limit = float("inf")  # per call, once timing starts
        self.last_command = ""

    # ------------------------------------------------------------- running

    def run(self) -> sandbox.Outcome:
        start = time.monotonic()
        self.deadline = start + self.timeout_s
        outcome = sandbox.Outcome()
        try:
            self.start_children()
            outcome.result = self.evaluate()
        except Stop as stop:
            outcome.killed, outcome.result = stop.killed, stop.result
        finally:
            self.kill_all()
            for c in self.children.values():
                self.count_leftover_events(c)
            cand = self.children.get("candidate")
            if cand is not None:
                self.drain_output(cand, until_eof=True)
                outcome.exit_code = cand.exit_code
                outcome.output_tail, outcome.output_bytes = cand.tail.text(), cand.tail.total
            for c in self.children.values():
                for fd in (c.cmd, c.replies.fd, c.events.fd, c.output):
                    try:
                        os.close(fd)
                    except OSError:
                        pass
        if outcome.killed is None and self.pids_exceeded():
            outcome.killed, outcome.result = "processes", None
        outcome.events = [{"ev": "case", "case_result": row} for row in self.cases]
        outcome.forged_lines = self.forged
        outcome.wall_s = time.monotonic() - start
        return outcome

    def start_children(self) -> None:
        data_r, data_w = bulk_pipe()  # the candidate's outputs, to the reference
        in_r, in_w = bulk_pipe()  # the inputs the reference made, to the candidate
        cand_dir = os.path.join(self.workdir, "candidate")
        os.makedirs(cand_dir, exist_ok=True)
        cgroup = str(self.cgroup.path) if self.cgroup is not None else None
        try:
            if not self.req.get("runner"):
                ref_dir = os.path.join(self.workdir, "reference")
                os.makedirs(ref_dir, exist_ok=True)
                self.children["reference"] = spawn("reference", self.req, ref_dir, data_r, in_w, None)
            self.children["candidate"] = spawn("candidate", self.req, cand_dir, data_w, in_r, cgroup)
        finally:
            for fd in (data_r, data_w, in_r, in_w):
                os.close(fd)
        self.watch = sandbox.ProcessWatch(self.children["candidate"].pid, self.cgroup, self.max_tasks)
        self.send({"ev": "started", "pids": [c.pid for c in self.children.values()]})

    def evaluate(self) -> dict[str, Any]:
        if self.req.get("runner"):
            self.wait_for(lambda: "result" in self.done)
            return self.done["result"]
        self.wait_for(lambda: "reference" in self.done and "candidate" in self.done)
        report = self.correct_report()
        if self.req.get("timing"):
            report["timing"] = self.timing()
            if self.req.get("device_time"):
                report["timing"]["device_time_us"] = self.profile()
        return report

    # ---------------------------------------------------------- event pump

    def wait_for(self, ready: Callable[[], bool]) -> None:
        while not ready():
            self.pump(POLL_S)

    def pump(self, timeout: float) -> None:
        """One round: the harness's operations, limits, every child's pipes, exits."""
        self.check_ops()
        self.check_limits()
        fds = [] if self.ops.closed else [self.ops.fd]
        for c in self.children.values():
            fds += [r.fd for r in (c.events, c.replies) if not r.closed]
            if c.out_open:
                fds.append(c.output)
        ready, _, _ = select.select(fds, [], [], timeout)
        for c in list(self.children.values()):
            if c.events.fd in ready:
                c.events.fill()
                while (line := c.events.line()) is not None:
                    self.on_event(c, line)
            if c.replies.fd in ready:
                c.replies.fill()
            if c.out_open and c.output in ready:
                self.drain_output(c)
        for c in self.children.values():
            if c.poll() is not None:
                self.on_exit(c)

    def drain_output(self, c: Child, until_eof: bool = False) -> None:
        deadline = time.monotonic() + (LOST_GRACE_S if until_eof else 0)
        while c.out_open:
            try:
                data = os.read(c.output, 1 << 16)
            except BlockingIOError:
                if not until_eof or time.monotonic() > deadline:
                    return
                select.select([c.output], [], [], 0.05)
                continue
            if not data:
                c.out_open = False
                return
            if c.role == "candidate":  # the reference's prints are the task's, not the candidate's
                c.tail.add(data)

    def on_event(self, c: Child, line: bytes) -> None:
        event = wire.parse_event(line, self.token)
        if event is None:
            self.forged += 1
            return
        kind = event.get("ev")
        if kind == "progress" and c.role == "candidate":
            self.last_progress = str(event.get("message", ""))
            self.send(event)
        elif kind == "case" and c.role == "reference" and isinstance(event.get("case_result"), dict):
            self.cases.append(event["case_result"])
            self.send(event)
        elif kind == "verdict" and c.role == "reference" and self.cases:
            self.take_extras()
            row = self.cases[-1]
            raise Stop(result=self.failed("incorrect", f"case {row['case'] or 'default'} trial {row['trial']}: "
                                          f"{row['message']}", [_diag("mismatch", row["message"])],
                                          mismatch=row["message"]))
        elif kind == "fail":
            raise Stop(result=self.from_fail(c, event))
        elif kind == "lost" and c.role == "reference":
            self.lost_at = time.monotonic()  # the candidate exited or failed; its own event says why
        elif kind == "extras" and c.role == "candidate":
            # What a backend's hook gathered so far (kernel launches): kept even if the run stops early.
            self.extras = {k: v for k, v in event.items() if k != "ev"}
        elif kind == "done" and c.role not in self.done:
            self.done[c.role] = event
        elif kind == "result" and c.role == "candidate" and "result" not in self.done:
            result = event.get("result")
            self.done["result"] = result if isinstance(result, dict) else {}

    def count_leftover_events(self, c: Child) -> None:
        """After the decision: what is left unread is only counted (lines a
        candidate forged on the channel are reported as such)."""
        while not c.events.closed and c.events.fill() and len(c.events.buffer) < wire.LINE_MAX:
            if not select.select([c.events.fd], [], [], 0)[0]:
                break
        while (line := c.events.line()) is not None:
            if wire.parse_event(line, self.token) is None:
                self.forged += 1

    def take_extras(self) -> None:
        """The candidate's latest hook report (sent right after each frame, so
        it is on its way when the reference decides): read it before stopping."""
        cand = self.children.get("candidate")
        if cand is None or not self.req.get("candidate_hook"):
            return
        deadline = time.monotonic() + EXTRAS_WAIT_S
        while not cand.events.closed and b'"extras"' not in cand.events.buffer and time.monotonic() < deadline:
            if select.select([cand.events.fd], [], [], 0.02)[0]:
                cand.events.fill()
        while (line := cand.events.line()) is not None:
            event = wire.parse_event(line, self.token)
            if event is not None and event.get("ev") == "extras":
                self.extras = {k: v for k, v in event.items() if k != "ev"}

    def from_fail(self, c: Child, event: dict[str, Any]) -> dict[str, Any]:
        status = str(event.get("status", "runtime_error"))
        if c.role == "candidate" and status not in CANDIDATE_STATUSES:
            status = "runtime_error"  # a candidate may report its own failure, never success
        diags = [d for d in event.get("diagnostics", []) if isinstance(d, dict)]
        extra = {k: v for k, v in event.items() if k not in ("ev", "status", "message", "diagnostics", "harness")}
        return self.failed(status, str(event.get("message", "")), diags, **extra)

    def failed(self, status: str, message: str, diags: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {**self.extras, **extra, "status": status, "message": message, "diagnostics": diags, "cases": list(self.cases),
                "phases": self.phases()}

    def on_exit(self, c: Child) -> None:
        # It may have reported why just before exiting: read what is left first.
        if not c.events.closed:
            while c.events.fill():
                pass
            while (line := c.events.line()) is not None:
                self.on_event(c, line)
        if self.timing_active:
            raise Stop(result=None) if c.role == "candidate" else self.reference_died(c)
        if c.role in self.done or "result" in self.done:
            return
        if c.role == "candidate":
            raise Stop(result=None)  # a crash: results.py reads the exit code and the stack it printed
        if self.lost_at is None:
            raise self.reference_died(c)

    def reference_died(self, c: Child) -> Stop:
        return Stop(result=self.failed(
            "crashed", f"the reference process died ({_exit_text(c.exit_code)}) while {self.last_progress or 'starting'}; "
            "nothing but the candidate signals it", [_diag("crash", "the reference process died")]))

    def check_ops(self) -> None:
        while not self.ops.closed:
            ready, _, _ = select.select([self.ops.fd], [], [], 0)
            if not ready:
                break
            self.ops.fill()
        while (line := self.ops.line()) is not None:
            op = _loads(line).get("op")
            if op in ("cancel", "quit"):
                self.quit = op == "quit"
                raise Stop(killed="cancelled")
            if op == "timing-go":
                self.granted = True
            elif op == "pause":
                self.pause(True)
            elif op == "resume":
                self.pause(False)
        if self.ops.closed:
            raise Stop(killed="worker")  # the harness went away

    def pause(self, stop: bool) -> None:
        """Another evaluation of this host is being timed: stand still meanwhile."""
        if stop == self.stopped:
            return
        self.stopped = stop
        for c in self.children.values():
            try:
                os.killpg(c.pid, signal.SIGSTOP if stop else signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass
        self.hold(stop)

    def hold(self, on: bool) -> None:
        now = time.monotonic()
        if on and self.held_since is None:
            self.held_since = now
        elif not on and self.held_since is not None and not self.stopped:
            held, self.held_since = now - self.held_since, None
            self.deadline += held
            if self.dump_at is not None:
                self.dump_at += held

    def check_limits(self) -> None:
        now = time.monotonic()
        if self.held_since is None:
            if self.dump_at is None and now >= self.deadline:
                # faulthandler in the candidate prints where it is stuck; the
                # stack lands in the output tail and names the line.
                self.dump_at = now
                cand = self.children.get("candidate")
                if cand is not None:
                    _signal(cand.pid, signal.SIGUSR1)
            elif self.dump_at is not None and now - self.dump_at >= STACK_DUMP_S:
                raise Stop(killed="timeout")
        if self.lost_at is not None and now - self.lost_at > LOST_GRACE_S:
            raise Stop(result=self.failed("crashed", "the candidate process stopped sending its outputs",
                                          [_diag("crash", "no outputs from the candidate process")]))
        if self.watch is not None and self.watch.over_limit() or self.pids_exceeded():
            raise Stop(killed="processes")
        cand = self.children.get("candidate")
        if cand is not None and self.memory_mb and sandbox.shared_resident_bytes(cand.pid) > self.memory_mb << 20:
            message = "the candidate mapped more shared memory than its memory cap" + \
                diagnostics.memory_cap_note(self.memory_mb)
            raise Stop(result=self.failed("runtime_error", message, [_diag("memory", message)]))

    def pids_exceeded(self) -> bool:
        wc = self.worker_cgroup
        return wc is not None and wc.events_max() > self.pids_baseline

    def kill_all(self) -> None:
        for c in self.children.values():
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.killpg(c.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        if self.watch is not None:
            self.watch.kill_all()
        for c in self.children.values():
            if c.exit_code is None:
                try:
                    _, status = os.waitpid(c.pid, 0)
                    c.exit_code = os.waitstatus_to_exitcode(status)
                except ChildProcessError:
                    c.exit_code = -signal.SIGKILL

    # ------------------------------------------------------------- reports

    def phases(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for d in self.done.values():
            phases = d.get("phases") if isinstance(d, dict) else None
            if isinstance(phases, dict):
                out.update({k: float(v) for k, v in phases.items() if isinstance(v, (int, float))})
        return out

    def correct_report(self) -> dict[str, Any]:
        cand, ref = self.done["candidate"], self.done["reference"]
        n_cases = len(self.req["task"]["cases"])
        phases = self.phases()
        # Reference and candidate run side by side: the longer one is the cost.
        phases["correctness"] = max(phases.get("reference_correctness", 0.0), phases.get("candidate_correctness", 0.0))
        phases["model_calls"] = max(phases.get("reference_calls", 0.0), phases.get("candidate_calls", 0.0))
        extras = {k: v for k, v in cand.items() if k not in ("ev", "phases", "versions", "threads", "status",
                                                              "message", "diagnostics", "cases", "timing")}
        self.report = {**self.extras, **extras, "status": "correct",
                       "message": f"correct on {len(self.cases)} trial(s) over {n_cases} case(s)",
                       "diagnostics": [], "cases": list(self.cases), "phases": phases,
                       "versions": cand.get("versions", {}), "checks": {"threads": cand.get("threads")}}
        if ref.get("device_name"):
            self.report["device_name"] = ref["device_name"]
        return self.report

    # -------------------------------------------------------------- timing

    def command(self, c: Child, line: str, deadline: float) -> str:
        """Send one command and wait for its reply, still honouring cancel and limits."""
        wire.write_all(c.cmd, (line + "\n").encode())
        self.last_command = line
        calls = int(line.split()[1]) if line.startswith(("rep ", "warm ")) else 1
        return self.reply(c, min(deadline, time.monotonic() + max(TIMING_SLACK_S, self.call_limit * max(1, calls))))

    def command_both(self, ref: Child, ref_line: str, cand: Child, cand_line: str, deadline: float) -> None:
        """Untimed commands to both sides at once: they work in parallel."""
        wire.write_all(ref.cmd, (ref_line + "\n").encode())
        self.command(cand, cand_line, deadline)
        self.reply(ref, deadline)

    def reply(self, c: Child, deadline: float) -> str:
        while True:
            got = c.replies.line()
            if got is not None:
                text = got.decode(errors="replace")
                if text.startswith("err "):
                    raise Stop(result=self.from_fail(c, _loads(text[4:].encode())))
                return text
            if c.replies.closed or c.poll() is not None:
                self.on_exit(c)
                raise Stop(result=self.failed("crashed", f"the {c.role} process stopped answering", []))
            if time.monotonic() > deadline:
                if time.monotonic() < self.deadline:
                    raise Stop(result=self.failed(
                        "timeout", f"the {c.role}'s calls stopped answering while timed: no reply to {self.last_command!r} "
                        f"in {TIMING_SLACK_S:g} s or {TIMED_CALL_FACTOR:g}x the slowest call of the correctness checks "
                        "per call asked, whichever is longer",
                        [_diag("timeout", "a call hung while being timed")]))
                raise Stop(killed="timeout")
            self.pump(min(POLL_S, max(0.0, deadline - time.monotonic())))

    def timing(self) -> dict[str, Any]:
        opts = self.req["timing"]
        ref, cand = self.children["reference"], self.children["candidate"]
        self.reject_leftover_processes(cand)
        self.timing_active = True
        # The host times one evaluation at a time; waiting for the turn does not count against the deadline.
        self.send({"ev": "timing-wait"})
        self.hold(True)
        while not self.granted:
            self.pump(POLL_S)
        self.hold(False)
        n_cases = len(self.req["task"]["cases"])
        self.send({"ev": "progress", "progress": 2 + n_cases, "total": 3 + n_cases, "message": "timing"})
        slowest = max(float(self.done[r].get("slowest_call") or 0.0) for r in ("reference", "candidate"))
        # How long one timing command may take: a call that hangs only now must
        # not hold the host's timing turn until the evaluation's deadline.
        self.call_limit = TIMED_CALL_FACTOR * slowest
        start = time.perf_counter()
        try:
            ref_s, cand_s, checks = self.measure(ref, cand, opts, self.deadline)
        finally:
            self.send({"ev": "timing-done"})
        elapsed = time.perf_counter() - start
        phases = self.report["phases"]
        phases["timing"] = elapsed
        phases["model_calls"] = phases.get("model_calls", 0.0) + elapsed
        self.report["checks"].update(checks)
        chosen = int(self.done["reference"].get("chosen", 0))
        return {"reference": timing.stats(ref_s), "candidate": timing.stats(cand_s),
                "case": self.req["task"]["cases"][chosen], "timer": opts.get("timer", "perf_counter")}

    def measure(self, ref: Child, cand: Child, opts: dict[str, Any], end: float):
        own_cpus = os.sched_getaffinity(0)
        cpus = pin_together([ref.pid, cand.pid, os.getpid()], int(self.req.get("threads", 1)))
        try:
            return self._measure(ref, cand, opts, end, cpus)
        finally:
            os.sched_setaffinity(0, own_cpus)  # the next evaluation's children inherit it

    def _measure(self, ref: Child, cand: Child, opts: dict[str, Any], end: float, cpus: list[int]):
        device_clock = opts.get("timer", "perf_counter") != "perf_counter"
        fastest = {c.role: self.claimed(c, self.command(c, f"warm {int(opts.get('warmup', 3))}", end))
                   for c in (ref, cand)}
        # Calls per sample, so one sample lasts about INNER_TARGET_S: fewer
        # command round trips per budget (a device timer's own clock excludes them anyway).
        inner = {role: max(1, min(MAX_INNER, math.ceil(INNER_TARGET_S / max(t, 1e-7)))) for role, t in fastest.items()}
        all_streams: set[str] = set()
        guard = ReferenceGuard(ref)
        cpu = CpuMeter(cand.pid)
        # Threads alive now (torch's, a pool the candidate made while checked) may
        # stay; one that a timed call starts and leaves running is work after the timer.
        known = thread_ids(cand.pid)
        fresh_at = secrets.randbelow(max(1, int(opts.get("min_reps", 10))))
        state: dict[str, Any] = {"n": 0, "idle": 0.0, "busy": 0.0, "after": None, "fresh": False}
        gaps: dict[str, list[float]] = {"reference": [], "candidate": []}
        claims: list[float] = []

        def sample(c: Child) -> float:
            n = inner[c.role]
            t0 = time.perf_counter()
            text = self.command(c, f"rep {n}", end)
            wall = time.perf_counter() - t0
            meddled = guard.meddled()
            if meddled:
                raise Stop(result=self.failed(
                    "rejected", f"while the reference process was being timed, something {meddled}: only the "
                    "candidate's process could have", [_diag("cheat", f"the reference process was {meddled}")]))
            claimed = self.claimed(c, text) * n
            if text.endswith(" all-streams"):
                all_streams.add(c.role)
            if claimed > wall:
                raise self.misreported(f"a batch took {wall * 1e3:.3f} ms by the worker's clock but was reported "
                                       f"as {claimed * 1e3:.3f} ms")
            gaps[c.role].append(wall - claimed)
            if c is cand:
                claims.append(claimed)
            return claimed / n

        def cand_sample() -> float:
            before = cpu.seconds()
            if state["after"] is not None:
                state["idle"] += before - state["after"]
            if state["n"] == fresh_at:
                # The reference makes them from a seed the candidate never learns, and sends them.
                self.command_both(ref, f"fresh {secrets.randbits(31)}", cand, "fresh", end)
                before = cpu.seconds()
            value = sample(cand)
            after = cpu.seconds()
            state["busy"] += after - before
            now = thread_ids(cand.pid)
            if now - known:
                raise Stop(result=self.failed(
                    "rejected", f"a timed call of the candidate started {len(now - known)} thread(s) that were still "
                    "running after it returned; work left on background threads is not allowed",
                    [_diag("cheat", "threads left running after forward returned")]))
            known.update(now)
            if state["n"] == fresh_at:
                state["fresh"] = self.fresh_check(ref, cand, end)
                after = cpu.seconds()
            state["after"] = after
            state["n"] += 1
            return value

        ref_s, cand_s = timing.measure_alternating(
            lambda: sample(ref), cand_sample, warmup=0, min_reps=int(opts.get("min_reps", 10)),
            max_reps=int(opts.get("max_reps", 200)), budget_s=float(opts.get("budget_s", 2.0)),
            precision=float(opts.get("precision", 0.0)),
        )
        self.reject_leftover_processes(cand)
        idle, busy = state["idle"], state["busy"]
        if idle > max(IDLE_CPU_FLOOR_S, IDLE_CPU_SHARE * busy):
            raise Stop(result=self.failed(
                "rejected", f"the candidate kept computing after its calls returned: {idle * 1000:.1f} ms of CPU "
                f"while it was not being called ({busy * 1000:.1f} ms while it was); work left on background "
                "threads or processes is not allowed", [_diag("cheat", "background work after forward returned")]))
        # The smallest gap: a loaded machine only ever adds delay to the worker's
        # view, while a process that under-reports adds its lie to every sample.
        gap_ref, gap_cand = min(gaps["reference"]), min(gaps["candidate"])
        if not device_clock and gap_cand - gap_ref > max(MISREPORT_FLOOR_S, MISREPORT_SHARE * statistics.median(claims)):
            raise self.misreported(f"its batches took at least {gap_cand * 1e3:.3f} ms longer by the worker's clock "
                                   f"than reported; the reference's, {gap_ref * 1e3:.3f} ms")
        checks = {"cpus": cpus, "inner_calls": inner, "idle_cpu_ms": round(idle * 1000, 3),
                  "clock_gap_us": {"reference": round(gap_ref * 1e6, 1), "candidate": round(gap_cand * 1e6, 1)},
                  "fresh_inputs_checked": state["fresh"]}
        if all_streams:
            # Device work left on another stream after a call's end event: from then on
            # that side was timed with the device synchronised inside each call's events.
            checks["other_streams"] = sorted(all_streams)
        return ref_s, cand_s, checks

    def reject_leftover_processes(self, cand: Child) -> None:
        assert self.watch is not None
        leftover = [p.pid for p in self.watch.members() if p.pid != cand.pid]
        if leftover:
            raise Stop(result=self.failed("rejected", f"the candidate left {len(leftover)} process(es) running after "
                                          "its calls returned", [_diag("cheat", "background processes left running")]))

    def claimed(self, c: Child, text: str) -> float:
        try:
            value = float(text.split()[1])
        except (IndexError, ValueError):
            value = -1.0
        if not value >= 0:
            if c.role == "candidate":
                raise self.misreported(f"its reply {text[:60]!r} carries no time")
            raise Stop(result=self.failed("crashed", f"the reference process sent no time ({text[:60]!r})", []))
        return value

    def misreported(self, detail: str) -> Stop:
        return Stop(result=self.failed(
            "rejected", f"the candidate's process misreported how long its calls took: {detail}",
            [_diag("cheat", "timing reports that the worker's clock contradicts")]))

    def fresh_check(self, ref: Child, cand: Child, end: float) -> bool:
        # The reference starts reading before the candidate writes: a frame
        # larger than a pipe buffer would otherwise block the candidate.
        wire.write_all(ref.cmd, b"check\n")
        self.command(cand, "check", end)
        verdict = self.reply(ref, end)
        if verdict.startswith("bad "):
            message = str(_loads(verdict[4:].encode()).get("message", ""))
            raise Stop(result=self.failed(
                "rejected", f"while timed, on inputs it had not seen before, the candidate's output was wrong "
                f"({message}): it returns results computed for earlier inputs",
                [_diag("cheat", f"stale output on fresh inputs during timing: {message}")]))
        return True

    def profile(self) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            return {role: float(self.command(c, "profile", self.deadline).split()[1])
                    for role, c in self.children.items()}
        except (Stop, ValueError, IndexError) as exc:
            return {"error": f"device profile failed: {exc}"}
        finally:
            self.report["phases"]["device_profile"] = time.perf_counter() - start


def pin_together(pids: list[int], threads: int) -> list[int]:
    """Run both sides on the same CPUs while they are timed: on a shared
    machine each then meets the same contention, instead of one side landing
    on a busy core. The CPUs are where the first process runs now."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except OSError:
        return []
    k = max(1, min(len(allowed), threads))
    current = _current_cpu(pids[0])
    first = allowed.index(current) if current in allowed else 0
    chosen = {allowed[(first + i) % len(allowed)] for i in range(k)}
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:  # threads started later inherit it
            try:
                os.sched_setaffinity(tid, chosen)
            except OSError:
                pass
    return sorted(chosen)


def _current_cpu(pid: int) -> int | None:
    try:
        return int(sandbox.stat_fields(pid)[36])
    except (ValueError, IndexError):
        return None


class ReferenceGuard:
    """What another process of the same user could do to slow the reference
    down while it is timed: stop and continue it (SIGSTOP/SIGCONT), lower
    its priority or scheduling class, or move it to other CPUs. The worker
    does none of these during its own timing phase (it holds the timing
    turn, so nothing pauses it), so any of them is the candidate's doing."""

    def __init__(self, ref: Child):
        self.ref = ref
        ref.poll()  # stops and continues of the pauses before timing are not counted
        self.job_changes = ref.job_changes
        self.settings = self.read()
        own = (os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0))
        self.lowered = any(nice_policy != own for nice_policy, _ in self.settings.values())

    def read(self) -> dict[int, tuple[tuple[int, int], frozenset[int]]]:
        out = {}
        for tid in thread_ids(self.ref.pid):
            try:
                out[tid] = ((os.getpriority(os.PRIO_PROCESS, tid), os.sched_getscheduler(tid)),
                            frozenset(os.sched_getaffinity(tid)))
            except OSError:
                continue  # the thread ended
        return out

    def meddled(self) -> str:
        """What was done to the reference process since timing began ("" if nothing)."""
        self.ref.poll()
        if self.ref.job_changes != self.job_changes:
            return "stopped and resumed it"
        if self.lowered:
            return "lowered its priority"
        now = self.read()
        for tid, setting in now.items():
            before = self.settings.get(tid)
            if before is not None and before != setting:
                return "lowered its priority" if before[0] != setting[0] else "moved it to other CPUs"
        return ""


def thread_ids(pid: int) -> set[int]:
    try:
        return {int(t) for t in os.listdir(f"/proc/{pid}/task")}
    except (OSError, ValueError):
        return set()


class CpuMeter:
    """CPU time of one process: all its threads, those that already exited
    included (a thread started per call and gone by the next sample still
    counts). The kernel's per-process CPU clock, readable for any process
    of this PID namespace, ns-exact; /proc's tick counts where it is not,
    and for the children it reaped."""

    def __init__(self, pid: int):
        self.pid = pid
        self.clock = ((~pid) << 3) | 2  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED) of the kernel's ABI

    def seconds(self) -> float:
        """Its own CPU time plus that of the children it has reaped (a helper
        process started and waited for during a call still counts)."""
        ticks = self._ticks()
        try:
            own = time.clock_gettime(self.clock)
        except OSError:
            own = (ticks[0] + ticks[1]) / self.hz
        return own + (ticks[2] + ticks[3]) / self.hz

    hz = os.sysconf("SC_CLK_TCK")

    def _ticks(self) -> tuple[int, int, int, int]:
        """utime, stime, cutime, cstime from /proc (clock ticks)."""
        try:
            fields = sandbox.stat_fields(self.pid)
            return int(fields[11]), int(fields[12]), int(fields[13]), int(fields[14])
        except (ValueError, IndexError):
            return 0, 0, 0, 0


def _diag(category: str, message: str) -> dict[str, Any]:
    return {"category": category, "message": message, "line": None, "column": None, "severity": "error",
            "kernel": None}


def _loads(line: bytes) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
