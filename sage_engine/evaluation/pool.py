"""Where evaluations run: sandboxed worker processes, a few at a time.

`SandboxPool.run(request, launch, on_event, cancel)` returns the `Outcome`
of one evaluation, whatever the candidate did. A worker (`worker.py`) is
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

import atexit
import fcntl
import json
import logging
import os
import queue
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from sage_engine.evaluation import confine, sandbox

log = logging.getLogger(__name__)
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the sage_engine package
WORKER_START_TIMEOUT_S = 120.0  # importing torch on a loaded two-core machine
# The worker enforces the evaluation's deadline itself; this margin only
# catches a worker that stopped answering.
WORKER_GRACE_S = 30.0
CANCEL_GRACE_S = 0.5  # a worker told to cancel answers at once; past this it is killed whole
POLL_S = 0.05
SANDBOX_TASKS = sandbox.MAX_TASKS + 32  # the candidate's share plus the worker and the reference process
BUILD_PUBLISH_MAX_BYTES = 1 << 30  # a build folder larger than this is not cached
BUILD_LOCKS = sandbox.BUILD_LOCKS
STALE_LOCK_S = 900.0  # no build runs this long: an older lock's builder is gone
LEFTOVER_RE = re.compile(r"sage-(worker|eval|import)-(\d+)-(\d+)-")

EventSink = Callable[[dict[str, Any]], None]


class WorkerStartError(RuntimeError):
    pass


class _DiedEarly(Exception):
    """The worker was dead before it took the request."""


class SandboxFailed(RuntimeError):
    """bubblewrap itself refused to start the sandbox; the message is its own."""


# --------------------------------------------------------------- ownership


def process_start(pid: int) -> int | None:
    """A process's start time (clock ticks since boot): with its pid, an identity that survives pid reuse."""
    try:
        return int(sandbox.stat_fields(pid)[19])
    except (ValueError, IndexError):
        return None


def owner_prefix(kind: str) -> str:
    """`sage-<kind>-<pid>-<start>-`: names a folder after the process that owns it."""
    return f"sage-{kind}-{os.getpid()}-{process_start(os.getpid()) or 0}-"


def owner_alive(pid: int, start: int) -> bool:
    if not Path(f"/proc/{pid}").exists():
        return False
    actual = process_start(pid)
    return actual is None or start == 0 or actual == start


