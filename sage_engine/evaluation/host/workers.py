"""Worker processes: started (inside their bubblewrap sandbox when this host
can confine) from one long-lived thread, each running one evaluation at a
time and answering the host's operations.
"""

from __future__ import annotations

import fcntl
import logging
import os
import queue
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from sage_engine.evaluation.common.cgroups import PidsCgroup, next_name, pids_cgroup_base
from sage_engine.evaluation.host import confine
from sage_engine.evaluation.host.launch import Launch, Sandboxing, owner_prefix
from sage_engine.evaluation.common.processes import ProcessWatch
from sage_engine.evaluation.protocol import (
    MAX_TASKS,
    Event,
    Exit,
    Op,
    Outcome,
    Ready,
    Request,
    Started,
    TimingDone,
    TimingWait,
    parse_worker_event,
)

log = logging.getLogger(__name__)
POLL_S = 0.05  # how often a wait for the timing turn, or for a worker's event, looks again
WORKER_START_TIMEOUT_S = 120.0  # importing torch on a loaded two-core machine
# The worker enforces the evaluation's deadline itself; this margin only
# catches a worker that stopped answering.
WORKER_GRACE_S = 30.0
CANCEL_GRACE_S = 0.5  # a worker told to cancel answers at once; past this it is killed whole
SANDBOX_TASKS = MAX_TASKS + 32  # the candidate's share plus the worker and the reference process

EventSink = Callable[[Event], None]


class WorkerStartError(RuntimeError):
    pass


class _DiedEarly(Exception):
    """The worker was dead before it took the request."""


class SandboxFailed(RuntimeError):
    """bubblewrap itself refused to start the sandbox; the message is its own."""


