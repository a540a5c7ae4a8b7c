"""Evaluations on a Ray cluster, both sides: the server (any machine) submits, the hosts
that have the backend's resource (`NPU` on Ascend hosts through ray-ascend,
`GPU` on CUDA hosts, CPU otherwise) evaluate in the same confined sandbox as
local evaluation, with the warm worker pool of their Ray worker process.

Each evaluation is one Ray task, a streaming generator: it yields the
harness's progress events as they happen and the result last, so progress
reaches the MCP client stage by stage. Faults:
  - a host (node, raylet or worker process) that dies mid-evaluation: Ray
    runs the task once more on another host with the resource
    (`ray_retries`); after that the result is `crashed` with the reason
    `evaluation host lost` and what Ray saw;
  - no host with the resource for `ray_queue_timeout_s`, or no result by the
    evaluation's own time limit after it started: `crashed`, and the remote
    task is cancelled; no request waits longer;
  - a cancelled request cancels the remote task, which stops its sandbox.
Evaluation hosts never see the memory: results come back to the server,
which records them once (by request id).
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Protocol

from sage_engine.config import Config, default_cache_dir
from sage_engine.errors import BackendUnavailable, Cancelled, SageError
from sage_engine.evaluation.protocol import HostEvent, ProgressEvent
from sage_engine.models import EvalResult, ProgressCallback

if TYPE_CHECKING:
    from sage_engine.evaluation.host.tasks import Task

log = logging.getLogger(__name__)


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


class LocalEvaluate(Protocol):
    """Evaluates on the host it runs on (`harness.evaluate_here`)."""

    def __call__(
        self,
        config: Config,
        task: "Task",
        source: str,
        *,
        backend: str,
        trials: int | None,
        progress: ProgressCallback | None,
        cancel: threading.Event | None,
    ) -> EvalResult: ...


def this_host() -> str:
    return socket.gethostname()


TASK_NAME = "sage-evaluate"
NAMESPACE = "sage"
# Seconds granted beyond the evaluation's own limit for moving the request and
# the result between hosts.
TRANSFER_MARGIN_S = 30.0
# The resource a backend's evaluation asks for when Config.ray_resources does
# not say otherwise.
DEFAULT_RESOURCES: dict[str, dict[str, float]] = {
    "npu": {"NPU": 1.0},
    "cuda": {"GPU": 1.0},
}
HOST_LOST = "evaluation host lost"
# How often the host's generator looks for events (and lets a ray.cancel in),
# and the submitting side for results, a cancel or a deadline.
POLL_S = 0.25


def backend_resources(config: Config, backend: str) -> dict[str, float]:
    return dict(config.ray_resources.get(backend) or DEFAULT_RESOURCES.get(backend) or {"CPU": 1.0})


def connect(config: Config) -> None:
    """Join the cluster once per process; a clear error when it is not there."""
    import ray

    address = config.ray_address or "auto"
    if address != "auto":
        _probe(address)
    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        if address != "auto" and not _same_address(address, current):
            raise BackendUnavailable(
                f"this process already evaluates on the Ray cluster at {current}, not RAY_ADDRESS={address}: one cluster per server process"
            )
        return
    try:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise BackendUnavailable(
            f"cannot reach the Ray cluster at RAY_ADDRESS={config.ray_address or '(unset: auto)'}: {exc}. Start one "
            "with `ray start --head` (and `ray start --address HEAD:PORT` on each evaluation host), set RAY_ADDRESS "
            "to the head's address, or evaluate here with --executor local"
        ) from exc


def _same_address(a: str, b: str) -> bool:
    def norm(address: str) -> tuple[str, str]:
        host, _, port = address.removeprefix("ray://").rpartition(":")
        try:
            return socket.gethostbyname(host.strip("[]") or "127.0.0.1"), port
        except OSError:
            return host, port

    return norm(a) == norm(b)


PROBE_TIMEOUT_S = 5.0  # ray.init retries an unreachable address for minutes; a TCP connect says it at once


def _probe(address: str) -> None:
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=PROBE_TIMEOUT_S):
            return
    except (OSError, ValueError) as exc:
        raise BackendUnavailable(
            f"cannot reach the Ray cluster at RAY_ADDRESS={address}: {exc}. Start its head with `ray start --head`, "
            "check the address (HOST:PORT of the head's GCS), or evaluate here with --executor local"
        ) from exc


class RayExecutor:
    name = "ray"

    def __init__(self, config: Config, evaluate: "LocalEvaluate"):
        try:
            import ray  # noqa: F401
        except ImportError as exc:
            raise BackendUnavailable("--executor ray needs Ray: pip install 'sage-npu[ray]'") from exc
        self.config, self.evaluate_here = config, evaluate
        connect(config)
        self._remote = remote_function()

    # ------------------------------------------------------------ evaluation

    def evaluate(
        self,
        task: "Task",
        source: str,
        *,
        backend: str,
        trials: int | None,
        progress: ProgressCallback | None,
        cancel: threading.Event | None,
    ) -> EvalResult:
        import ray

        c = self.config
        resources = backend_resources(c, backend)
        options: dict[str, Any] = {
            "name": task_name(task.id, backend),
            "max_retries": c.ray_retries,
            "retry_exceptions": False,
            "num_cpus": resources.pop("CPU", 0.0),
            "num_gpus": resources.pop("GPU", 0.0),
        }
        if resources:
            options["resources"] = resources
        gen = self._remote.options(**options).remote(HostRequest(task, source, backend, trials, _host_config(c), self.evaluate_here))
        watch = _Watch(time.monotonic())
        lost = lambda why: _lost(task, backend, source, why, watch.hosts)  # noqa: E731
        try:
            while True:
                now = time.monotonic()
                if cancel is not None and cancel.is_set():
                    ray.cancel(gen)
                    raise Cancelled("the evaluation was cancelled; the host stopped it and nothing was recorded")
                if watch.started is None and now - watch.waiting_since > c.ray_queue_timeout_s:
                    ray.cancel(gen)
                    return lost(
                        f"no host with {backend_resources(c, backend)} free within {c.ray_queue_timeout_s:.0f} s (ray_queue_timeout_s)"
                    )
                if watch.started is not None and now - watch.started > c.eval_timeout_s + TRANSFER_MARGIN_S:
                    ray.cancel(gen)
                    return lost(f"no result within {c.eval_timeout_s:.0f} s of starting")
                watch.check_node(now)
                ready, _ = ray.wait([gen], timeout=POLL_S)
                if not ready:
                    continue
                try:
                    event = ray.get(next(gen))
                except StopIteration:
                    return lost("the host ended the evaluation without a result")
                except ray.exceptions.RayTaskError as exc:
                    cause = getattr(exc, "cause", None)
                    if isinstance(cause, SageError):
                        raise cause from exc  # the caller's mistake, found on the host
                    return lost(f"the evaluation failed on the host: {_first_line(exc)}")
                except ray.exceptions.RayError as exc:  # worker, node or object lost after the retries
                    return lost(f"{type(exc).__name__}: {_first_line(exc)}")
                watch.see(event.host, event.node)
                if event.progress is not None and progress is not None:
                    # A retry starts its stages again; MCP progress must only increase.
                    step = event.progress
                    if step.progress > watch.shown:
                        watch.shown = step.progress
                        progress(step.progress, step.total, f"{step.message} (on {event.host})")
                elif event.result is not None:
                    result = EvalResult.model_validate(event.result)
                    if not watch.lost_hosts:
                        return result
                    return result.model_copy(
                        update={"message": f"{result.message} (retried on {event.host} after {HOST_LOST}: {', '.join(watch.lost_hosts)})"}
                    )
        except BaseException:
            ray.cancel(gen)  # a caller that stops listening must not leave the evaluation running
            raise

    # ------------------------------------------------------------ visibility

    def hosts(self) -> list[HostSlots]:
        from ray.util.state import list_nodes

        import ray

        free_by_node = _free_by_node()
        out = []
        for node in list_nodes(detail=True, raise_on_missing_output=False):
            total = {k: v for k, v in (node.resources_total or {}).items() if not k.startswith("node:") and "memory" not in k}
            out.append(
                HostSlots(
                    host=f"{node.node_name or node.node_ip}",
                    alive=node.state == "ALIVE",
                    total=total,
                    free={k: free_by_node.get(node.node_id, {}).get(k, 0.0) for k in total},
                )
            )
        if not out:
            out = [HostSlots("cluster", True, ray.cluster_resources(), ray.available_resources())]
        return out

    def running(self) -> list[RunningEvaluation]:
        return running_evaluations()

    def close(self) -> None:
        pass


class _Watch:
    """Where one evaluation is, as the submitting side sees it."""

    NODE_CHECK_S = 2.0  # how often the running host's liveness is asked of the cluster

    def __init__(self, now: float):
        self.waiting_since = now
        self.started: float | None = None
        self.hosts: list[str] = []
        self.lost_hosts: list[str] = []
        self.node: str | None = None
        self.checked = now
        self.shown = 0.0

    def see(self, host: str, node: str) -> None:
        """Every event names its host; the first from a node starts the clock
        (after a retry Ray skips the events the caller already read, so the
        retry's own "started" may never arrive)."""
        if node != self.node:
            if self.node is not None:
                # Events from a second node: Ray retried there, which it does only when the first was lost
                # (exceptions are not retried), possibly before the liveness check below noticed.
                self.lost_hosts.append(self.hosts[-1])
            self.started, self.node = time.monotonic(), node
            self.hosts.append(host)

    def check_node(self, now: float) -> None:
        """A host that died: Ray retries elsewhere if it can; the retry gets
        the queue timeout again to find a host."""
        if self.node is None or now - self.checked < self.NODE_CHECK_S:
            return
        import ray

        self.checked = now
        if not any(n["NodeID"] == self.node and n["Alive"] for n in ray.nodes()):
            log.warning("evaluation host %s (node %s) was lost", self.hosts[-1], self.node)
            self.lost_hosts.append(self.hosts[-1])
            self.node, self.started, self.waiting_since = None, None, now


def task_name(task_id: str, backend: str) -> str:
    """The Ray task's name: what `sage evals list` reads the task and backend from."""
    return f"{TASK_NAME}|{task_id}|{backend}"


def evaluation_tasks(state: str | None = None, detail: bool = False) -> list[Any]:
    """SAGE's evaluations among the cluster's Ray tasks (every server's)."""
    from ray.util.state import list_tasks

    filters: list[tuple[str, str, str | bool | int | float]] = [("state", "=", state)] if state else []
    return [
        t for t in list_tasks(filters=filters, detail=detail, raise_on_missing_output=False) if (t.name or "").split("|")[0] == TASK_NAME
    ]


def running_evaluations() -> list[RunningEvaluation]:
    """Evaluations queued or running anywhere in the cluster (every server's)."""
    from ray.util.state import list_nodes

    names = {n.node_id: n.node_name or n.node_ip for n in list_nodes(raise_on_missing_output=False)}
    now = time.time()
    out = []
    for t in evaluation_tasks(detail=True):
        if t.state in ("FINISHED", "FAILED"):
            continue
        _, task_id, backend = (t.name.split("|", 2) + ["", ""])[:3]
        created = (t.creation_time_ms or t.start_time_ms or now * 1000) / 1000
        state = "running" if t.state == "RUNNING" else "queued"
        out.append(
            RunningEvaluation(
                task=task_id,
                backend=backend,
                state=state,
                host=names.get(t.node_id) if t.node_id else None,
                age_s=max(0.0, now - created),
                request_id=t.task_id,
            )
        )
    return out


def _free_by_node() -> dict[str, dict[str, float]]:
    try:
        # A developer API (Ray 2.x); the private `state._available_resources_per_node`
        # this read before is gone, which left every host's free slots at 0.
        from ray._private.state import available_resources_per_node

        return {nid: dict(res) for nid, res in available_resources_per_node().items()}
    except Exception:  # noqa: BLE001 - a missing developer API only loses the per-node split
        return {}


def _host_config(config: Config) -> Config:
    """What an evaluation host needs: the evaluation settings, with its own
    cache and no memory (a host never opens the database)."""
    return config.replace(db_url=None, cache_dir=default_cache_dir(), executor="local")


def _lost(task: "Task", backend: str, source: str, why: str, hosts: list[str]) -> EvalResult:
    from sage_engine.evaluation.host.machine import candidate_hash

    where = f" (last host: {hosts[-1]})" if hosts else ""
    return EvalResult(
        status="host_error",
        message=f"{HOST_LOST}: {why}{where}",
        task=task.id,
        backend=backend,
        hardware="unknown",
        candidate_hash=candidate_hash(source),
        host=hosts[-1] if hosts else None,
    )


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


# ------------------------------------------------------------ the host's side


@dataclass(frozen=True)
class HostRequest:
    """One evaluation, as the server sends it to an evaluation host, with the
    function that evaluates on a host (`harness.evaluate_here`, sent by
    reference: the host imports it; this package never imports the harness)."""

    task: "Task"
    source: str
    backend: str
    trials: int | None
    config: Config
    evaluate: "LocalEvaluate"


def evaluate_on_host(request: HostRequest) -> Iterator[HostEvent]:
    """Run one evaluation here and yield its events, each naming this host and Ray node."""
    import ray

    host, node = this_host(), ray.get_runtime_context().get_node_id()
    events: queue.Queue = queue.Queue()
    cancel = threading.Event()

    def progress(done: float, total: float | None, message: str) -> None:
        events.put(HostEvent(host, node, progress=ProgressEvent(float(done), total, message)))

    def run() -> None:
        try:
            result = request.evaluate(
                request.config,
                request.task,
                request.source,
                backend=request.backend,
                trials=request.trials,
                progress=progress,
                cancel=cancel,
            )
            events.put(HostEvent(host, node, result=result.model_dump(mode="json")))
        except BaseException as exc:  # noqa: BLE001 - handed to the generator, which re-raises it to the caller
            events.put(HostEvent(host, node, error=exc))

    yield HostEvent(host, node)  # started
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
            if event.result is not None:
                return
    finally:
        # Cancelled (ray.cancel raises here) or abandoned: stop the sandbox.
        cancel.set()
        worker.join(timeout=10)


_remote: Any = None  # the Ray remote function, made on first use (importing ray is slow)


def remote_function() -> Any:
    global _remote
    if _remote is None:
        import ray

        _remote = ray.remote(num_returns="streaming")(evaluate_on_host)
    return _remote
