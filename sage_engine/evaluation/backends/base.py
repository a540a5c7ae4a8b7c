"""The contract every evaluation backend follows, and the registry.

A backend turns (task, candidate source) into an `EvalResult`:

    class MyBackend(Backend):
        name = "my-backend"
        def status(self) -> BackendStatus: ...       # cheap; never raises
        def evaluate(self, task, source, *, trials, progress=None, cancel=None) -> EvalResult: ...

Most backends subclass `SandboxBackend` and only say how their children run:
`launch()` (interpreter, e.g. a backend's own virtualenv, environment, the
device nodes its sandbox needs), `child_env()`, `build_vars()` (variables
that point into the candidate's private build folder), `device`, `timer`
(a name from `timing.TIMERS` or "module:factory" importable in the child),
`candidate_hook` (child-side code around the candidate's run,
"module:factory") or `runner` (a routine with no reference, "module:function")
and `timing_options()`. Child-side code lives in `evaluation/child/`. Static checks (syntax, anti-cheat) run first for
every sandboxed backend: early, friendly feedback; the sandbox is the boundary.

The registry imports backend modules lazily. `ascend-compile`, `npu` and
`cuda` live in `ascend_compile.py`, `npu.py` and `cuda.py` (classes
`AscendCompileBackend`, `NpuBackend`, `CudaBackend`); until such a module
exists its entry reports unavailable with a setup hint.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import secrets
import shutil
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from sage_engine.config import BACKENDS, Config
from sage_engine.errors import BackendUnavailable, InvalidInput
from sage_engine.evaluation.host import calibration as host_limits
from sage_engine.evaluation.host import confine, machine, results, roofline, static_checks
from sage_engine.evaluation.host.launch import Launch, confinement_for, sandboxing_for
from sage_engine.evaluation.host.pool import WorkerPool
from sage_engine.evaluation.host.variants import variants_for
from sage_engine.evaluation.protocol import (
    MAX_TASKS,
    BuildSpec,
    Event,
    Limits,
    Outcome,
    ProfileOptions,
    ProgressEvent,
    Request,
    TimingOptions,
    VerdictOptions,
)
from sage_engine.evaluation.host.tasks import Task
from sage_engine.models import BackendStatus, Diagnostic, EvalResult, MachineLimits, ProgressCallback

log = logging.getLogger(__name__)

REGISTRY: dict[str, tuple[str, str]] = {
    "cpu": ("sage_engine.evaluation.backends.base", "CpuBackend"),
    "triton": ("sage_engine.evaluation.backends.triton_interp", "TritonInterpreterBackend"),
    "ascend-compile": ("sage_engine.evaluation.backends.ascend_compile", "AscendCompileBackend"),
    "npu": ("sage_engine.evaluation.backends.device", "NpuBackend"),
    "cuda": ("sage_engine.evaluation.backends.device", "CudaBackend"),
}
SETUP_HINTS: dict[str, str] = {
    "ascend-compile": "needs its own virtualenv with triton-ascend, ascendnpu-ir, pybind11 and numpy<2 "
    "(built under the SAGE cache dir); no NPU required",
    "npu": "needs an Ascend NPU host with CANN and a matching torch_npu installed",
    "cuda": "needs an NVIDIA GPU and a CUDA build of torch",
}


@dataclass(frozen=True)
class Stamp:
    """What the harness knows of an evaluation that its backend does not:
    how this host confines candidates, its name, and notes every result of
    it carries (limits-only confinement). Goes into the result as it is built."""

    confinement: str = ""
    host: str | None = None
    notes: tuple[Diagnostic, ...] = ()


class Backend(ABC):
    name: str  # each backend class's own; an unavailable one stands in under the name asked for
    timing_representative: ClassVar[bool] = True

    def __init__(self, config: Config, pool: WorkerPool | None = None):
        self.config = config
        self._owns_pool = pool is None
        self._pool = pool

    @property
    def pool(self) -> WorkerPool:
        if self._pool is None:
            c = self.config
            self._pool = WorkerPool(
                warm=c.warm_pool, threads=c.eval_threads, slots=c.eval_workers, sandboxing=sandboxing_for(c, confinement_for(c))
            )
        return self._pool

    @abstractmethod
    def status(self) -> BackendStatus:
        """Whether this backend can run here; cheap and never raises."""

    @abstractmethod
    def evaluate(
        self,
        task: Task,
        source: str,
        *,
        trials: int,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
        stamp: Stamp = Stamp(),
    ) -> EvalResult:
        """A result for any candidate, however it fails; never raises for candidate faults.
        Once `cancel` is set the evaluation's processes are killed and it returns at once."""

    def close(self) -> None:
        if self._owns_pool and self._pool is not None:
            self._pool.close()


