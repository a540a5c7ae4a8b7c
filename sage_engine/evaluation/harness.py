"""The evaluation harness: the one object the Engine calls.

    with Harness(config) as harness:
        result = harness.evaluate(load_task("softmax"), source, backend="cpu")

`evaluate` returns an `EvalResult` for any candidate, however it fails, and
raises only for caller mistakes (`InvalidInput`: empty or oversized source,
bad trials) and unusable backends (`BackendUnavailable`). It is safe to call
from worker threads (`anyio.to_thread`): evaluations are serialised by a lock,
since they would compete for the same cores and spoil each other's timings.
The progress callback is called from the evaluating thread.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from sage_engine.config import Config
from sage_engine.errors import BackendUnavailable, InvalidInput
from sage_engine.evaluation.backends.base import Backend, get_backend
from sage_engine.evaluation.pool import SandboxPool
from sage_engine.evaluation.tasks import Task
from sage_engine.models import BackendStatus, EvalResult

MAX_TRIALS = 100

Progress = Callable[[float, "float | None", str], None]


class Harness:
    def __init__(self, config: Config):
        self.config = config
        self.pool = SandboxPool(warm=config.warm_pool, threads=config.eval_threads)
        self._backends: dict[str, Backend] = {}
        self._lock = threading.Lock()
        self._closed = False

    def backend(self, name: str | None = None) -> Backend:
        name = name or self.config.backend
        if name not in self._backends:
            self._backends[name] = get_backend(name, self.config, pool=self.pool)
        return self._backends[name]

    def backend_status(self, name: str | None = None) -> BackendStatus:
        return self.backend(name).status()

    def evaluate(
        self,
        task: Task,
        candidate_source: str,
        *,
        backend: str | None = None,
        trials: int | None = None,
        progress: Progress | None = None,
    ) -> EvalResult:
        if not isinstance(candidate_source, str) or not candidate_source.strip():
            raise InvalidInput("the candidate source is empty; pass the code of a module defining class ModelNew")
        if len(candidate_source) > self.config.max_candidate_chars:
            raise InvalidInput(
                f"the candidate is {len(candidate_source)} characters; the limit is "
                f"{self.config.max_candidate_chars} (Config.max_candidate_chars)"
            )
        n_trials = self.config.correctness_trials if trials is None else trials
        if not isinstance(n_trials, int) or not 1 <= n_trials <= MAX_TRIALS:
            raise InvalidInput(f"trials must be an integer from 1 to {MAX_TRIALS}, got {trials!r}")
        with self._lock:
            if self._closed:
                raise InvalidInput("this Harness is closed; create a new one")
            chosen = self.backend(backend)
            status = chosen.status()
            if not status.ready:
                raise BackendUnavailable(f"backend {status.name!r} is not ready: {status.reason}. {status.setup}".strip())
            start = time.monotonic()
            result = chosen.evaluate(task, candidate_source, trials=n_trials, progress=progress)
            result.duration_s = round(time.monotonic() - start, 4)
            return result

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for backend in self._backends.values():
                backend.close()
            self._backends.clear()
            self.pool.close()

    def __enter__(self) -> "Harness":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