def sweep_leftovers(tmp: str | None = None) -> list[str]:
    """Remove `sage-worker-*`, `sage-eval-*` and `sage-import-*` folders whose
    owning process is dead. A folder whose name names no owner, or whose
    owner lives (another SAGE process on this machine), is left alone."""
    root = Path(tmp or tempfile.gettempdir())
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for path in entries:
        m = LEFTOVER_RE.match(path.name)
        if m is None or not path.is_dir() or path.is_symlink():
            continue
        if not owner_alive(int(m.group(2)), int(m.group(3))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed


_import_root: str | None = None
_import_lock = threading.Lock()


def import_root() -> str:
    """A directory holding only a link to the `sage_engine` package, for the
    workers' PYTHONPATH. Adding the package's parent instead would, in an
    installed SAGE, put all of this environment's site-packages (its triton,
    its numpy) in front of a backend's own virtualenv."""
    global _import_root
    with _import_lock:
        if _import_root is None or not Path(_import_root, "sage_engine").exists():
            root = tempfile.mkdtemp(prefix=owner_prefix("import"))
            os.symlink(PACKAGE_DIR, Path(root, "sage_engine"))
            atexit.register(shutil.rmtree, root, ignore_errors=True)
            _import_root = root
        return _import_root


@dataclass(frozen=True)
class Launch:
    """How to start workers for a backend: which interpreter, with what
    environment, which modules a warm worker imports up front, and which
    device nodes and extra read-only folders its sandbox needs."""

    python: str = sys.executable
    env: tuple[tuple[str, str], ...] = ()
    preload: tuple[str, ...] = ()
    warm: bool = True
    devices: tuple[str, ...] = ()  # exact paths (required) or glob patterns
    # A task's import roots (its benchmark's helper package): bound read-only,
    # so tasks with their own helpers get workers of their own.
    readable: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Every executor and backend starts workers from a Launch: the
        # interpreter is resolved here, once, the same way for all of them.
        object.__setattr__(self, "python", confine.interpreter_path(self.python))

    def environment(self, threads: int) -> dict[str, str]:
        pythonpath = os.pathsep.join(p for p in (import_root(), os.environ.get("PYTHONPATH", "")) if p)
        extra = {
            "PYTHONPATH": pythonpath,
            "OMP_NUM_THREADS": str(threads),  # read once when the OpenMP runtime starts
            "MKL_NUM_THREADS": str(threads),
            "OPENBLAS_NUM_THREADS": str(threads),
            # Idle OpenMP threads sleep instead of spinning: a spinning pool
            # would look like work left running between timed calls.
            "OMP_WAIT_POLICY": "PASSIVE",
            # A fixed malloc policy: with glibc's adaptive one, the reference and
            # candidate processes end up with different thresholds, and one of
            # them takes page faults on every large output (measured: 30-60%
            # slower relu on identical code).
            "MALLOC_MMAP_THRESHOLD_": str(256 << 20),
            "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            **dict(self.env),
        }
        return sandbox.child_environment(os.environ, extra)


@dataclass(frozen=True)
class Sandboxing:
    """Everything a worker's sandbox is built from, fixed per harness."""

    confinement: confine.Confinement
    hidden_dirs: tuple[str, ...] = ()
    hidden_files: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()  # needed by every worker (the cache dir, SAGE's package)
    tmp_mb: int = 1024
    timing_lock: str = ""
    pause_max_s: float = 10.0  # Config.timing_pause_max_s

    def layout(self, launch: Launch, scratch: str) -> confine.Layout:
        # Only what exists here: bubblewrap refuses to bind a missing path (a
        # task's import roots named on another machine, a folder since deleted).
        readable = [p for p in confine._resolved([*confine.python_paths(launch.python), *self.readable, PACKAGE_DIR,
                                                  import_root(), *launch.readable]) if os.path.exists(p)]
        return confine.Layout(
            hidden_dirs=self.hidden_dirs, hidden_files=self.hidden_files, readable=tuple(readable),
            writable=((scratch, scratch), (os.path.join(scratch, "build"), confine.BUILD_MOUNT)),
            devices=confine.device_nodes(launch.devices), tmp_mb=self.tmp_mb, chdir=scratch,
        )


# ------------------------------------------------------------------ timing


class TimingTurn:
    """One timing phase at a time: within this process a lock, across the
    host's SAGE processes a file lock. Waits give up when `cancel` is set."""

    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()
        self.holder: "WarmWorker | None" = None
        self._fd: int | None = None

    def acquire(self, worker: "WarmWorker", stop: Callable[[], bool]) -> bool:
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

    def release(self, worker: "WarmWorker") -> None:
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
            log.warning("cannot open the timing lock %s (%s); timing is serialised in this process only",
                        self.path, exc)
            return None
        return fd


# ------------------------------------------------------------------ workers


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
        done, box = threading.Event(), {}
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
class WarmWorker:
    launch: Launch
    threads: int
    sandboxing: Sandboxing
    proc: subprocess.Popen | None = None
    scratch: str | None = None
    cgroup: sandbox.PidsCgroup | None = None
    buffer: bytearray = field(default_factory=bytearray)
    versions: dict[str, str] = field(default_factory=dict)
    child_pids: list[int] = field(default_factory=list)
    write_lock: threading.Lock = field(default_factory=threading.Lock)
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
        if self.confined:
            command = confine.bwrap_argv(self.sandboxing.confinement.bwrap or "bwrap",
                                         self.sandboxing.layout(self.launch, self.scratch), command)
            if self.cgroup is not None:
                # Join the cgroup before bubblewrap forks, so everything inside is counted.
                command = ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.cgroup.path),
                           *command]
        stderr_path = os.path.join(self.scratch, "worker.stderr")
        with open(stderr_path, "wb") as stderr:
            try:
                self.proc = SPAWNER.popen(
                    command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                    env=self.launch.environment(self.threads), cwd=self.scratch, start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                self.stop()
                raise WorkerStartError(f"cannot start {self.launch.python}: {exc}") from exc
        event = self._read_event(time.monotonic() + WORKER_START_TIMEOUT_S)
        if event is None or event.get("ev") != "ready":
            text = _tail(stderr_path)
            self.stop()
            message = confine.bwrap_message(text) if self.confined else None
            if message:
                raise SandboxFailed(message)
            raise WorkerStartError(f"the evaluation worker for {self.launch.python} did not start: "
                                   f"{text.strip()[-2000:] or 'no output'}")
        self.versions = event.get("versions", {})
        log.info("evaluation worker %d ready (%s, %s)", self.proc.pid, self.launch.python,
                 "bubblewrap" if self.confined else "limits only")

    def send_op(self, op: dict[str, Any]) -> bool:
        with self.write_lock:
            try:
                assert self.proc is not None and self.proc.stdin is not None
                self.proc.stdin.write((json.dumps(op) + "\n").encode())
                self.proc.stdin.flush()
                return True
            except (BrokenPipeError, OSError, ValueError, AssertionError):
                return False

    def run(self, request: dict[str, Any], on_event: EventSink, *, cancel: threading.Event | None,
            turn: TimingTurn, on_turn: Callable[["WarmWorker", bool | None], None]) -> sandbox.Outcome:
        """One request on this worker. `on_turn(worker, True/False)` is told
        when it takes and gives back the timing turn, `on_turn(worker, None)`
        once the request is sent."""
        for attempt in range(2):
            if not self.alive():
                self.start()
            try:
                return self._run_once(request, on_event, cancel, turn, on_turn)
            except _DiedEarly:
                # Dead before it took the request (killed while idle): a fresh one gets it.
                log.warning("the warm worker had died; starting a new one")
                self.stop()
        return self._lost("the evaluation worker died twice before taking the request")

    def _run_once(self, request: dict[str, Any], on_event: EventSink, cancel: threading.Event | None,
                  turn: TimingTurn, on_turn: Callable[["WarmWorker", bool | None], None]) -> sandbox.Outcome:
        self.child_pids = []
        if not self.send_op({"op": "eval", "request": request}):
            raise _DiedEarly
        started = False
        self.paused_total = 0.0
        on_turn(self, None)
        limit = float(request.get("timeout_s", 180.0)) + WORKER_GRACE_S
        start = time.monotonic()
        held = 0.0  # time spent waiting for the timing turn: not counted (the worker stops its clock too)
        cancel_sent: float | None = None
        holding = False  # the timing turn
        pausing_since: float | None = None  # others of this process stand still meanwhile
        try:
            while True:
                if cancel is not None and cancel.is_set() and cancel_sent is None:
                    cancel_sent = time.monotonic()
                    self.send_op({"op": "cancel"})
                if cancel_sent is not None and time.monotonic() - cancel_sent > CANCEL_GRACE_S:
                    return self._lost("cancelled, and the worker did not stop at once", killed="cancelled")
                deadline = start + limit + held + self.paused_total
                if pausing_since is not None and time.monotonic() - pausing_since > self.sandboxing.pause_max_s:
                    pausing_since = None  # still timing, but the others go on
                    on_turn(self, False)
                event = self._read_event(min(deadline, time.monotonic() + POLL_S))
                if event is None:
                    if not self.alive():
                        if not started:
                            raise _DiedEarly
                        return self._lost("the evaluation worker died during the evaluation")
                    if time.monotonic() >= deadline and not self.paused:
                        return self._lost("the evaluation worker stopped answering")
                    continue
                kind = event.get("ev")
                if kind == "exit":
                    return sandbox.Outcome.from_dict(event["outcome"])
                started = True
                if kind == "started":
                    self.child_pids = [int(p) for p in event.get("pids", [])]
                elif kind == "timing-wait":
                    waited = time.monotonic()
                    stop = lambda: (cancel is not None and cancel.is_set()) or not self.alive()  # noqa: E731
                    if turn.acquire(self, stop):
                        holding, pausing_since = True, time.monotonic()
                        on_turn(self, True)
                        self.send_op({"op": "timing-go"})
                    held += time.monotonic() - waited
                elif kind == "timing-done":
                    if pausing_since is not None:
                        pausing_since = None
                        on_turn(self, False)
                    if holding:
                        holding = False
                        turn.release(self)
                else:
                    on_event(event)
        finally:
            if pausing_since is not None:
                on_turn(self, False)
            if holding:
                turn.release(self)

    def _lost(self, why: str, killed: str = "worker") -> sandbox.Outcome:
        if killed == "worker":
            said = _tail(os.path.join(self.scratch, "worker.stderr"), 2000).strip() if self.scratch else ""
            why += f" (its last words: {said[-1500:]})" if said else ""
            log.warning("%s; restarting it on the next request", why)
        if not self.confined:
            # Limits only: the evaluation's processes are not inside a namespace that dies with the worker.
            for pid in self.child_pids:
                sandbox.ProcessWatch(pid).kill_all()
        self.stop()
        return sandbox.Outcome(killed=killed, output_tail=why)

    def _read_event(self, deadline: float) -> dict[str, Any] | None:
        if self.proc is None or self.proc.stdout is None:
            return None
        fd = self.proc.stdout.fileno()
        while True:
            nl = self.buffer.find(b"\n")
            if nl >= 0:
                line = bytes(self.buffer[:nl])
                del self.buffer[: nl + 1]
                try:
                    return json.loads(line)
                except ValueError:
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

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        try:
            if proc is not None:
                self._end(proc)
        finally:
            if self.scratch is not None:
                shutil.rmtree(self.scratch, ignore_errors=True)
                self.scratch = None
            if self.cgroup is not None:
                self.cgroup.kill()
                self.cgroup.remove()
                self.cgroup = None

    def _end(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None and self.send_op({"op": "quit"}):
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


def _sandbox_cgroup() -> sandbox.PidsCgroup | None:
    base = sandbox._pids_cgroup_base()
    if base is None:
        return None
    sandbox.PidsCgroup.sweep()
    return sandbox.PidsCgroup.create_at(base, f"sage-worker-{os.getpid()}-{next(sandbox._cgroup_counter)}",
                                        SANDBOX_TASKS)


def _tail(path: str, limit: int = 8192) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - limit))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