class SandboxBackend(Backend):
    """A backend whose candidates run in the sandbox child (`child.py`)."""

    device: ClassVar[str] = "cpu"
    timer: ClassVar[str] = "perf_counter"
    runner: ClassVar[str | None] = None  # a child routine with no reference process (None: compare with it)
    candidate_hook: ClassVar[str | None] = None  # "module:factory" wrapped around the candidate's run
    build_namespace: ClassVar[str | None] = None  # cache subfolder of per-candidate build folders

    def launch(self) -> Launch:
        return Launch()

    def launch_for(self, task: Task) -> Launch:
        """This backend's launch, with the task's import roots readable in the
        sandbox. Such a sandbox serves its one evaluation only (not warm): a
        pool kept per import-root set would grow by two torch workers with
        every task of a suite that carries its own helpers."""
        launch = self.launch()
        if not task.import_roots:
            return launch
        return dataclasses.replace(launch, readable=task.import_roots, warm=False)

    def child_env(self, task: Task, source: str) -> dict[str, str]:
        return {}

    def build_vars(self) -> dict[str, str]:
        """Environment variables pointing into the candidate's build folder
        (variable -> subfolder, "" for the folder itself)."""
        return {}

    def timing_options(self) -> TimingOptions | None:
        c = self.config
        # Times that say nothing of a device get a short wall of their own:
        # running past it never turns a correct kernel into a timeout.
        wall = None if self.timing_representative else c.unrepresentative_timing_s
        return TimingOptions(
            timer=self.timer,
            warmup=c.timing_warmup,
            min_reps=c.timing_min_reps,
            max_reps=c.timing_max_reps,
            budget_s=c.timing_budget_s,
            precision=c.timing_precision,
            wall_s=wall,
        )

    def profile_options(self) -> ProfileOptions | None:
        """Profile where the time goes after timing, where timing means something."""
        c = self.config
        if not c.profile or not self.timing_representative:
            return None
        return ProfileOptions(budget_s=c.profile_budget_s, max_calls=c.profile_max_calls)

    def calibration(self, *, force: bool = False) -> MachineLimits:
        """This host's measured limits for this backend: cached, or measured (and cached) now."""
        return host_limits.measured(self, force=force)

    def judging(self, outcome: Outcome | None, report: "_ProgressRelay") -> dict[str, Any]:
        """What `results.from_outcome` needs to judge a profile: the limits, measured first if need be."""
        c = self.config
        if outcome is None or outcome.report is None or outcome.report.profile is None:
            return {}
        found, note = host_limits.cached(self), ""
        if found is None:
            report(report.total - 0.5, "measuring this host's limits (once per host and backend)")
            try:
                found = self.calibration()
            except BackendUnavailable as exc:
                note = str(exc)
        return {
            "limits": found,
            "limits_note": note,
            "rules": roofline.Rules(bandwidth_slack=c.profile_bandwidth_slack, flops_slack=c.profile_flops_slack),
        }

    def hardware(self) -> str:
        return machine.cpu_hardware()

    def base_fields(self, task: Task, source: str, stamp: Stamp = Stamp(), started: float | None = None) -> dict[str, Any]:
        """The fields every result of this evaluation has, whatever became of it."""
        return {
            "task": task.id,
            "backend": self.name,
            "hardware": self.hardware(),
            "candidate_hash": machine.candidate_hash(source),
            "versions": dict(machine.host_versions()),
            "confinement": stamp.confinement,
            "host": stamp.host,
            "duration_s": round(time.monotonic() - started, 4) if started is not None else 0.0,
        }

    def static_check(self, task: Task, source: str, stamp: Stamp = Stamp(), started: float | None = None) -> EvalResult | None:
        """Syntax and anti-cheat checks before anything runs."""
        base = self.base_fields(task, source, stamp, started)
        ref_names = [task.id, task.reference_path.stem if task.reference_path else ""]
        if task.reference_path is not None and task.reference_path.name == "reference.py":
            ref_names.append(task.reference_path.parent.name)
        try:
            findings = static_checks.check_source(source, forbid=task.forbid, reference_names=ref_names)
        except SyntaxError as exc:
            diag = Diagnostic(category="syntax", message=f"SyntaxError: {exc.msg}", line=exc.lineno, column=exc.offset)
            return EvalResult(
                **base,
                status="compile_error",
                message=f"line {exc.lineno}: SyntaxError: {exc.msg}",
                diagnostics=[diag, *stamp.notes],
                timing_representative=self.timing_representative,
            )
        if not findings:
            return None
        diags = [Diagnostic(category="cheat", message=f"[{f.rule}] {f.message}", line=f.line, column=f.column) for f in findings]
        first = findings[0]
        return EvalResult(
            **base,
            status="rejected",
            message=f"line {first.line}: {first.message}",
            diagnostics=[*diags, *stamp.notes],
            timing_representative=self.timing_representative,
        )

    def build_request(self, task: Task, source: str, trials: int) -> Request:
        """The whole request, complete and frozen: nothing downstream changes it."""
        c = self.config
        spec = task.spec()
        if c.shape_variants:
            spec = dataclasses.replace(spec, variants=variants_for(task, c.edge_scale))
        build = self.build_spec(source)
        env = dict(self.child_env(task, source))
        if build is not None:
            for var, sub in build.vars.items():
                env[var] = os.path.join(build.inside, sub) if sub else build.inside
        timing_options = self.timing_options()
        return Request(
            token=secrets.token_hex(16),
            task=spec,
            timeout_s=c.eval_timeout_s,
            limits=self.limits(),
            candidate_source=source,
            trials=trials,
            tolerance_mode=c.tolerance_mode,
            threads=c.eval_threads,
            device=self.device,
            timing=timing_options,
            env=env,
            runner=self.runner,
            candidate_hook=self.candidate_hook,
            candidate_hook_args=self.candidate_hook_args(),
            build=build,
            profile=self.profile_options(),
            progress_total=2 + len(spec.cases) + len(spec.variants) + (1 if timing_options else 0),
            seed=c.eval_seed if c.eval_seed is not None else secrets.randbits(31),
            verdict=VerdictOptions(
                small_output_factor=c.small_output_factor,
                stale_checks=c.stale_checks,
                stale_changes=c.stale_changes,
                churn_swaps=c.churn_swaps,
                spot_checks=c.spot_checks,
                fresh_samples=c.fresh_samples,
                fresh_bound=c.fresh_bound,
            ),
        )

    def candidate_hook_args(self) -> dict[str, Any]:
        """Settings of `candidate_hook` in the child (a backend's own checks)."""
        return {}

    def limits(self) -> Limits:
        """The process limits of every evaluation child, sized on the host that evaluates."""
        c = self.config
        return Limits(memory_mb=machine.eval_memory_mb(c.eval_memory_mb), cpu_s=c.eval_cpu_s, max_tasks=MAX_TASKS)

    def build_spec(self, source: str) -> BuildSpec | None:
        """The candidate's own build folder: one per source hash and
        toolchain, so an unchanged candidate reuses its build, an upgraded
        torch rebuilds it, and no candidate can write another's (the pool
        gives the sandbox a private copy)."""
        if self.build_namespace is None or not self.build_vars():
            return None
        own = f"{machine.build_tag()}/{machine.candidate_hash(source)}"
        # The real path: the sandbox binds each cache folder where it really
        # lies, so a cache behind a symlink (a linked ~/.cache) is named that way.
        cache = Path(os.path.realpath(self.config.cache_dir / self.build_namespace)) / own
        key = f"{self.build_namespace}/{own}"
        # Confined, the sandbox sees a private copy of the folder at its mount;
        # limits only, there is no copy to make: the cache's own folder.
        inside = os.path.join(confine.BUILD_MOUNT, key) if self.pool.sandboxing.confinement.confined else str(cache)
        return BuildSpec(key=key, cache=str(cache), vars=self.build_vars(), inside=inside)

    def run_sandbox(
        self,
        task: Task,
        source: str,
        trials: int,
        report: "_ProgressRelay",
        cancel: threading.Event | None = None,
        stamp: Stamp = Stamp(),
        started: float | None = None,
    ) -> tuple[EvalResult, Any]:
        """Static checks, then the candidate in the sandbox. Returns the
        result and the worker's raw outcome (None when the static checks
        decided), so a backend can add what its children reported."""
        started = time.monotonic() if started is None else started
        report(0, "running static checks")
        early = self.static_check(task, source, stamp, started)
        if early is not None:
            return early, None
        request = self.build_request(task, source, trials)
        report.total = float(request.progress_total)
        outcome = self.pool.run(request, self.launch_for(task), report.on_event, cancel)
        judging = self.judging(outcome, report)
        result = results.from_outcome(
            outcome,
            base={**self.base_fields(task, source, stamp, started), "seed": request.seed},
            notes=stamp.notes,
            timeout_s=self.config.eval_timeout_s,
            max_tasks=MAX_TASKS,
            timing_representative=self.timing_representative,
            suspicious_speedup=self.config.suspicious_speedup,
            last_progress=report.last_message,
            **judging,
        )
        return result, outcome

    def ncu_metrics(self, task: Task, source: str, result: EvalResult) -> EvalResult:
        """Nsight Compute metrics in the profile: read on the cuda backend only (`device.py`)."""
        if result.profile is None:
            return result
        profile = result.profile.model_copy(deep=True)
        profile.notes.append(f"ncu metrics were asked for, but they are read on the cuda backend only, not {self.name}")
        return result.model_copy(update={"profile": profile})

    def evaluate(
        self,
        task: Task,
        source: str,
        *,
        trials: int,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
        stamp: Stamp = Stamp(),
    ) -> EvalResult:
        report = _ProgressRelay(progress)
        result, _ = self.run_sandbox(task, source, trials, report, cancel, stamp)
        if result.profile is not None and self.config.profile_ncu and not (cancel is not None and cancel.is_set()):
            report(report.total - 0.5, "reading Nsight Compute metrics")
            result = self.ncu_metrics(task, source, result)
        report.finish(result.status)
        return result


