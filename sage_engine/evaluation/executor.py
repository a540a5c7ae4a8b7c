"""Where evaluations run: on this machine (`local`, the warm pool of the
harness) or on the accelerator hosts of a Ray cluster (`ray`).

    executor = LocalExecutor(harness_factory)  # or RayExecutor(config): ray_executor.py
    result = executor.evaluate(task, source, backend="npu", trials=3, progress=cb, cancel=event)

Either way the result is an `EvalResult` with the same fields, plus the host
that ran it; the memory is written by the caller (the server), never by an
evaluation host. `cancel` (a threading.Event) stops the evaluation wherever
it runs.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from sage_engine.models import EvalResult

if TYPE_CHECKING:
    from sage_engine.evaluation.harness import Harness
    from sage_engine.evaluation.tasks import Task

Progress = Callable[[float, "float | None", str], None]
EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class HostSlots:
    """One evaluation host and what it has free."""

    host: str
    alive: bool
    total: dict[str, float] = field(default_factory=dict)
    free: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RunningEvaluation:
    task: str
    backend: str
    state: str  # queued, running
    host: str | None
    age_s: float
    request_id: str | None = None


class Executor(Protocol):
    name: str

    def evaluate(self, task: "Task", source: str, *, backend: str, trials: int | None, progress: Progress | None,
                 cancel: threading.Event | None) -> EvalResult: ...

    def hosts(self) -> list[HostSlots]: ...

    def running(self) -> list[RunningEvaluation]: ...

    def close(self) -> None: ...


def this_host() -> str:
    return socket.gethostname()


class LocalExecutor:
    """Evaluations in this process's harness (its warm worker pool)."""

    name = "local"

    def __init__(self, harness_factory: Callable[[], "Harness"]):
        self._harness_factory = harness_factory

    def evaluate(self, task, source, *, backend, trials, progress, cancel) -> EvalResult:
        return self._harness_factory().evaluate(task, source, backend=backend, trials=trials, progress=progress,
                                                cancel=cancel)

    def hosts(self) -> list[HostSlots]:
        return [HostSlots(this_host(), True, {"CPU": float(os.cpu_count() or 1)}, {})]

    def running(self) -> list[RunningEvaluation]:
        return []  # only this process's own; see `sage evals list`

    def close(self) -> None:
        pass