# -------------------------------------------------------------------- builds


def publish_build(staged: Path, cached: Path) -> bool:
    """Copy a candidate's build folder from the worker's scratch into the
    cache, if it changed. Regular files and folders only (a link a candidate
    planted is not followed), under a size cap; replaced atomically."""
    if not staged.is_dir():
        return False
    files = _listing(staged)
    if files is None or files == _listing(cached):
        return False
    if sum(size for size, _ in files.values()) > BUILD_PUBLISH_MAX_BYTES:
        log.warning("build folder %s is over %d bytes; not cached", staged, BUILD_PUBLISH_MAX_BYTES)
        return False
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{cached.name}-", dir=cached.parent))
    try:
        for rel in sorted(files):
            src, dst = staged / rel, tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst, follow_symlinks=False)
        old = cached.with_name(f".{cached.name}-old-{os.getpid()}")
        if cached.exists():
            os.rename(cached, old)
        os.rename(tmp, cached)
        shutil.rmtree(old, ignore_errors=True)
        return True
    except OSError as exc:
        log.warning("could not cache the build folder %s: %s", staged, exc)
        shutil.rmtree(tmp, ignore_errors=True)
        return False


def _listing(root: Path) -> dict[str, tuple[int, int]] | None:
    if not root.is_dir():
        return None
    out = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
        for name in names:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not os.path.islink(path) and os.path.isfile(path) and name not in BUILD_LOCKS:
                out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
    return out


