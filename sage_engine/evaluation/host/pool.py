"""Where evaluations run: sandboxed worker processes, a few at a time.

`WorkerPool.run(request, launch, on_event, cancel)` returns the `Outcome`
of one evaluation, whatever the candidate did. A worker (`workers.py`,
running `evaluation/worker/`) is
started per launch setting (interpreter, environment), inside its own
bubblewrap sandbox when this host can confine (`confine.py`); warm workers
serve many requests, cold ones (device backends) one. If a worker dies or
hangs it is killed and the next request starts a new one.

Fairness: at most `Config.eval_workers` evaluations run at once, each on its
own worker, so a hung candidate holds only its caller's slot. Timing is what
concurrency spoils, so it takes turns: one timing phase at a time per host
(a file lock under the temp dir, shared by every SAGE process), and while
one evaluation of this process times, the others of this process are
paused (SIGSTOP) and their deadlines stopped, for at most
`Config.timing_pause_max_s`; correctness work overlaps.

A candidate's build folder (C++ extensions, Triton caches) is private: the
sandbox sees the cache read-only and a writable copy of only this
candidate's folder; after the evaluation the harness publishes the folder
back into the cache under the candidate's source hash, so no candidate can
write into another's build.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path

from sage_engine.evaluation.common.cgroups import PidsCgroup
from sage_engine.evaluation.host import confine
from sage_engine.evaluation.host.builds import publish_build, remove_foreign_files, remove_stale_locks
from sage_engine.evaluation.host.launch import Launch, Sandboxing, sweep_leftovers
from sage_engine.evaluation.host.workers import POLL_S, EvaluationRun, EventSink, SandboxFailed, TimingTurn, WorkerProcess, WorkerStartError
from sage_engine.evaluation.protocol import Op, Outcome, Request

log = logging.getLogger(__name__)


SCRATCH_LOW_BYTES = 1 << 20
WAITED_CANCELLED = "cancelled while waiting for a free worker"


def scratch_full(scratch: str | None, outcome: Outcome) -> str | None:
    """Why the evaluation failed for want of scratch space, where it did: its
    failure says "No space left on device" and the worker's scratch folder
    has (almost) nothing free. The candidate says what it likes; the free
    space is measured here, so a candidate cannot claim the host's fault."""
    report = outcome.report
    said = (report.message + " ".join(str(d.get("message", "")) for d in report.diagnostics)) if report else ""
    if scratch is None or "No space left on device" not in said + outcome.output_tail:
        return None
    try:
        st = os.statvfs(scratch)
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if free >= SCRATCH_LOW_BYTES:
        return None
    return (
        f"the evaluation's scratch space is full ({free >> 10} KiB free of {st.f_blocks * st.f_frsize >> 20} MiB "
        f"on the filesystem of {os.path.dirname(scratch)}); free space there, or point TMPDIR elsewhere"
    )