class _ProgressRelay:
    """Forwards the child's progress events to the caller's callback; a
    failing callback (a client that went away) must not fail the evaluation."""

    def __init__(self, callback: ProgressCallback | None, total: float = 1.0):
        self.callback, self.total, self.last_message = callback, total, ""
        self.broken = False

    def __call__(self, done: float, message: str) -> None:
        self.last_message = message
        if self.callback is None or self.broken:
            return
        try:
            self.callback(float(done), float(self.total), message)
        except Exception:  # noqa: BLE001 - the callback belongs to the caller
            log.warning("progress callback failed; no more progress for this evaluation", exc_info=True)
            self.broken = True

    def on_event(self, event: Event) -> None:
        if isinstance(event, ProgressEvent):
            if event.total:
                self.total = float(event.total)
            self(float(event.progress), event.message)

    def finish(self, status: str) -> None:
        self(self.total, f"done: {status}")


class CpuBackend(SandboxBackend):
    name = "cpu"
    timing_representative = True
    # One build folder per candidate source: an unchanged candidate reuses its
    # compiled extension, and two candidates that pick the same extension
    # name never build over each other.
    build_namespace = "torch_extensions"

    def build_vars(self) -> dict[str, str]:
        return {"TORCH_EXTENSIONS_DIR": ""}

    def child_env(self, task: Task, source: str) -> dict[str, str]:
        return {"MAX_JOBS": str(max(1, self.config.eval_threads))}

    def status(self) -> BackendStatus:
        compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
        reason = "PyTorch candidates run here"
        reason += "; C++ candidates build with " + compiler if compiler else "; no C++ compiler found"
        return BackendStatus(
            name=self.name,
            ready=True,
            hardware=self.hardware(),
            reason=reason,
            setup="" if compiler else "install g++ (and ninja) for C++ load_inline candidates",
            timing_representative=True,
        )


