"""The evaluation harness: the one object the Engine calls.

    with Harness(config) as harness:
        result = harness.evaluate(load_task("softmax"), source, backend="cpu")

`evaluate` takes plain data (a task, the candidate's source, a backend name),
returns an `EvalResult` for any candidate, however it fails, streams
progress through a callback and honours a cancellation handle: once
`cancel` (a `threading.Event`) is set, the evaluation's processes are
killed within a second and `Cancelled` is raised. It raises otherwise
only for caller mistakes (`InvalidInput`: empty or oversized source, bad
trials: `check_call`) and unusable backends (`BackendUnavailable`, also when
`sandbox_confinement = "required"` and this host cannot confine). It never
touches the memory database.

Safe to call from several threads at once: up to `Config.eval_workers`
evaluations run side by side, each on its own worker, with timing phases
taking turns (see `host/pool.py`). The progress callback is called from the
evaluating thread.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Callable

from sage_engine.config import Config
from sage_engine.errors import BackendUnavailable, Cancelled, InvalidInput
from sage_engine.evaluation.backends.base import Backend, get_backend, with_confinement
from sage_engine.evaluation.host import confine
from sage_engine.evaluation.host.launch import confinement_for, sandboxing_for
from sage_engine.evaluation.host.pool import WorkerPool
from sage_engine.evaluation.tasks import Task
from sage_engine.models import BackendStatus, Diagnostic, EvalResult

CLOSE_WAIT_S = 10.0  # closing cancels evaluations in flight and waits this long for them to return

Progress = Callable[[float, "float | None", str], None]


def check_call(config: Config, candidate_source: str, trials: int | None) -> int:
    """The caller's part of an evaluation, checked once whichever way it
    runs (here, or on a cluster's host): the source, and the trials (the
    configured count when None)."""
    if not isinstance(candidate_source, str) or not candidate_source.strip():
        raise InvalidInput("the candidate source is empty; pass the code of a module defining class ModelNew")
    if len(candidate_source) > config.max_candidate_chars:
        raise InvalidInput(f"the candidate is {len(candidate_source)} characters; the limit is "
                           f"{config.max_candidate_chars} (Config.max_candidate_chars)")
    n_trials = config.correctness_trials if trials is None else trials
    if not isinstance(n_trials, int) or isinstance(n_trials, bool) or not 1 <= n_trials <= config.max_trials:
        raise InvalidInput(f"trials must be an integer from 1 to {config.max_trials}, got {trials!r}")
    return n_trials


def limits_only_note(confinement: confine.Confinement) -> Diagnostic:
    return Diagnostic(severity="warning", category="confinement",
                      message=f"confinement: limits-only ({confinement.detail}); the candidate could reach your "
                              f"files, the network and other processes. Fix: {confinement.fix}")


class Harness:
    def __init__(self, config: Config):
        self.config = config
        self.confinement = confinement_for(config)
        self.pool = WorkerPool(warm=config.warm_pool, threads=config.eval_threads,
                               sandboxing=sandboxing_for(config, self.confinement), slots=config.eval_workers)
        self._backends: dict[str, Backend] = {}
        self._lock = threading.Lock()
        self._active: set[threading.Event] = set()
        self._idle = threading.Condition(self._lock)
        self._closed = False

    def backend(self, name: str | None = None) -> Backend:
        name = name or self.config.backend
        with self._lock:
            if name not in self._backends:
                self._backends[name] = get_backend(name, self.config, pool=self.pool)
            return self._backends[name]

    def backend_status(self, name: str | None = None) -> BackendStatus:
        return with_confinement(self.backend(name).status(), self.confinement)

    def evaluate(
        self,
        task: Task,
        candidate_source: str,
        *,
        backend: str | None = None,
        trials: int | None = None,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> EvalResult:
        n_trials = check_call(self.config, candidate_source, trials)
        if self.confinement.required and not self.confinement.confined:
            raise BackendUnavailable(
                f"evaluation refused: sandbox_confinement is 'required' but {self.confinement.detail}. "
                f"Fix: {self.confinement.fix}"
            )
        chosen = self.backend(backend)
        status = chosen.status()
        if not status.ready:
            raise BackendUnavailable(f"backend {status.name!r} is not ready: {status.reason}. {status.setup}".strip())
        handle = cancel or threading.Event()
        with self._lock:
            if self._closed:
                raise InvalidInput("this Harness is closed; create a new one")
            self._active.add(handle)
        try:
            start = time.monotonic()
            result = chosen.evaluate(task, candidate_source, trials=n_trials, progress=progress, cancel=handle)
            if handle.is_set():
                raise Cancelled("the evaluation was cancelled; nothing was recorded")
        finally:
            with self._lock:
                self._active.discard(handle)
                self._idle.notify_all()
        update: dict = {"duration_s": round(time.monotonic() - start, 4), "confinement": self.confinement.mode,
                        "host": socket.gethostname()}
        if not self.confinement.confined:
            update["diagnostics"] = [*result.diagnostics, limits_only_note(self.confinement)]
        return result.model_copy(update=update)

    def close(self) -> None:
        """Cancel evaluations in flight, wait for them briefly, stop every worker."""
        with self._lock:
            self._closed = True
            for handle in self._active:
                handle.set()
            self._idle.wait_for(lambda: not self._active, timeout=CLOSE_WAIT_S)
            backends = list(self._backends.values())
            self._backends.clear()
        for backend in backends:
            backend.close()
        self.pool.close()

    def __enter__(self) -> "Harness":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

