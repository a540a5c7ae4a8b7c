"""The evaluation harness: the one way into an evaluation.

    with Harness(config) as harness:
        result = harness.evaluate(load_task("softmax"), source, backend="cpu")

`evaluate` takes plain data (a task, the candidate's source, a backend name),
checks it once (the source and trials: `check_call`; the backend, with how
this host confines candidates), and runs the evaluation here (this host's
warm worker pool) or, with `Config.executor = "ray"`, on a cluster host
that has the backend's resource (`cluster/ray.py`, which evaluates there
through `evaluate_here`, this module's own path). It returns an
`EvalResult` for any candidate, however it fails, streams progress through
a callback and honours a cancellation handle: once `cancel` (a
`threading.Event`) is set, the evaluation's processes are killed within a
second and `Cancelled` is raised. It raises otherwise only for caller
mistakes (`InvalidInput`) and unusable backends (`BackendUnavailable`, also
when `sandbox_confinement = "required"` and this host cannot confine). It
never touches the memory database.

Safe to call from several threads at once: up to `Config.eval_workers`
evaluations run side by side, each on its own worker, with timing phases
taking turns (see `host/pool.py`). The progress callback is called from the
evaluating thread.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import TYPE_CHECKING

from sage_engine.config import Config
from sage_engine.errors import BackendUnavailable, Busy, Cancelled, InvalidInput
from sage_engine.evaluation.backends.base import Backend, Stamp, get_backend, with_confinement
from sage_engine.evaluation.host import confine
from sage_engine.evaluation.host.launch import confinement_for, sandboxing_for
from sage_engine.evaluation.host.pool import WorkerPool
from sage_engine.evaluation.host.tasks import Task
from sage_engine.models import BackendStatus, Diagnostic, EvalResult, ProgressCallback

if TYPE_CHECKING:
    from sage_engine.evaluation.cluster.ray import HostSlots, RayExecutor, RunningEvaluation

CLOSE_WAIT_S = 10.0  # closing cancels evaluations in flight and waits this long for them to return


def check_call(config: Config, candidate_source: str, trials: int | None) -> int:
    """The caller's part of an evaluation, checked once whichever way it
    runs (here, or on a cluster's host): the source, and the trials (the
    configured count when None)."""
    if not isinstance(candidate_source, str) or not candidate_source.strip():
        raise InvalidInput("the candidate source is empty; pass the code of a module defining class ModelNew")
    if len(candidate_source) > config.max_candidate_chars:
        raise InvalidInput(
            f"the candidate is {len(candidate_source)} characters; the limit is {config.max_candidate_chars} (Config.max_candidate_chars)"
        )
    n_trials = config.correctness_trials if trials is None else trials
    if not isinstance(n_trials, int) or isinstance(n_trials, bool) or not 1 <= n_trials <= config.max_trials:
        raise InvalidInput(f"trials must be an integer from 1 to {config.max_trials}, got {trials!r}")
    return n_trials


def limits_only_note(confinement: confine.Confinement) -> Diagnostic:
    return Diagnostic(
        severity="warning",
        category="confinement",
        message=f"confinement: limits-only ({confinement.detail}); the candidate could reach your "
        f"files, the network and other processes. Fix: {confinement.fix}",
    )


class Harness:
    def __init__(self, config: Config):
        self.config = config
        self.confinement = confinement_for(config)
        self.pool = WorkerPool(
            warm=config.warm_pool,
            threads=config.eval_threads,
            sandboxing=sandboxing_for(config, self.confinement),
            slots=config.eval_workers,
        )
        self._backends: dict[str, Backend] = {}
        self._cluster: RayExecutor | None = None
        self._lock = threading.Lock()
        self._active: set[threading.Event] = set()
        self._idle = threading.Condition(self._lock)
        self._closed = False
        self._took_s = 10.0  # recent evaluations' mean length, for the `busy` error's retry hint

    def backend(self, name: str | None = None) -> Backend:
        name = name or self.config.backend
        with self._lock:
            if name not in self._backends:
                self._backends[name] = get_backend(name, self.config, pool=self.pool)
            return self._backends[name]

    def backend_status(self, name: str | None = None) -> BackendStatus:
        return with_confinement(self.backend(name).status(), self.confinement)

    @property
    def cluster(self) -> "RayExecutor":
        """The Ray cluster this harness submits to (`executor = "ray"`), joined on first use."""
        with self._lock:
            if self._cluster is None:
                from sage_engine.evaluation.cluster.ray import RayExecutor

                self._cluster = RayExecutor(self.config, evaluate_here)
            return self._cluster

    def evaluate(
        self,
        task: Task,
        candidate_source: str,
        *,
        backend: str | None = None,
        trials: int | None = None,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> EvalResult:
        n_trials = check_call(self.config, candidate_source, trials)
        name = backend or self.config.backend
        if self.config.executor == "ray":
            # Checked where it runs: the cluster host's backends and sandbox.
            return self.cluster.evaluate(task, candidate_source, backend=name, trials=n_trials, progress=progress, cancel=cancel)
        chosen = self.backend(name)
        status = self.backend_status(name)
        if not status.ready:
            raise BackendUnavailable(f"backend {status.name!r} is not ready: {status.reason}. {status.setup}".strip())
        handle = cancel or threading.Event()
        with self._lock:
            if self._closed:
                raise InvalidInput("this Harness is closed; create a new one")
            self._refuse_when_full()
            self._active.add(handle)
        began = time.monotonic()
        stamp = Stamp(
            self.confinement.mode, socket.gethostname(), () if self.confinement.confined else (limits_only_note(self.confinement),)
        )
        try:
            result = chosen.evaluate(task, candidate_source, trials=n_trials, progress=progress, cancel=handle, stamp=stamp)
            if handle.is_set():
                raise Cancelled("the evaluation was cancelled; nothing was recorded")
        finally:
            with self._lock:
                self._active.discard(handle)
                self._took_s = 0.8 * self._took_s + 0.2 * (time.monotonic() - began)
                self._idle.notify_all()
        return result

    def _refuse_when_full(self) -> None:
        """Back-pressure (under `_lock`): with `eval_queue_max` evaluations
        already waiting for one of the pool's workers, refuse at once."""
        bound = self.config.eval_queue_max
        waiting = len(self._active) - self.pool.n_slots
        if bound and waiting >= bound:
            retry = max(1.0, round((waiting + 1) * self._took_s / self.pool.n_slots))
            raise Busy(
                f"{waiting} evaluation(s) already wait for this server's {self.pool.n_slots} "
                f"worker(s) (eval_queue_max {bound}); nothing was run or recorded: try again in about "
                f"{retry:.0f} s",
                retry_after_s=retry,
            )

    def hosts(self) -> list["HostSlots"]:
        """Where evaluations run: this host, or the cluster's hosts and their free slots."""
        from sage_engine.evaluation.cluster.ray import HostSlots, this_host

        if self.config.executor == "ray":
            return self.cluster.hosts()
        return [HostSlots(this_host(), True, {"CPU": float(os.cpu_count() or 1)}, {})]

    def running(self) -> list["RunningEvaluation"]:
        """Evaluations queued or running on the cluster (every server's); none here otherwise."""
        return self.cluster.running() if self.config.executor == "ray" else []

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


_here: dict[str, Harness] = {}
_here_lock = threading.Lock()


def evaluate_here(
    config: Config,
    task: Task,
    source: str,
    *,
    backend: str,
    trials: int | None,
    progress: ProgressCallback | None,
    cancel: threading.Event | None,
) -> EvalResult:
    """One evaluation on this host, for a cluster host (`cluster/ray.py`): one
    harness (and warm worker pool) per process and config, since Ray reuses
    its worker processes and later evaluations then start warm."""
    key = repr(config)  # Config holds a dict, so it is not hashable itself
    with _here_lock:
        if key not in _here:
            _here[key] = Harness(config.replace(executor="local"))
        harness = _here[key]
    return harness.evaluate(task, source, backend=backend, trials=trials, progress=progress, cancel=cancel)
