"""The evaluation host's side of a Ray evaluation: one Ray task per
evaluation, a streaming generator that runs it in this host's harness (one
per Ray worker process, so later evaluations start warm) and yields its
progress and result (`HostEvent`s), each naming this host and Ray node.
Evaluation hosts never see the memory."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from sage_engine.config import Config
from sage_engine.evaluation.executor import this_host

if TYPE_CHECKING:
    from sage_engine.evaluation.harness import Harness
    from sage_engine.evaluation.tasks import Task

# How often the host's generator looks for events (and lets a ray.cancel in),
# and the submitting side for results, a cancel or a deadline.
POLL_S = 0.25


_harnesses: dict[str, "Harness"] = {}
_lock = threading.Lock()


def _harness_for(config: Config) -> "Harness":
    """One harness (and warm worker pool) per Ray worker process and config:
    Ray reuses worker processes, so later evaluations start warm."""
    from sage_engine.evaluation.harness import Harness

    key = repr(config)  # Config holds a dict, so it is not hashable itself
    with _lock:
        if key not in _harnesses:
            _harnesses[key] = Harness(config)
        return _harnesses[key]


@dataclass(frozen=True)
class HostRequest:
    """One evaluation, as the server sends it to an evaluation host."""

    task: "Task"
    source: str
    backend: str
    trials: int | None
    config: Config


@dataclass(frozen=True)
class HostEvent:
    """What an evaluation host streams back: `started`, `progress`..., then `result` (or the error it raised)."""

    kind: str
    host: str
    node: str
    done: float = 0.0
    total: float | None = None
    message: str = ""
    result: dict[str, Any] | None = None
    error: BaseException | None = None


def evaluate_on_host(request: HostRequest) -> Iterator[HostEvent]:
    """Run one evaluation here and yield its events, each naming this host and Ray node."""
    import ray

    host, node = this_host(), ray.get_runtime_context().get_node_id()
    events: queue.Queue = queue.Queue()
    cancel = threading.Event()

    def progress(done: float, total: float | None, message: str) -> None:
        events.put(HostEvent("progress", host, node, done=float(done), total=total, message=message))

    def run() -> None:
        try:
            result = _harness_for(request.config).evaluate(request.task, request.source, backend=request.backend,
                                                           trials=request.trials, progress=progress, cancel=cancel)
            events.put(HostEvent("result", host, node, result=result.model_dump(mode="json")))
        except BaseException as exc:  # noqa: BLE001 - handed to the generator, which re-raises it to the caller
            events.put(HostEvent("error", host, node, error=exc))

    yield HostEvent("started", host, node)
    worker = threading.Thread(target=run, name="sage-evaluation", daemon=True)
    worker.start()
    try:
        while True:
            try:
                # Never block for long: ray.cancel raises KeyboardInterrupt here only
                # when this thread runs Python, and a blocked get() does not.
                event = events.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if event.error is not None:
                raise event.error
            yield event
            if event.kind == "result":
                return
    finally:
        # Cancelled (ray.cancel raises here) or abandoned: stop the sandbox.
        cancel.set()
        worker.join(timeout=10)


_remote = None


def remote_function():
    global _remote
    if _remote is None:
        import ray

        _remote = ray.remote(num_returns="streaming")(evaluate_on_host)
    return _remote