class Spawner:
    """Starts every worker process from one thread that lives as long as this
    process. bubblewrap's --die-with-parent is PR_SET_PDEATHSIG, which fires
    when the *thread* that forked it exits: a worker started from a
    short-lived thread (a spare's starter, an anyio worker thread serving one
    MCP call) would be killed with that thread."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def popen(self, *args: Any, **kwargs: Any) -> subprocess.Popen:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="sage-worker-spawner", daemon=True)
                self._thread.start()
        done = threading.Event()
        box: dict[str, Any] = {}  # the spawner thread's answer: "proc", or the "error" it raised
        self._queue.put((args, kwargs, done, box))
        if not done.wait(WORKER_START_TIMEOUT_S):
            raise OSError("the worker spawner thread did not answer")
        if "error" in box:
            raise box["error"]
        return box["proc"]

    def _serve(self) -> None:
        while True:
            args, kwargs, done, box = self._queue.get()
            try:
                box["proc"] = subprocess.Popen(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, which raises it
                box["error"] = exc
            finally:
                done.set()


SPAWNER = Spawner()


@dataclass
class WorkerProcess:
    """One worker process: started per `Launch`, inside its own sandbox when
    this host confines; warm ones serve many requests, one at a time."""

    launch: Launch
    threads: int
    sandboxing: Sandboxing
    proc: subprocess.Popen | None = None
    scratch: str | None = None
    cgroup: PidsCgroup | None = None
    buffer: bytearray = field(default_factory=bytearray)
    versions: dict[str, str] = field(default_factory=dict)
    child_pids: list[int] = field(default_factory=list)  # the running evaluation's reference and candidate
    write_lock: threading.Lock = field(default_factory=threading.Lock)
    stop_lock: threading.Lock = field(default_factory=threading.Lock)  # the pool's close and a spare's start may both stop it
    ready: bool = False  # said Ready (torch imported) and not stopped since
    paused: bool = False  # told to stand still while another evaluation is timed
    paused_since: float = 0.0
    paused_total: float = 0.0  # the worker stops its clock while paused; so does the deadline here

    @property
    def confined(self) -> bool:
        return self.sandboxing.confinement.confined

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        self.stop()
        self.buffer.clear()
        if not os.access(self.launch.python, os.X_OK):
            raise WorkerStartError(f"cannot start {self.launch.python}: no such executable")
        self.scratch = tempfile.mkdtemp(prefix=owner_prefix("worker"))
        os.mkdir(os.path.join(self.scratch, "build"))
        command = [self.launch.python, "-m", "sage_engine.evaluation.worker", f"--scratch={self.scratch}"]
        if self.confined:
            self.cgroup = _sandbox_cgroup()
            command += ["--confined"] + ([f"--cgroup={self.cgroup.path}"] if self.cgroup is not None else [])
        command += ["--", *self.launch.preload]
        layout = self.sandboxing.layout(self.launch, self.scratch) if self.confined else None
        env = self.launch.environment(self.threads, torch_mounted=layout is not None and bool(layout.mounted))
        if layout is not None:
            command = confine.bwrap_argv(self.sandboxing.confinement.bwrap or "bwrap", layout, command)
            if self.cgroup is not None:
                # Join the cgroup before bubblewrap forks, so everything inside is counted.
                command = ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.cgroup.path), *command]
        stderr_path = os.path.join(self.scratch, "worker.stderr")
        with open(stderr_path, "wb") as stderr:
            try:
                self.proc = SPAWNER.popen(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    env=env,
                    cwd=self.scratch,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                self.stop()
                raise WorkerStartError(f"cannot start {self.launch.python}: {exc}") from exc
        pid = self.proc.pid
        event = self.read_event(time.monotonic() + WORKER_START_TIMEOUT_S)
        if not isinstance(event, Ready):
            text = self.last_words(8192)
            self.stop()
            message = confine.bwrap_message(text) if self.confined else None
            if message:
                raise SandboxFailed(message)
            raise WorkerStartError(f"the evaluation worker for {self.launch.python} did not start: {text.strip()[-2000:] or 'no output'}")
        self.versions, self.ready = event.versions, True
        # Not `self.proc`: a pool closing meanwhile may have stopped this worker already.
        log.info("evaluation worker %d ready (%s, %s)", pid, self.launch.python, "bubblewrap" if self.confined else "limits only")

    def send(self, op: Op) -> bool:
        with self.write_lock:
            proc = self.proc
            if proc is None or proc.stdin is None:
                return False
            try:
                proc.stdin.write(op.line())
                proc.stdin.flush()
                return True
            except (BrokenPipeError, OSError, ValueError):
                return False

    def read_event(self, deadline: float) -> Event | None:
        """The worker's next event, or None by `deadline` or once it closed its end."""
        if self.proc is None or self.proc.stdout is None:
            return None
        fd = self.proc.stdout.fileno()
        while True:
            nl = self.buffer.find(b"\n")
            if nl >= 0:
                line = bytes(self.buffer[:nl])
                del self.buffer[: nl + 1]
                event = parse_worker_event(line)
                if event is not None:
                    return event
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
            if ready:
                data = os.read(fd, 1 << 16)
                if not data:
                    return None
                self.buffer += data

    def last_words(self, limit: int = 2000) -> str:
        return _tail(os.path.join(self.scratch, "worker.stderr"), limit) if self.scratch else ""

    def lost(self, why: str, killed: str = "worker") -> Outcome:
        """The worker is beyond use for this evaluation: stop it, and what it left running.

        Confined, the worker is PID 1 of the sandbox and the candidate cannot
        signal it: losing it is the host's fault (`killed="host"`). With limits
        only, the candidate may have killed it (`killed="worker"`: its crash)."""
        if killed in ("worker", "host"):
            said = self.last_words().strip()
            why += f" (its last words: {said[-1500:]})" if said else ""
            log.warning("%s; restarting it on the next request", why)
            if self.confined:
                killed = "host"
        if not self.confined:
            # Limits only: the evaluation's processes are not inside a namespace that dies with the worker.
            for pid in self.child_pids:
                ProcessWatch(pid).kill_all()
        self.stop()
        return Outcome(killed=killed, output_tail=why)

    def stop(self) -> None:
        with self.stop_lock:  # each part taken by one caller only
            proc, self.proc, self.ready = self.proc, None, False
            scratch, self.scratch = self.scratch, None
            cgroup, self.cgroup = self.cgroup, None
        try:
            if proc is not None:
                self._end(proc)
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            if cgroup is not None:
                cgroup.kill()
                cgroup.remove()

    def _end(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None and self.send(Op(Op.QUIT)):
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            # Confined, killing bubblewrap takes its whole PID namespace with it.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait(timeout=10)
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


class EvaluationRun:
    """One request on one worker: relays its events, takes the host's
    timing turn for it (and tells the pool, which pauses the others), honours
    a cancel and the deadline. `on_turn(worker, True/False)` is told when it
    takes and gives back the turn, `on_turn(worker, None)` once the request is sent."""

    def __init__(
        self,
        worker: WorkerProcess,
        request: Request,
        on_event: EventSink,
        *,
        cancel: threading.Event | None,
        turn: TimingTurn,
        on_turn: Callable[[WorkerProcess, bool | None], None],
    ):
        self.worker, self.request, self.on_event = worker, request, on_event
        self.cancel, self.turn, self.on_turn = cancel, turn, on_turn

    def run(self) -> Outcome:
        worker = self.worker
        for _attempt in range(2):
            if not worker.alive():
                worker.start()
            try:
                return self._once()
            except _DiedEarly:
                # Dead before it took the request (killed while idle): a fresh one gets it.
                log.warning("the warm worker had died; starting a new one")
                worker.stop()
        return worker.lost("the evaluation worker died twice before taking the request", killed="host")

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def _once(self) -> Outcome:
        worker, turn = self.worker, self.turn
        worker.child_pids = []
        if not worker.send(Op(Op.EVAL, self.request)):
            raise _DiedEarly
        started = False
        worker.paused_total = 0.0
        self.on_turn(worker, None)
        limit = self.request.timeout_s + WORKER_GRACE_S
        start = time.monotonic()
        held = 0.0  # time spent waiting for the timing turn: not counted (the worker stops its clock too)
        cancel_sent: float | None = None
        holding = False  # the timing turn
        pausing_since: float | None = None  # others of this process stand still meanwhile
        try:
            while True:
                if self.cancelled() and cancel_sent is None:
                    cancel_sent = time.monotonic()
                    worker.send(Op(Op.CANCEL))
                if cancel_sent is not None and time.monotonic() - cancel_sent > CANCEL_GRACE_S:
                    return worker.lost("cancelled, and the worker did not stop at once", killed="cancelled")
                deadline = start + limit + held + worker.paused_total
                if pausing_since is not None and time.monotonic() - pausing_since > worker.sandboxing.pause_max_s:
                    pausing_since = None  # still timing, but the others go on
                    self.on_turn(worker, False)
                event = worker.read_event(min(deadline, time.monotonic() + POLL_S))
                if event is None:
                    if not worker.alive():
                        if not started:
                            raise _DiedEarly
                        return worker.lost("the evaluation worker died during the evaluation")
                    if time.monotonic() >= deadline and not worker.paused:
                        # Past the evaluation's own limit and grace: the run ran out of time, whatever the
                        # candidate did to its worker; a timeout, never a host fault that escapes the verdict.
                        return worker.lost("the evaluation worker stopped answering past the time limit", killed="timeout")
                    continue
                if isinstance(event, Exit):
                    return event.outcome
                started = True
                if isinstance(event, Started):
                    worker.child_pids = [int(p) for p in event.pids]
                elif isinstance(event, TimingWait):
                    waited = time.monotonic()
                    if turn.acquire(worker, lambda: self.cancelled() or not worker.alive()):
                        holding, pausing_since = True, time.monotonic()
                        self.on_turn(worker, True)
                        worker.send(Op(Op.TIMING_GO))
                    held += time.monotonic() - waited
                elif isinstance(event, TimingDone):
                    if pausing_since is not None:
                        pausing_since = None
                        self.on_turn(worker, False)
                    if holding:
                        holding = False
                        turn.release(worker)
                else:
                    self.on_event(event)
        finally:
            if pausing_since is not None:
                self.on_turn(worker, False)
            if holding:
                turn.release(worker)


def _sandbox_cgroup() -> PidsCgroup | None:
    base = pids_cgroup_base()
    if base is None:
        return None
    PidsCgroup.sweep()
    return PidsCgroup.create_at(base, next_name("worker"), SANDBOX_TASKS)


def _tail(path: str, limit: int = 8192) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - limit))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


# ------------------------------------------------------------ the timing turn


class TimingTurn:
    """One timing phase at a time: within this process a lock, across the
    host's SAGE processes a file lock. Waits give up when `cancel` is set."""

    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()
        self.holder: object | None = None
        self._fd: int | None = None

    def acquire(self, worker: object, stop: Callable[[], bool]) -> bool:
        while not self.lock.acquire(timeout=POLL_S):
            if stop():
                return False
        fd = self._open()
        while fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if stop():
                    os.close(fd)
                    self.lock.release()
                    return False
                time.sleep(0.02)
        self._fd, self.holder = fd, worker
        return True

    def release(self, worker: object) -> None:
        if self.holder is not worker:
            return
        self.holder = None
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None
        self.lock.release()

    def _open(self) -> int | None:
        if not self.path:
            return None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            log.warning("cannot open the timing lock %s (%s); timing is serialised in this process only", self.path, exc)
            return None
        return fd
