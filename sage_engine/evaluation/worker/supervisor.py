"""Supervising the children of one evaluation: the event pump, the deadline
(stopped while the evaluation waits for the host's timing turn or stands
still for another evaluation's), the limits (processes, shared memory), the
host's operations, and commands with their replies.

An evaluation ends early by raising `Ended` from wherever it was decided (an
event, a limit, a reply): one exit path, caught once in `Evaluation.run`.
"""

from __future__ import annotations

import os
import select
import signal
import time
from typing import Callable, Protocol

from sage_engine.evaluation.common import diagnostics
from sage_engine.evaluation.protocol import wire
from sage_engine.evaluation.common.cgroups import PidsCgroup
from sage_engine.evaluation.common.processes import ProcessWatch, shared_resident_bytes
from sage_engine.evaluation.protocol import (
    CANDIDATE_STATUSES,
    Event,
    Fail,
    Judgement,
    Op,
    Report,
    Request,
    VariantRow,
    parse_child_event,
    parse_fail,
)
from sage_engine.evaluation.worker.children import Child

POLL_S = 0.05
STACK_DUMP_S = 0.5  # on timeout, time the candidate gets to print its stack before SIGKILL
LOST_GRACE_S = 2.0  # after one side ends, how long the other may take to say why
# A timing command (per call it asks for) may take this long, or this many
# times the slowest call seen during the correctness checks, whichever is
# more: a call that hangs only while timed must not hold the host's timing turn.
TIMING_SLACK_S = 30.0
TIMED_CALL_FACTOR = 10.0


class Ended(Exception):
    """The evaluation is over: `killed` says by what (a timeout, a cancel, too
    many processes), or `report` says what was decided."""

    def __init__(self, killed: str | None = None, report: Report | None = None):
        super().__init__(killed or (report.message if report else ""))
        self.killed, self.report = killed, report


def decided(status: str, message: str, category: str, detail: str | None = None) -> Ended:
    """An evaluation decided with one diagnostic."""
    return Ended(report=Report(status, message, [diagnostics.diagnostic(category, detail or message)]))


class Owner(Protocol):
    """What the supervisor hands each believed event and each exit to."""

    def on_event(self, child: Child, event: Event) -> None: ...

    def on_exit(self, child: Child) -> None: ...


