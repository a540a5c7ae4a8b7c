"""One evaluation, as the worker runs it, phase by phase.

Forks the reference and candidate processes (`children.py`) under a
`Supervisor`, relays their progress and case rows to the host, takes their
verdicts (correctness), times both sides (`timed.py`) once the host's timing
turn is theirs, and reports (`Report`, inside the `Outcome`). A backend's
runner routine replaces the two sides with one process and its answer.

Standard library only (torch lives in the children).
"""

from __future__ import annotations

import os
import select
import time
from typing import Callable

from sage_engine.evaluation.common import diagnostics, timing
from sage_engine.evaluation.protocol import wire
from sage_engine.evaluation.common.cgroups import PidsCgroup
from sage_engine.evaluation.protocol import (
    CandidateDone,
    CaseEvent,
    CaseResult,
    Event,
    Extras,
    Fail,
    HookReport,
    InputsShared,
    Lost,
    Outcome,
    ProgressEvent,
    ReferenceDone,
    Report,
    Request,
    RunnerResult,
    Started,
    TimingDone,
    TimingOptions,
    TimingReport,
    TimingWait,
    Verdict,
    parse_child_event,
)
from sage_engine.evaluation.worker.children import Child, bulk_pipe, shared_file, spawn
from sage_engine.evaluation.worker.supervisor import POLL_S, TIMED_CALL_FACTOR, Ended, Supervisor, fail_report
from sage_engine.evaluation.worker.timed import TimingPhase, device_profile, profile_phase, reject_leftover_processes

EXTRAS_WAIT_S = 0.5  # how long a verdict waits for the candidate's hook report of the same trial


