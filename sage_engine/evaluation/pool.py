"""Where evaluation children come from: a warm worker or a cold interpreter.

`SandboxPool.run(request, launch)` returns the supervisor's `Outcome` for one
evaluation request, whatever the child did. The warm path keeps one worker per
(interpreter, environment) that forks a child per request; if the worker dies
or hangs it is killed and the next request starts a new one. The cold path
spawns `python -m sage_engine.evaluation.child` and supervises it from this
process.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
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

from sage_engine.evaluation import sandbox

log = logging.getLogger(__name__)
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the sage_engine package
WORKER_START_TIMEOUT_S = 120.0  # importing torch on a loaded two-core machine
# The worker enforces the child's deadline itself; this margin only catches a
# worker that stopped answering.
WORKER_GRACE_S = 30.0

EventSink = Callable[[dict[str, Any]], None]


class WorkerStartError(RuntimeError):
    pass


_import_root: str | None = None


def import_root() -> str:
    """A directory holding only a link to the `sage_engine` package, for the
    child's PYTHONPATH. Adding the package's parent instead would, in an
    installed SAGE, put all of this environment's site-packages (its triton,
    its numpy) in front of a backend's own virtualenv."""
    global _import_root
    if _import_root is None or not Path(_import_root, "sage_engine").exists():
        root = tempfile.mkdtemp(prefix="sage-import-")
        os.symlink(PACKAGE_DIR, Path(root, "sage_engine"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        _import_root = root
    return _import_root


@dataclass(frozen=True)
class Launch:
    """How to start children for a backend: which interpreter, with what
    environment, and which modules a warm worker imports up front."""

    python: str = sys.executable
    env: tuple[tuple[str, str], ...] = ()
    preload: tuple[str, ...] = ()
    warm: bool = True

    def environment(self, threads: int) -> dict[str, str]:
        pythonpath = os.pathsep.join(p for p in (import_root(), os.environ.get("PYTHONPATH", "")) if p)
        extra = {
            "PYTHONPATH": pythonpath,
            "OMP_NUM_THREADS": str(threads),  # read once when the OpenMP runtime starts
            "MKL_NUM_THREADS": str(threads),
            "OPENBLAS_NUM_THREADS": str(threads),
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            **dict(self.env),
        }
        return sandbox.child_environment(os.environ, extra)


@dataclass
class WarmWorker:
    launch: Launch
    threads: int
    proc: subprocess.Popen | None = None
    scratch: str | None = None
    buffer: bytearray = field(default_factory=bytearray)
    versions: dict[str, str] = field(default_factory=dict)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        self.stop()
        self.buffer.clear()
        self.scratch = tempfile.mkdtemp(prefix="sage-worker-")
        try:
            self.proc = subprocess.Popen(
                [self.launch.python, "-m", "sage_engine.evaluation.worker", f"--scratch={self.scratch}",
                 *self.launch.preload],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None,
                env=self.launch.environment(self.threads), cwd=tempfile.gettempdir(),
                start_new_session=True, close_fds=True,
            )
        except OSError as exc:
            self.stop()
            raise WorkerStartError(f"cannot start {self.launch.python}: {exc}") from exc
        event = self._read_event(time.monotonic() + WORKER_START_TIMEOUT_S)
        if event is None or event.get("ev") != "ready":
            self.stop()
            raise WorkerStartError(f"the warm worker for {self.launch.python} did not start")
        self.versions = event.get("versions", {})
        log.info("warm evaluation worker %d ready (%s)", self.proc.pid, self.launch.python)

    def run(self, request: dict[str, Any], on_event: EventSink) -> sandbox.Outcome:
        outcome = self._run_once(request, on_event)
        if outcome is None:  # the worker was dead before it took the request: a fresh one gets it
            log.warning("the warm worker had died; starting a new one")
            self.stop()
            outcome = self._run_once(request, on_event)
        return outcome or self._lost(None, "the warm worker died twice before taking the request")

    def _run_once(self, request: dict[str, Any], on_event: EventSink) -> sandbox.Outcome | None:
        if not self.alive():
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        child_pid: int | None = None
        deadline = time.monotonic() + float(request.get("timeout_s", 180.0)) + WORKER_GRACE_S
        try:
            self.proc.stdin.write((json.dumps({"op": "eval", "request": request}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        while True:
            event = self._read_event(deadline)
            if event is None:
                if child_pid is None and not self._answering():
                    return None
                reason = "died" if not self._answering() else "stopped answering"
                return self._lost(child_pid, f"the warm worker {reason} during the evaluation")
            kind = event.get("ev")
            if kind == "exit":
                return sandbox.Outcome.from_dict(event["outcome"])
            if kind == "started":
                child_pid = int(event["pid"])
            else:
                on_event(event)

    def _answering(self) -> bool:
        """False once the worker's end of the pipe is closed (it exited or was killed)."""
        try:
            assert self.proc is not None
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return True
        return False

    def _lost(self, child_pid: int | None, why: str) -> sandbox.Outcome:
        log.warning("%s; restarting it on the next request", why)
        if child_pid is not None:
            sandbox.ProcessWatch(child_pid).kill_all()
        self.stop()
        return sandbox.Outcome(killed="worker", output_tail=why)

    def _read_event(self, deadline: float) -> dict[str, Any] | None:
        assert self.proc is not None and self.proc.stdout is not None
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

    @staticmethod
    def _end(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.write(b'{"op": "quit"}\n')
                proc.stdin.flush()
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                pass
        if proc.poll() is None:
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


def run_cold(request: dict[str, Any], launch: Launch, threads: int, on_event: EventSink) -> sandbox.Outcome:
    """A fresh interpreter for one request, supervised from this process."""
    limits = request.setdefault("limits", {})
    max_tasks = int(limits.get("max_tasks", sandbox.MAX_TASKS))
    workdir = tempfile.mkdtemp(prefix="sage-eval-")
    request["workdir"] = workdir
    cgroup = sandbox.PidsCgroup.create(max_tasks)
    limits["cgroup"] = str(cgroup.path) if cgroup else None
    r_res, w_res = os.pipe()
    r_out, w_out = os.pipe()
    try:
        proc = subprocess.Popen(
            [launch.python, "-m", "sage_engine.evaluation.child", str(w_res)],
            stdin=subprocess.PIPE, stdout=w_out, stderr=w_out, pass_fds=(w_res,),
            env=launch.environment(threads), cwd=workdir, start_new_session=True, close_fds=True,
        )
    except OSError as exc:
        for fd in (r_res, w_res, r_out, w_out):
            os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)
        if cgroup is not None:
            cgroup.remove()
        return sandbox.Outcome(exit_code=127, output_tail=f"cannot start {launch.python}: {exc}")
    os.close(w_res)
    os.close(w_out)
    payload = json.dumps(request).encode()

    def feed() -> None:  # a thread, so a child that never reads stdin cannot block us
        try:
            assert proc.stdin is not None
            proc.stdin.write(payload)
            proc.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        return sandbox.supervise(
            proc.pid, result_fd=r_res, output_fd=r_out, timeout_s=float(request.get("timeout_s", 180.0)),
            token=request["token"], watch=sandbox.ProcessWatch(proc.pid, cgroup, max_tasks),
            poll_exit=proc.poll, on_event=on_event,
        )
    finally:
        if proc.poll() is None:
            proc.kill()  # already SIGKILLed when killed; subprocess reaps it on a later Popen
        feeder.join(timeout=5)
        os.close(r_res)
        os.close(r_out)
        if cgroup is not None:
            cgroup.remove()
        shutil.rmtree(workdir, ignore_errors=True)


class SandboxPool:
    """Warm workers keyed by launch settings, with the cold path beside them."""

    def __init__(self, *, warm: bool, threads: int):
        self.warm, self.threads = warm, threads
        self.workers: dict[Launch, WarmWorker] = {}
        self.lock = threading.Lock()

    def run(self, request: dict[str, Any], launch: Launch, on_event: EventSink) -> sandbox.Outcome:
        with self.lock:
            if self.warm and launch.warm:
                worker = self.workers.setdefault(launch, WarmWorker(launch, self.threads))
                try:
                    return worker.run(request, on_event)
                except WorkerStartError as exc:
                    log.warning("%s; using a cold interpreter instead", exc)
            return run_cold(request, launch, self.threads, on_event)

    def worker_pids(self) -> list[int]:
        return [w.proc.pid for w in self.workers.values() if w.proc is not None and w.alive()]

    def close(self) -> None:
        with self.lock:
            for worker in self.workers.values():
                worker.stop()
            self.workers.clear()
            sandbox.PidsCgroup.sweep(wait_s=5.0)