class UnavailableBackend(Backend):
    """Stands in for a backend whose module is not installed."""

    def __init__(self, config: Config, name: str, reason: str, setup: str):
        super().__init__(config)
        self.name, self.reason, self.setup = name, reason, setup

    def status(self) -> BackendStatus:
        return BackendStatus(name=self.name, ready=False, reason=self.reason, setup=self.setup, timing_representative=False)

    def evaluate(
        self,
        task: Task,
        source: str,
        *,
        trials: int,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
        stamp: Stamp = Stamp(),
    ) -> EvalResult:
        raise BackendUnavailable(f"backend {self.name!r} is unavailable: {self.reason}. {self.setup}")


def get_backend(name: str, config: Config, pool: WorkerPool | None = None) -> Backend:
    if name not in REGISTRY:
        raise InvalidInput(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    module_name, class_name = REGISTRY[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        return UnavailableBackend(config, name, f"{module_name} is not part of this installation", SETUP_HINTS.get(name, ""))
    cls = getattr(module, class_name)
    return cls(config, pool)


def list_backends(config: Config) -> list[BackendStatus]:
    out = []
    confinement = confinement_for(config)
    for name in REGISTRY:
        backend = get_backend(name, config)
        try:
            out.append(with_confinement(backend.status(), confinement))
        finally:
            backend.close()
    return out


def with_confinement(status: BackendStatus, confinement: confine.Confinement) -> BackendStatus:
    """A backend's status with how its candidates are contained; under
    `required` without bubblewrap the backend is not ready."""
    update: dict[str, Any] = {"confinement": confinement.describe()}
    if confinement.required and not confinement.confined:
        update.update(ready=False, reason=f"sandbox_confinement is 'required' but {confinement.detail}", setup=confinement.fix)
    return status.model_copy(update=update)