class Evaluation:
    """Runs one request. `send` writes an event to the host; `ops` reads the
    host's operations (cancel, timing-go, pause, resume, quit)."""

    def __init__(
        self,
        request: Request,
        *,
        send: Callable[[Event], None],
        ops: wire.LineReader,
        workdir: str,
        cgroup: PidsCgroup | None,
        worker_cgroup: PidsCgroup | None,
    ):
        self.req = request
        self.send = send
        self.workdir = workdir
        self.sup = Supervisor(request, self, send=send, ops=ops, cgroup=cgroup, worker_cgroup=worker_cgroup)
        self.cases: list[CaseResult] = []
        self.ref_done: ReferenceDone | None = None
        self.cand_done: CandidateDone | None = None
        self.runner_result: dict | None = None
        self.extras: HookReport | None = None  # what the candidate's backend hook reported last
        self.last_progress = ""
        self.timing_active = False

    @property
    def quit(self) -> bool:
        """The host asked the worker itself to end."""
        return self.sup.quit

    # ------------------------------------------------------------- running

    def run(self) -> Outcome:
        start = time.monotonic()
        outcome = Outcome()
        sup = self.sup
        try:
            if self.req.runner and self.req.measures_host:
                self.take_turn()  # the host's limits are measured while nothing else there is timed
            self.start_children()
            if self.req.runner:
                sup.wait_for(lambda: self.runner_result is not None)
                outcome.runner_result = self.runner_result
            else:
                outcome.report = self.evaluate()
        except Ended as end:
            outcome.killed = end.killed
            outcome.report = self.complete(end.report) if end.report is not None else None
        finally:
            sup.kill_all()
            for c in sup.children.values():
                sup.count_leftover_events(c)
            cand = sup.children.get("candidate")
            if cand is not None:
                sup.drain_output(cand, until_eof=True)
                outcome.exit_code = cand.exit_code
                outcome.output_tail, outcome.output_bytes = cand.tail.text(), cand.tail.total
            sup.close()
        if outcome.killed is None and sup.pids_exceeded():
            outcome.killed, outcome.report, outcome.runner_result = "processes", None, None
        outcome.cases = list(self.cases)
        outcome.forged_lines = sup.forged
        outcome.wall_s = time.monotonic() - start
        return outcome

    def start_children(self) -> None:
        data_r, data_w = bulk_pipe()  # the candidate's outputs, to the reference
        in_r, in_w = os.pipe()  # where the reference placed each trial's inputs (headers), to the candidate
        cand_dir = os.path.join(self.workdir, "candidate")
        os.makedirs(cand_dir, exist_ok=True)
        shared = shared_file()  # the candidate's copy of the inputs, shared with the reference
        cgroup = str(self.sup.cgroup.path) if self.sup.cgroup is not None else None
        children = self.sup.children
        try:
            if not self.req.runner:
                ref_dir = os.path.join(self.workdir, "reference")
                os.makedirs(ref_dir, exist_ok=True)
                children["reference"] = spawn("reference", self.req, ref_dir, data_r, in_w, shared, None)
            children["candidate"] = spawn("candidate", self.req, cand_dir, data_w, in_r, shared, cgroup)
        finally:
            for fd in (data_r, data_w, in_r, in_w, shared):
                os.close(fd)
        self.sup.watch_candidate()
        self.send(Started(pids=[c.pid for c in children.values()]))

    def evaluate(self) -> Report:
        """Correctness, then timing where the request asks for it."""
        ref, cand = self.both_done()
        report = self.correct_report(ref, cand)
        options = self.req.timing
        if options is not None:
            report.timing = self.timing(report, ref, cand, options)
            if report.timing is None:
                return report
            if self.req.device_time:
                start = time.perf_counter()
                report.timing.device_time_us = device_profile(self.sup)
                report.phases["device_profile"] = time.perf_counter() - start
            if self.req.profile is not None:
                start = time.perf_counter()
                report.profile = profile_phase(self.sup, report.timing, self.req.profile)
                report.phases["profile"] = time.perf_counter() - start
        return report

    # ---------------------------------------------------------- correctness

    def on_event(self, c: Child, event: Event) -> None:
        """A believed event from a child: each kind only from the side that may send it."""
        candidate = c.role == "candidate"
        if isinstance(event, ProgressEvent) and candidate:
            self.last_progress = event.message
            self.send(event)
        elif isinstance(event, CaseEvent) and not candidate:
            self.cases.append(event.case_result)  # to the host once, in the Outcome
        elif isinstance(event, Verdict) and not candidate and self.cases:
            self.take_extras()
            row = self.cases[-1]
            where = row.variant or f"case {row.case or 'default'} trial {row.trial}"
            message = row.message if row.variant else f"{where}: {row.message}"
            diags = [diagnostics.diagnostic("mismatch", row.message)]
            raise Ended(report=Report("incorrect", message, diags, mismatch=row.message, judgement=event.judgement))
        elif isinstance(event, Fail):
            raise Ended(report=fail_report(c, event))
        elif isinstance(event, InputsShared) and not candidate:
            self.sup.shared_inputs = event.placed
        elif isinstance(event, Lost) and not candidate:
            self.sup.lost_at = time.monotonic()  # the candidate exited or failed; its own event says why
        elif isinstance(event, Extras) and candidate:
            # What a backend's hook gathered so far (kernel launches): kept even if the run stops early.
            self.extras = event.hook
        elif isinstance(event, ReferenceDone) and not candidate and self.ref_done is None:
            self.ref_done = event
        elif isinstance(event, CandidateDone) and candidate and self.cand_done is None:
            self.cand_done = event
        elif isinstance(event, RunnerResult) and candidate and self.runner_result is None:
            self.runner_result = event.result

    def on_exit(self, c: Child) -> None:
        # It may have reported why just before exiting: read what is left first.
        self.sup.read_remaining(c)
        if self.timing_active:
            raise Ended() if c.role == "candidate" else _reference_died(c, self.last_progress)
        if self.runner_result is not None or (self.ref_done if c.role == "reference" else self.cand_done):
            return
        if c.role == "candidate":
            raise Ended()  # a crash: results.py reads the exit code and the stack it printed
        if self.sup.lost_at is None:
            raise _reference_died(c, self.last_progress)

    def take_extras(self) -> None:
        """The candidate's latest hook report (sent right after each frame, so
        it is on its way when the reference decides): read it before stopping."""
        cand = self.sup.children.get("candidate")
        if cand is None or not self.req.candidate_hook:
            return
        deadline = time.monotonic() + EXTRAS_WAIT_S
        while not cand.events.closed and b'"extras"' not in cand.events.buffer and time.monotonic() < deadline:
            if select.select([cand.events.fd], [], [], 0.02)[0]:
                cand.events.fill()
        while (line := cand.events.line()) is not None:
            event = parse_child_event(line, self.req.token)
            if isinstance(event, Extras):
                self.extras = event.hook

    # --------------------------------------------------------------- reports

    def complete(self, report: Report) -> Report:
        """A decision, with what is known so far: the case rows, the phases, the hook's report."""
        report.phases = _phases(self.ref_done, self.cand_done)
        report.hook = (self.extras or HookReport()).merged(report.hook) if self.extras or report.hook else None
        return report

    def both_done(self) -> tuple[ReferenceDone, CandidateDone]:
        """Both children's final reports, once both arrived."""
        while self.ref_done is None or self.cand_done is None:
            self.sup.pump(POLL_S)
        return self.ref_done, self.cand_done

    def correct_report(self, ref: ReferenceDone, cand: CandidateDone) -> Report:
        phases = _phases(ref, cand)
        # Reference and candidate run side by side: the longer one is the cost.
        phases["correctness"] = max(phases.get("reference_correctness", 0.0), phases.get("candidate_correctness", 0.0))
        phases["model_calls"] = max(phases.get("reference_calls", 0.0), phases.get("candidate_calls", 0.0))
        declared = [c for c in self.cases if not c.variant]
        variants = sum(1 for v in ref.judgement.variants if v.status == "passed")
        message = f"correct on {len(declared)} trial(s) over {len(self.req.task.cases)} case(s)" + (
            f" and {variants} shape variant(s)" if variants else ""
        )
        return Report(
            "correct",
            message,
            phases=phases,
            versions=dict(cand.versions),
            checks={"threads": cand.threads, "inputs": ref.inputs},
            device_name=ref.device_name,
            hook=(self.extras or HookReport()).merged(cand.hook) if self.extras or cand.hook else None,
            judgement=ref.judgement,
        )

    # ---------------------------------------------------------------- timing

    def take_turn(self) -> None:
        """The host times one evaluation at a time; waiting for the turn does not count against the deadline."""
        self.send(TimingWait())
        self.sup.hold(True)
        while not self.sup.granted:
            self.sup.pump(POLL_S)
        self.sup.hold(False)

    def timing(self, report: Report, ref: ReferenceDone, cand: CandidateDone, options: TimingOptions) -> TimingReport | None:
        """Both sides timed; None where a timing of no consequence (an
        interpreter's) would not fit its wall: the kernel stays correct."""
        wall = options.wall_s
        if wall is None:
            return self.timed(report, ref, cand, options)
        slowest = max(ref.slowest_call, cand.slowest_call)
        needed = 2 * slowest * (options.warmup + options.min_reps)
        if needed > wall:
            report.diagnostics.append(_timing_left_out(f"timing skipped: one call takes up to {slowest:.1f} s here"))
            return None
        try:
            return self.timed(report, ref, cand, options)
        except Ended as end:
            if end.report is None or end.report.status != "timeout":
                raise
            report.diagnostics.append(_timing_left_out(f"timing incomplete: stopped after {wall:g} s"))
            return None

    def timed(self, report: Report, ref_done: ReferenceDone, cand_done: CandidateDone, options: TimingOptions) -> TimingReport:
        sup = self.sup
        ref, cand = sup.children["reference"], sup.children["candidate"]
        reject_leftover_processes(sup, cand)
        self.timing_active = True
        self.take_turn()
        total = self.req.progress_total
        self.send(ProgressEvent(total - 1, total, "timing"))
        # How long one timing command may take: a call that hangs only now must
        # not hold the host's timing turn until the evaluation's deadline.
        sup.call_limit = TIMED_CALL_FACTOR * max(ref_done.slowest_call, cand_done.slowest_call)
        start = time.perf_counter()
        try:
            ref_s, cand_s, checks = TimingPhase(sup, ref, cand, options, input_bytes=ref_done.timed_bytes, phases=report.phases).run()
        finally:
            self.send(TimingDone())
        elapsed = time.perf_counter() - start
        report.phases["timing"] = elapsed
        report.phases["model_calls"] = report.phases.get("model_calls", 0.0) + elapsed
        report.checks.update(checks)
        return TimingReport(timing.stats(ref_s), timing.stats(cand_s), case=self.req.task.cases[ref_done.chosen], timer=options.timer)


def _phases(*sides: ReferenceDone | CandidateDone | None) -> dict[str, float]:
    """Each side's phase times, as far as it got."""
    out: dict[str, float] = {}
    for done in sides:
        if done is not None:
            out.update({k: float(v) for k, v in done.phases.items() if isinstance(v, (int, float))})
    return out


def _reference_died(c: Child, doing: str) -> Ended:
    message = f"the reference process died ({_exit_text(c.exit_code)}) while {doing or 'starting'}; nothing but the candidate signals it"
    return Ended(report=Report("crashed", message, [diagnostics.diagnostic("crash", "the reference process died")]))


def _timing_left_out(what: str) -> dict:
    """The info that a timing of no consequence (an interpreter's) was left out."""
    text = f"{what}; these times would say nothing of a device anyway, and the kernel's correctness stands"
    return diagnostics.diagnostic("timing", text, severity="info")


def _exit_text(code: int | None) -> str:
    import signal

    if code is None:
        return "still running"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