def remove_stale_locks(root: Path | str, older_than_s: float = STALE_LOCK_S) -> list[str]:
    """Remove build locks under `root` older than `older_than_s`: torch's
    extension builder waits forever on a lock whose builder was killed."""
    removed, cutoff = [], time.time() - older_than_s
    for folder, dirs, names in os.walk(root):
        for name in set(names) & BUILD_LOCKS:
            path = os.path.join(folder, name)
            try:
                if os.lstat(path).st_mtime < cutoff:
                    os.unlink(path)
                    removed.append(path)
            except OSError:
                continue
    return removed


# ---------------------------------------------------------------------- pool


class SandboxPool:
    """Workers keyed by launch settings, at most `slots` evaluations at once."""

    def __init__(self, *, warm: bool, threads: int, sandboxing: Sandboxing | None = None, slots: int = 2):
        self.warm, self.threads = warm, threads
        self.sandboxing = sandboxing or Sandboxing(confine.Confinement(confine.LIMITS_ONLY, "not configured"))
        self.slots = threading.BoundedSemaphore(max(1, slots))
        self.n_slots = max(1, slots)
        self.idle: dict[Launch, list[WarmWorker]] = {}
        self.busy: set[int] = set()  # ids of workers running an evaluation
        self.workers: list[WarmWorker] = []
        self.lock = threading.Lock()
        self.turn = TimingTurn(self.sandboxing.timing_lock)
        self.timing_holder: WarmWorker | None = None
        self.closed = False
        removed = sweep_leftovers()
        if removed:
            log.info("removed %d folders left by dead SAGE processes", len(removed))

    def run(self, request: dict[str, Any], launch: Launch, on_event: EventSink,
            cancel: threading.Event | None = None) -> sandbox.Outcome:
        while not self.slots.acquire(timeout=POLL_S):
            if cancel is not None and cancel.is_set():
                return sandbox.Outcome(killed="cancelled", output_tail="cancelled while waiting for a free worker")
        try:
            worker = self._checkout(launch)
            self._prepare_build(request, worker)
            try:
                outcome = worker.run(request, on_event, cancel=cancel, turn=self.turn, on_turn=self._on_turn)
            except SandboxFailed as exc:
                return sandbox.Outcome(killed="sandbox", output_tail=str(exc))
            except WorkerStartError as exc:
                return sandbox.Outcome(exit_code=127, output_tail=str(exc))
            finally:
                self._publish_build(request, worker)
                self._checkin(worker)
            return outcome
        finally:
            self.slots.release()

    def _checkout(self, launch: Launch) -> WarmWorker:
        with self.lock:
            warm = self.warm and launch.warm
            free = self.idle.get(launch, []) if warm else []
            worker = free.pop() if free else WarmWorker(launch, self.threads, self.sandboxing)
            self.busy.add(id(worker))
            if worker not in self.workers:
                self.workers.append(worker)
            spare = warm and not free and sum(w.launch == launch for w in self.workers) < self.n_slots
        if spare:
            # The next caller finds a started worker: a hung evaluation then
            # delays another client by a fork, not by a torch import.
            threading.Thread(target=self._prestart, args=(launch,), name="sage-worker-start", daemon=True).start()
        return worker

    def _prestart(self, launch: Launch) -> None:
        worker = WarmWorker(launch, self.threads, self.sandboxing)
        with self.lock:
            if self.closed:
                return
            self.workers.append(worker)
        try:
            worker.start()
        except (WorkerStartError, SandboxFailed, OSError) as exc:
            log.info("could not start a spare worker: %s", exc)
        with self.lock:
            keep = worker.alive() and not self.closed
            if keep:
                self.idle.setdefault(launch, []).append(worker)
            elif worker in self.workers:
                self.workers.remove(worker)
        if not keep:
            worker.stop()

    def _checkin(self, worker: WarmWorker) -> None:
        with self.lock:
            self.busy.discard(id(worker))
            worker.paused, worker.paused_total = False, 0.0
            keep = self.warm and worker.launch.warm and worker.alive() and not self.closed
            if keep:
                self.idle.setdefault(worker.launch, []).append(worker)
            elif worker in self.workers:
                self.workers.remove(worker)
        if not keep:
            worker.stop()

    def _on_turn(self, worker: WarmWorker, taken: bool | None) -> None:
        """While one evaluation of this process is timed, the others stand
        still. Decided and sent under the pool's lock, so a pause and its
        resume never cross."""
        with self.lock:
            if taken is None:  # a request just started: join the pause if one is on
                if self.timing_holder is not None and self.timing_holder is not worker:
                    worker.paused = worker.send_op({"op": "pause"})
                    worker.paused_since = time.monotonic()
                return
            self.timing_holder = worker if taken else None
            for other in self.workers:
                if other is worker or id(other) not in self.busy:
                    continue
                if taken and not other.paused:
                    other.paused = other.send_op({"op": "pause"})
                    other.paused_since = time.monotonic()
                elif not taken and other.paused:
                    other.send_op({"op": "resume"})
                    other.paused = False
                    other.paused_total += time.monotonic() - other.paused_since

    def _prepare_build(self, request: dict[str, Any], worker: WarmWorker) -> None:
        build = request.get("build")
        if not build:
            return
        cache = str(build["cache"])
        if self.sandboxing.confinement.confined:
            inside = os.path.join(confine.BUILD_MOUNT, build["key"])
            build.update(inside=inside)
        else:
            inside = cache  # limits only: there is no private copy to make
            Path(cache).mkdir(parents=True, exist_ok=True)
            remove_stale_locks(cache)  # left by a build killed in an earlier evaluation
        env = request.setdefault("env", {})
        for var, sub in build.get("vars", {}).items():
            env[var] = os.path.join(inside, sub) if sub else inside

    def _publish_build(self, request: dict[str, Any], worker: WarmWorker) -> None:
        build = request.get("build")
        if not build or not self.sandboxing.confinement.confined or worker.scratch is None:
            return
        staged = Path(worker.scratch, "build", build["key"])
        publish_build(staged, Path(build["cache"]))
        shutil.rmtree(staged, ignore_errors=True)

    def worker_pids(self) -> list[int]:
        return [w.proc.pid for w in self.workers if w.proc is not None and w.alive()]

    def close(self) -> None:
        with self.lock:
            self.closed = True
            workers, self.workers = list(self.workers), []
            self.idle.clear()
        for worker in workers:
            worker.stop()
        sandbox.PidsCgroup.sweep(wait_s=5.0)
