"""The `triton` backend: upstream Triton kernels under TRITON_INTERPRET=1 on CPU.

The interpreter runs each program instance as numpy code, so it checks
correctness; its times say nothing about a GPU or NPU. Timing is still
measured (it shows a runaway kernel) but marked unrepresentative, and no
speedup is reported. The candidate's run is wrapped in the interpreter
checks (`child/fidelity/run.py`: bf16 as the device computes it, bounds,
every autotune config), and every verdict names the Triton it ran on beside
the one the team's hosts run (`Config.triton_version`).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
from typing import Any

import threading

from sage_engine.evaluation.backends.base import SandboxBackend, Stamp, _ProgressRelay
from sage_engine.evaluation.host import results
from sage_engine.evaluation.host.launch import Launch
from sage_engine.evaluation.protocol import Outcome, TimingOptions
from sage_engine.evaluation.host.tasks import Task
from sage_engine.models import BackendStatus, EvalResult, InterpreterVersions, ProgressCallback


def installed_triton() -> str | None:
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return None


class TritonInterpreterBackend(SandboxBackend):
    name = "triton"
    timing_representative = False
    candidate_hook = "sage_engine.evaluation.child.fidelity.run:TritonRun"

    def version_note(self) -> str:
        """Which Triton a verdict speaks for: the one installed here, and the hosts' when it differs."""
        installed, wanted = installed_triton(), self.config.triton_version
        if installed is None or installed == wanted:
            return f"Triton {installed or wanted}, the version the team's hosts run (SAGE_TRITON_VERSION)"
        return (
            f"Triton {installed} as installed here, while the team's hosts run {wanted} "
            f"(SAGE_TRITON_VERSION; pip install triton=={wanted} to check against it)"
        )

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
        result, outcome = self.run_sandbox(task, source, trials, report, cancel, stamp)
        versions = InterpreterVersions(triton=installed_triton(), hosts=self.config.triton_version, note=self.version_note())
        result = with_hook_fields(result, outcome, versions)
        report.finish(result.status)
        return result

    def candidate_hook_args(self) -> dict[str, Any]:
        c = self.config
        return {"autotune_configs": c.autotune_configs, "bounds": c.interpreter_bounds, "version_note": self.version_note()}

    def launch(self) -> Launch:
        # Its own warm worker: triton decorates its standard library
        # (tl.sum, tl.max, ...) at import, interpreted only if
        # TRITON_INTERPRET is set by then.
        return Launch(env=(("TRITON_INTERPRET", "1"),), preload=("triton",))

    build_namespace = "triton"  # Triton's cache, per candidate: no candidate can plant a kernel for another

    def build_vars(self) -> dict[str, str]:
        return {"TRITON_CACHE_DIR": ""}

    def child_env(self, task: Task, source: str) -> dict[str, str]:
        return {"TRITON_INTERPRET": "1"}

    def timing_options(self) -> TimingOptions | None:
        # The interpreter is ~1 ms per program instance: a few reps are plenty
        # for a number nobody should compare.
        options = super().timing_options()
        if options is None:
            return None
        return dataclasses.replace(options, warmup=1, min_reps=3, max_reps=20, budget_s=min(self.config.timing_budget_s, 0.5))

    def status(self) -> BackendStatus:
        ready = importlib.util.find_spec("triton") is not None
        return BackendStatus(
            name=self.name,
            ready=ready,
            hardware=self.hardware(),
            reason=f"upstream Triton in interpreter mode (TRITON_INTERPRET=1): correctness only; {self.version_note()}"
            if ready
            else "triton is not installed",
            setup="" if ready else "pip install 'sage-npu[triton]' (upstream triton; not triton-ascend)",
            timing_representative=False,
        )


def with_hook_fields(result: EvalResult, outcome: Outcome | None, interpreter: InterpreterVersions) -> EvalResult:
    """`result` with the Triton that ran and what the interpreter checks
    reported (the autotune configs checked) in compile_info."""
    hook = outcome.report.hook if outcome is not None and outcome.report is not None else None
    update: dict[str, Any] = {}
    info = result.compile_info.model_copy(deep=True)
    info.interpreter = interpreter
    if hook is not None and hook.autotune:
        info.autotune = results.autotune_checked(hook.autotune)
        trials, failed = hook.autotune_trials, len(result.cases) - 1
        last = trials[failed] if 0 <= failed < len(trials) else {}
        if result.status == "incorrect" and last and "gives different results" not in result.message:
            # Each trial ran one config: the one that failed is the kernel to fix.
            ran = "; ".join(f"{kernel} ran config [{config}]" for kernel, config in last.items())
            update["message"] = f"{result.message} (autotuned: in that trial {ran})"
    update["compile_info"] = info
    return result.model_copy(update=update)