class WorkerPool:
    """Workers keyed by launch settings, at most `slots` evaluations at once."""

    def __init__(self, *, warm: bool, threads: int, sandboxing: Sandboxing | None = None, slots: int = 2):
        self.warm, self.threads = warm, threads
        self.sandboxing = sandboxing or Sandboxing(confine.Confinement(confine.LIMITS_ONLY, "not configured"))
        self.slots = threading.BoundedSemaphore(max(1, slots))
        self.n_slots = max(1, slots)
        self.idle: dict[Launch, list[WorkerProcess]] = {}
        self.busy: set[int] = set()  # ids of workers running an evaluation
        self.starting: dict[Launch, int] = {}  # spares started ahead, still importing
        self.workers: list[WorkerProcess] = []
        self.lock = threading.Lock()
        self.started = threading.Condition(self.lock)  # a worker started ahead is ready
        self.turn = TimingTurn(self.sandboxing.timing_lock)
        self.timing_holder: WorkerProcess | None = None
        self.closed = False
        removed = sweep_leftovers()
        if removed:
            log.info("removed %d folders left by dead SAGE processes", len(removed))

    def run(self, request: Request, launch: Launch, on_event: EventSink, cancel: threading.Event | None = None) -> Outcome:
        """Run `request` on a worker of `launch`. A host fault (`killed="host"`:
        the worker could not start, or was lost where the candidate cannot have
        killed it) is retried once on a fresh worker; the retried outcome says so."""
        while not self.slots.acquire(timeout=POLL_S):
            if cancel is not None and cancel.is_set():
                return Outcome(killed="cancelled", output_tail=WAITED_CANCELLED)
        try:
            outcome = self._run_once(request, launch, on_event, cancel)
            if outcome.killed == "host" and not (cancel is not None and cancel.is_set()):
                first = outcome.output_tail
                log.warning("host fault, retrying on a fresh worker: %s", first)
                outcome = self._run_once(request, launch, on_event, cancel)
                outcome.retried_after = first
            return outcome
        finally:
            self.slots.release()

    def _run_once(self, request: Request, launch: Launch, on_event: EventSink, cancel: threading.Event | None) -> Outcome:
        worker = self._checkout(launch, cancel)
        if worker is None:
            return Outcome(killed="cancelled", output_tail=WAITED_CANCELLED)
        self._prepare_build(request, worker)
        try:
            outcome = EvaluationRun(worker, request, on_event, cancel=cancel, turn=self.turn, on_turn=self._on_turn).run()
            full = scratch_full(worker.scratch, outcome)
            return Outcome(killed="scratch", output_tail=full) if full else outcome
        except SandboxFailed as exc:
            return Outcome(killed="sandbox", output_tail=str(exc))
        except WorkerStartError as exc:
            worker.stop()
            return Outcome(killed="host", output_tail=str(exc))
        finally:
            self._publish_build(request, worker)
            self._checkin(worker)

    def _checkout(self, launch: Launch, cancel: threading.Event | None = None) -> WorkerProcess | None:
        """An idle worker of `launch`, else the spare already importing for it
        (sooner ready than a new one, and no worker past the slots), else a
        new one, started by its run; None when cancelled while waiting."""
        with self.lock:
            warm = self.warm and launch.warm
            while warm and not self.idle.get(launch) and self.starting.get(launch):
                if cancel is not None and cancel.is_set():
                    return None
                self.started.wait(POLL_S)
            free = self.idle.get(launch, []) if warm else []
            worker = free.pop() if free else WorkerProcess(launch, self.threads, self.sandboxing)
            self.busy.add(id(worker))
            if worker not in self.workers:
                self.workers.append(worker)
            spare = warm and not free and sum(w.launch == launch for w in self.workers) < self.n_slots
            if spare:
                self.starting[launch] = self.starting.get(launch, 0) + 1
        if spare:
            # The next caller finds a started worker: a hung evaluation then
            # delays another client by a fork, not by a torch import.
            threading.Thread(target=self._prestart, args=(launch,), name="sage-worker-start", daemon=True).start()
        return worker

    def _prestart(self, launch: Launch) -> None:
        worker = WorkerProcess(launch, self.threads, self.sandboxing)
        with self.lock:
            if not self.closed:
                self.workers.append(worker)
        try:
            if not self.closed:
                worker.start()
        except (WorkerStartError, SandboxFailed, OSError) as exc:
            log.info("could not start a spare worker: %s", exc)
        finally:
            with self.lock:
                self.starting[launch] -= 1
                keep = worker.alive() and not self.closed
                if keep:
                    self.idle.setdefault(launch, []).append(worker)
                elif worker in self.workers:
                    self.workers.remove(worker)
                self.started.notify_all()  # a caller waiting for this spare takes it, or starts its own
        if not keep:
            worker.stop()

    def ready(self, launch: Launch, timeout: float) -> list[WorkerProcess]:
        """Wait (at most `timeout` s) until a worker of this launch started ahead is ready; those ready."""
        with self.lock:
            self.started.wait_for(lambda: self.idle.get(launch), timeout)
            return list(self.idle.get(launch, []))

    def _checkin(self, worker: WorkerProcess) -> None:
        with self.lock:
            self.busy.discard(id(worker))
            worker.paused, worker.paused_total = False, 0.0
            keep = self.warm and worker.launch.warm and not worker.launch.single_use and worker.alive() and not self.closed
            if keep:
                self.idle.setdefault(worker.launch, []).append(worker)
            elif worker in self.workers:
                self.workers.remove(worker)
        if not keep:
            worker.stop()

    def _on_turn(self, worker: WorkerProcess, taken: bool | None) -> None:
        """While one evaluation of this process is timed, the others stand
        still. Decided and sent under the pool's lock, so a pause and its
        resume never cross."""
        with self.lock:
            if taken is None:  # a request just started: join the pause if one is on
                if self.timing_holder is not None and self.timing_holder is not worker:
                    worker.paused = worker.send(Op(Op.PAUSE))
                    worker.paused_since = time.monotonic()
                return
            self.timing_holder = worker if taken else None
            for other in self.workers:
                if other is worker or id(other) not in self.busy:
                    continue
                if taken and not other.paused:
                    other.paused = other.send(Op(Op.PAUSE))
                    other.paused_since = time.monotonic()
                elif not taken and other.paused:
                    other.send(Op(Op.RESUME))
                    other.paused = False
                    other.paused_total += time.monotonic() - other.paused_since

    def _prepare_build(self, request: Request, worker: WorkerProcess) -> None:
        build = request.build
        if build is None or self.sandboxing.confinement.confined:
            return  # confined: the sandbox gets its private copy of the folder (`workers.py`)
        Path(build.inside).mkdir(parents=True, exist_ok=True)
        remove_stale_locks(build.inside)  # left by a build killed in an earlier evaluation
        remove_foreign_files(build.inside)  # limits only, the kernel writes in the cache itself: what no build made goes

    def _publish_build(self, request: Request, worker: WorkerProcess) -> None:
        build = request.build
        if build is None or not self.sandboxing.confinement.confined or worker.scratch is None:
            return
        staged = Path(worker.scratch, "build", build.key)
        publish_build(staged, Path(build.cache))
        shutil.rmtree(staged, ignore_errors=True)

    def worker_pids(self) -> list[int]:
        """The pool's live worker processes, started or still importing."""
        return [w.proc.pid for w in self.workers if w.proc is not None and w.alive()]

    def ready_pids(self, count: int, timeout: float) -> list[int]:
        """Wait (at most `timeout` s) until `count` workers have said they are
        ready (torch imported), idle or busy; the pids of those ready."""

        def ready() -> list[int]:
            return [w.proc.pid for w in self.workers if w.ready and w.proc is not None and w.alive()]

        deadline = time.monotonic() + timeout
        with self.lock:
            # Polled: a worker started by its own run says nothing to `started`.
            while len(ready()) < count and time.monotonic() < deadline:
                self.started.wait(POLL_S)
            return ready()

    def close(self) -> None:
        with self.lock:
            self.closed = True
            workers, self.workers = list(self.workers), []
            self.idle.clear()
        for worker in workers:
            worker.stop()
        PidsCgroup.sweep(wait_s=5.0)