class Supervisor:
    def __init__(
        self,
        request: Request,
        owner: Owner,
        *,
        send: Callable[[Event], None],
        ops: wire.LineReader,
        cgroup: PidsCgroup | None,
        worker_cgroup: PidsCgroup | None,
    ):
        self.req, self.owner, self.send, self.ops = request, owner, send, ops
        self.cgroup = cgroup  # this evaluation's own (limits-only), or None
        self.worker_cgroup = worker_cgroup  # the whole sandbox's (confined), or None
        self.pids_baseline = worker_cgroup.events_max() if worker_cgroup is not None else 0
        self.children: dict[str, Child] = {}
        self.watch: ProcessWatch | None = None
        self.forged = 0  # event lines without the token: written by the candidate, not believed
        self.deadline = time.monotonic() + request.timeout_s
        self.dump_at: float | None = None
        self.lost_at: float | None = None  # when the reference stopped getting frames
        self.held_since: float | None = None  # paused, or waiting for the timing turn: the deadline stops
        self.stopped = False  # children SIGSTOPped while another evaluation times
        self.granted = False  # the host's timing turn is ours
        self.quit = False  # the host asked the worker to end
        self.call_limit = float("inf")  # per call, once timing starts
        self.last_command = ""
        self.shared_inputs = 0  # bytes of inputs the reference shared: mapped by the candidate beyond its cap

    def watch_candidate(self) -> None:
        self.watch = ProcessWatch(self.children["candidate"].pid, self.cgroup, self.req.limits.max_tasks)

    # ---------------------------------------------------------- event pump

    def wait_for(self, ready: Callable[[], bool]) -> None:
        while not ready():
            self.pump(POLL_S)

    def pump(self, timeout: float, alone: Child | None = None) -> None:
        """One round: the host's operations, limits, every child's pipes
        (only `alone`'s, while its sample is timed: what the other writes
        then waits, instead of costing the worker time on the CPU both sides
        are timed on), exits."""
        self.check_ops()
        self.check_limits()
        fds = [] if self.ops.closed else [self.ops.fd]
        for c in self.children.values():
            if alone is not None and c is not alone:
                continue
            fds += [r.fd for r in (c.events, c.replies) if not r.closed]
            if c.out_open:
                fds.append(c.output)
        ready, _, _ = select.select(fds, [], [], timeout)
        for c in list(self.children.values()):
            if c.events.fd in ready:
                c.events.fill()
                self.read_events(c)
            if c.replies.fd in ready:
                c.replies.fill()
            if c.out_open and c.output in ready:
                self.drain_output(c)
        for c in self.children.values():
            if c.poll() is not None:
                self.owner.on_exit(c)

    def read_events(self, c: Child) -> None:
        while (line := c.events.line()) is not None:
            event = parse_child_event(line, self.req.token)
            if event is None:
                self.forged += 1
            else:
                self.owner.on_event(c, event)

    def read_remaining(self, c: Child) -> None:
        """What a child wrote before it exited (it may have said why)."""
        if not c.events.closed:
            while c.events.fill():
                pass
            self.read_events(c)

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

    def count_leftover_events(self, c: Child) -> None:
        """After the decision: what is left unread is only counted (lines a
        candidate forged on the channel are reported as such)."""
        while not c.events.closed and c.events.fill() and len(c.events.buffer) < wire.LINE_MAX:
            if not select.select([c.events.fd], [], [], 0)[0]:
                break
        while (line := c.events.line()) is not None:
            if parse_child_event(line, self.req.token) is None:
                self.forged += 1

    # ------------------------------------------------------- host operations

    def check_ops(self) -> None:
        while not self.ops.closed:
            ready, _, _ = select.select([self.ops.fd], [], [], 0)
            if not ready:
                break
            self.ops.fill()
        while (line := self.ops.line()) is not None:
            op = Op.parse(line)
            kind = op.op if op is not None else None
            if kind in (Op.CANCEL, Op.QUIT):
                self.quit = kind == Op.QUIT
                raise Ended(killed="cancelled")
            if kind == Op.TIMING_GO:
                self.granted = True
            elif kind == Op.PAUSE:
                self.pause(True)
            elif kind == Op.RESUME:
                self.pause(False)
        if self.ops.closed:
            raise Ended(killed="worker")  # the host went away

    def pause(self, stop: bool) -> None:
        """Another evaluation of this host is being timed: stand still meanwhile."""
        if stop == self.stopped:
            return
        self.stopped = stop
        for c in self.children.values():
            _signal_group(c.pid, signal.SIGSTOP if stop else signal.SIGCONT)
        self.hold(stop)

    def hold(self, on: bool) -> None:
        """Stop (or restart) the deadline's clock."""
        now = time.monotonic()
        if on and self.held_since is None:
            self.held_since = now
        elif not on and self.held_since is not None and not self.stopped:
            held, self.held_since = now - self.held_since, None
            self.deadline += held
            if self.dump_at is not None:
                self.dump_at += held

    # ---------------------------------------------------------------- limits

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
                raise Ended(killed="timeout")
        if self.lost_at is not None and now - self.lost_at > LOST_GRACE_S:
            raise decided("crashed", "the candidate process stopped sending its outputs", "crash", "no outputs from the candidate process")
        if self.watch is not None and self.watch.over_limit() or self.pids_exceeded():
            raise Ended(killed="processes")
        cand, cap = self.children.get("candidate"), self.req.limits.memory_mb
        if cand is not None and cap and shared_resident_bytes(cand.pid) > (cap << 20) + self.shared_inputs:
            raise decided(
                "runtime_error", "the candidate mapped more shared memory than its memory cap" + diagnostics.memory_cap_note(cap), "memory"
            )

    def pids_exceeded(self) -> bool:
        wc = self.worker_cgroup
        return wc is not None and wc.events_max() > self.pids_baseline

    def kill_all(self) -> None:
        for c in self.children.values():
            for sig in (signal.SIGKILL, signal.SIGCONT):
                _signal_group(c.pid, sig)
        if self.watch is not None:
            self.watch.kill_all()
        for c in self.children.values():
            if c.exit_code is None:
                try:
                    _, status = os.waitpid(c.pid, 0)
                    c.exit_code = os.waitstatus_to_exitcode(status)
                except ChildProcessError:
                    c.exit_code = -signal.SIGKILL

    def close(self) -> None:
        for c in self.children.values():
            for fd in c.fds():
                try:
                    os.close(fd)
                except OSError:
                    pass

    # -------------------------------------------------------------- commands

    def command(self, c: Child, line: str, deadline: float, timed: bool = False) -> str:
        """Send one command and wait for its reply, still honouring cancel and
        limits; `timed`: a timed sample, during which only `c`'s pipes are read."""
        wire.write_all(c.cmd, (line + "\n").encode())
        self.last_command = line
        calls = int(line.split()[1]) if line.startswith(("rep ", "warm ")) else 1
        return self.reply(c, min(deadline, time.monotonic() + max(TIMING_SLACK_S, self.call_limit * max(1, calls))), timed)

    def command_both(self, ref: Child, ref_line: str, cand: Child, cand_line: str, deadline: float) -> None:
        """Untimed commands to both sides at once: they work in parallel."""
        wire.write_all(ref.cmd, (ref_line + "\n").encode())
        self.command(cand, cand_line, deadline)
        self.reply(ref, deadline)

    def reply(self, c: Child, deadline: float, timed: bool = False) -> str:
        while True:
            got = c.replies.line()
            if got is not None:
                text = got.decode(errors="replace")
                if text.startswith("err "):
                    raise Ended(report=fail_report(c, parse_fail(text[4:].encode())))
                return text
            if c.replies.closed or c.poll() is not None:
                self.owner.on_exit(c)
                raise Ended(report=Report("crashed", f"the {c.role} process stopped answering"))
            if time.monotonic() > deadline:
                if time.monotonic() < self.deadline:
                    raise decided(
                        "timeout",
                        f"the {c.role}'s calls stopped answering while timed: no reply to "
                        f"{self.last_command!r} in {TIMING_SLACK_S:g} s or {TIMED_CALL_FACTOR:g}x the slowest call "
                        "of the correctness checks per call asked, whichever is longer",
                        "timeout",
                        "a call hung while being timed",
                    )
                raise Ended(killed="timeout")
            self.pump(min(POLL_S, max(0.0, deadline - time.monotonic())), c if timed else None)


def fail_report(c: Child, fail: Fail) -> Report:
    """The report for a child's failure: a candidate may report its own failure, never success."""
    status = fail.status
    if c.role == "candidate" and status not in CANDIDATE_STATUSES:
        status = "runtime_error"
    diags = [d for d in fail.diagnostics if isinstance(d, dict)]
    # A failure at a shape variant names it in the result's variants too.
    failed = Judgement(variants=[VariantRow(str(fail.variant), "failed", str(fail.at))]) if fail.variant else None
    return Report(status, str(fail.message), diags, hook=fail.hook, judgement=failed)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
