"""The `ascend-compile` backend: the real Ascend front end on a machine with no NPU.

For a Triton-Ascend candidate it
1. runs the standard correctness check with the triton-ascend interpreter
   (TRITON_INTERPRET=1, CPU tensors) and records every `@triton.jit` launch:
   kernel, argument signature, constexprs, grid;
2. lowers each recorded launch for the chosen chip with `triton.compile`
   (Python -> TTIR -> linalg/HIVM) and runs `bishengir-compile`, whose memory
   planning reports real Unified Buffer and L0C overflows. Without CANN the
   last step stops at "Cannot find hivmc": that is the front end passing.

No NPU binary is made, so nothing is timed: a passing candidate is `correct`
with `timing_representative=False` and no speedup. Both steps run in the
sandbox child under the ascend-compile virtualenv's interpreter (`venv.py`);
the child-side code is `ascend_worker.py`.
"""

from __future__ import annotations

import dataclasses
import functools
import subprocess
import threading
from pathlib import Path
from typing import Any, Callable

from sage_engine.config import Config
from sage_engine.errors import BackendUnavailable, InvalidInput
from sage_engine.evaluation.host import results
from sage_engine.evaluation.backends import venv
from sage_engine.evaluation.backends.ascend_diagnostics import KernelVerdict, classify_kernel
from sage_engine.evaluation.backends.base import SandboxBackend, Stamp, _ProgressRelay
from sage_engine.evaluation.host.launch import Launch
from sage_engine.evaluation.protocol import MAX_TASKS, TimingOptions
from sage_engine.evaluation.host.tasks import Task
from sage_engine.models import BackendStatus, CompileInfo, Diagnostic, EvalResult, KernelLaunch, ProgressCallback

NAME = "ascend-compile"
WORKER = "sage_engine.evaluation.child.ascend"
# The flags triton-ascend itself passes for A2/A3 parts (910B) minus the
# CANN-only ones (NPUOptions' defaults: multibuffer and
# enable_auto_bind_sub_block on). Multi-buffering stays on: it is on by
# default on the device and doubles the UB a kernel needs. A launch's or an
# autotune config's own options (multibuffer=False) replace these per kernel.
BISHENGIR_FLAGS = (
    "--enable-auto-multi-buffer=True",
    "--enable-auto-bind-sub-block=True",
    "--enable-hfusion-compile=true",
    "--enable-hivm-compile=true",
    "--enable-triton-kernel-compile=true",
)
FRONT_END_NOTE = "front end passed; no NPU binary without CANN"
SETUP_COMMAND = f"sage backends setup {NAME}"


def bishengir_path(env: Path) -> Path:
    site = next((env / "lib").glob("python3*/site-packages"), env / "lib")
    return site / "ascendnpuir" / "bin" / "bishengir-compile"


# The 910B (A2) and 910_93 (A3) parts share the compile path triton-ascend
# uses here; the 950 family needs a different one (bishengir-compile-a5).
SUPPORTED_CHIP_PREFIXES = ("Ascend910B", "Ascend910_93")


@functools.lru_cache(maxsize=4)
def supported_chips(compiler: Path) -> tuple[str, ...]:
    """Targets this bishengir-compile knows, from its --help, limited to A2/A3 parts."""
    proc = subprocess.run([str(compiler), "--help"], capture_output=True, text=True, timeout=60)
    chips, inside = [], False
    for line in proc.stdout.splitlines():
        text = line.strip()
        if text.startswith("--target="):
            inside = True
        elif inside and text.startswith("="):
            chips.append(text[1:].split()[0])
        elif inside:
            break
    return tuple(c for c in chips if c.startswith(SUPPORTED_CHIP_PREFIXES))


def setup(config: Config, log: Callable[[str], None] | None = None, *, force: bool = False) -> Path:
    """Build the ascend-compile virtualenv (what `sage backends setup ascend-compile` runs)."""
    return venv.ensure_backend_env(NAME, config, log=log, force=force)


class AscendCompileBackend(SandboxBackend):
    name = NAME
    timing_representative = False
    candidate_hook = f"{WORKER}:InterpretedRun"

    # ------------------------------------------------------------------ status

    def env_path(self) -> Path:
        return venv.env_dir(NAME, self.config)

    def hardware(self) -> str:
        return self.config.chip

    def status(self) -> BackendStatus:
        ready, reason = self._ready()
        return BackendStatus(
            name=NAME,
            ready=ready,
            hardware=self.config.chip,
            reason=reason,
            setup=""
            if ready
            else f"run `{SETUP_COMMAND}` (builds a ~1.6 GB virtualenv under "
            f"{self.env_path().parent}; about a minute with a warm pip cache)",
            timing_representative=False,
        )

    _probed: str | None = None  # the env's import probe output, once it passed

    def _ready(self) -> tuple[bool, str]:
        if not venv.env_is_current(NAME, self.config):
            return False, f"the {NAME} virtualenv is not set up"
        if not bishengir_path(self.env_path()).exists():
            return False, f"bishengir-compile is missing from {self.env_path()}"
        if self._probed is None:
            # Imports are checked once per backend instance (a few seconds: torch).
            try:
                self._probed = venv.probe_env(NAME, self.config)
            except (BackendUnavailable, subprocess.TimeoutExpired) as exc:
                return False, str(exc)
        return True, (f"triton-ascend interpreter for correctness, bishengir-compile front end for {self.config.chip}; no timing (no NPU)")

    def setup(self, log: Callable[[str], None] | None = None, *, force: bool = False) -> Path:
        return setup(self.config, log, force=force)

    # ------------------------------------------------------------- sandboxing

    def launch(self, *, interpret: bool = True) -> Launch:
        # TRITON_INTERPRET must be set when the warm worker imports triton:
        # triton.language's own helpers (tl.sum, tl.max...) are @jit functions
        # and become interpreted ones only if it is set at import time. So the
        # interpreted run and the compile step get separate workers.
        env = (("TRITON_INTERPRET", "1"),) if interpret else ()
        return Launch(python=str(venv.env_python(self.env_path())), env=env, preload=("triton",))

    def child_env(self, task: Task, source: str) -> dict[str, str]:
        # Line info makes bishengir-compile point at candidate lines.
        return {"TRITON_INTERPRET": "1", "TRITON_DISABLE_LINE_INFO": "false"}

    def candidate_hook_args(self) -> dict[str, Any]:
        c = self.config
        return {"autotune_configs": c.autotune_configs, "bounds": c.interpreter_bounds, "version_note": "triton-ascend 3.2.0's interpreter"}

    def timing_options(self) -> TimingOptions | None:
        return None  # an interpreter on a CPU says nothing about an NPU

    def base_fields(self, task: Task, source: str, stamp: Stamp = Stamp(), started: float | None = None) -> dict[str, Any]:
        marker = venv.read_marker(self.env_path()) or {}
        # Keys as the child reports them (`triton_ascend`), so its versions merge over these.
        pins = dict(p.replace("-", "_").split("==", 1) for p in marker.get("packages", []) if "==" in p)
        return {**super().base_fields(task, source, stamp, started), "backend": NAME, "hardware": self.config.chip, "versions": pins}

    # -------------------------------------------------------------- evaluation

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
        chips = supported_chips(bishengir_path(self.env_path()))
        if self.config.chip not in chips:
            raise InvalidInput(
                f"chip {self.config.chip!r} is not a target of the Ascend compile gate; set SAGE_CHIP to one of {', '.join(chips)}"
            )
        report = _ProgressRelay(progress)
        first, outcome = self.run_sandbox(task, source, trials, report, cancel, stamp)
        if outcome is None:
            report.finish(first.status)
            return first
        hook = outcome.report.hook if outcome.report is not None else None
        launches = hook.launches if hook is not None else []
        info = CompileInfo(chip=self.config.chip, kernels=[_kernel_info(x) for x in launches])
        checked = hook.autotune if hook is not None else {}
        if checked:
            info.autotune = results.autotune_checked(checked)
        if first.status == "compile_error" and any(d.category == "grid_too_large" for d in first.diagnostics):
            result = self._failed(
                first,
                info,
                [
                    KernelVerdict(d.kernel or "kernel", False, d.category, d.message, d.line)
                    for d in first.diagnostics
                    if d.category == "grid_too_large"
                ],
                launches,
            )
        elif first.status in ("correct", "incorrect", "runtime_error") and launches:
            report(report.total - 0.5, f"lowering {len(launches)} kernel launch(es) for {self.config.chip}")
            verdicts = self._compile(task, source, trials, launches, cancel)
            if isinstance(verdicts, EvalResult):
                result = verdicts
            else:
                verdicts, skipped = skipped_configs(verdicts, launches, self.config.chip)
                if any(not v.passed for v in verdicts):
                    result = self._failed(first, info, verdicts, launches)
                else:
                    result = self._passed(first, info, verdicts, launches)
                if skipped:
                    result = result.model_copy(update={"diagnostics": result.diagnostics + skipped})
        elif first.status in ("correct", "incorrect"):
            info.front_end, info.note = "not_run", "the candidate launched no @triton.jit kernel; nothing was lowered"
            result = first.model_copy(
                update={
                    "compile_info": info,
                    "diagnostics": first.diagnostics
                    + [
                        Diagnostic(
                            severity="warning",
                            category="no_kernel",
                            message="no @triton.jit kernel was launched, so the Ascend front end checked nothing",
                        )
                    ],
                }
            )
        else:
            info.front_end = "not_run"
            # The interpreted run's own part (its checks) stays beside the gate's.
            merged = first.compile_info.model_copy(update={name: getattr(info, name) for name in info.model_fields_set})
            result = first.model_copy(update={"compile_info": merged})
        report.finish(result.status)
        return result

    def _compile(
        self, task: Task, source: str, trials: int, launches: list, cancel: threading.Event | None
    ) -> list[KernelVerdict] | EvalResult:
        request = dataclasses.replace(
            self.build_request(task, source, trials),
            runner=f"{WORKER}:run_compile",
            env={"TRITON_DISABLE_LINE_INFO": "false"},
            runner_args={
                "launches": launches,
                "chip": self.config.chip,
                "bishengir": str(bishengir_path(self.env_path())),
                "bishengir_flags": list(BISHENGIR_FLAGS),
            },
        )
        outcome = self.pool.run(request, self.launch(interpret=False), lambda _event: None, cancel)
        if outcome.runner_result is None or "kernels" not in outcome.runner_result:
            failed = results.from_outcome(
                outcome,
                base=self.base_fields(task, source),
                timeout_s=self.config.eval_timeout_s,
                max_tasks=MAX_TASKS,
                timing_representative=False,
                suspicious_speedup=self.config.suspicious_speedup,
                last_progress="lowering kernels for the Ascend front end",
            )
            return failed.model_copy(update={"compile_info": CompileInfo(chip=self.config.chip, front_end="crashed")})
        return [classify_kernel(k, "candidate.py") for k in outcome.runner_result["kernels"]]

    def _failed(self, first: EvalResult, info: CompileInfo, verdicts: list[KernelVerdict], launches: list[dict[str, Any]]) -> EvalResult:
        failed = [v for v in verdicts if not v.passed]
        top = failed[0]
        _mark_kernels(info, verdicts, launches)
        category = top.category or "other"
        info.front_end, info.category, info.tags = "failed", category, [category, self.config.chip]
        # One kernel specialised for fp32 and fp16 fails twice the same way:
        # one diagnostic per (kernel, category, line).
        diags, seen = [], set()
        for v in failed:
            if (v.kernel, v.category, v.line) not in seen:
                seen.add((v.kernel, v.category, v.line))
                diags.append(Diagnostic(line=v.line, category=v.category or "other", message=v.message, kernel=v.kernel))
        note = f" (the interpreted run was {first.status})" if first.status in ("incorrect", "runtime_error") else ""
        return first.model_copy(
            update={
                "status": "compile_error",
                "correct": False,
                "compile_info": info,
                "diagnostics": diags,
                "message": f"{category} in kernel {top.kernel} for {self.config.chip}: {top.message}{note}",
            }
        )

    def _passed(self, first: EvalResult, info: CompileInfo, verdicts: list[KernelVerdict], launches: list[dict[str, Any]]) -> EvalResult:
        _mark_kernels(info, verdicts, launches)
        info.front_end, info.note = "passed", FRONT_END_NOTE
        message = first.message
        if first.status == "correct":
            message = f"{first.message}; {FRONT_END_NOTE} ({self.config.chip})"
        return first.model_copy(update={"compile_info": info, "message": message})


def skipped_configs(verdicts: list[KernelVerdict], launches: list, chip: str) -> tuple[list[KernelVerdict], list[Diagnostic]]:
    """An autotuned kernel's config that fails to compile is one the device's
    autotuner skips (triton-ascend's benchmark catches the compile error), so
    it fails the candidate only when every config of that kernel fails. Such
    configs come back as passed verdicts marked skipped, with a warning each."""
    if len(verdicts) != len(launches):
        return verdicts, []
    passing = {la.get("autotune") for v, la in zip(verdicts, launches) if v.passed and la.get("autotune")}
    out, warnings = [], []
    for v, launch in zip(verdicts, launches):
        group = launch.get("autotune")
        if v.passed or not group or group not in passing:
            out.append(v)
            continue
        message = (
            f"autotune config [{launch.get('config', '')}] of {v.kernel}: {v.category} on {chip} "
            f"({v.message}); the device's autotuner skips a config that does not compile"
        )
        warnings.append(Diagnostic(severity="warning", category=v.category or "other", line=v.line, kernel=v.kernel, message=message))
        out.append(KernelVerdict(v.kernel, True, v.category, message, v.line, v.stage, {**v.details, "skipped_by_autotuner": True}))
    return out, warnings


def _kernel_info(launch: dict[str, Any]) -> KernelLaunch:
    return KernelLaunch.model_validate(
        {
            k: launch[k]
            for k in ("kernel", "grid", "signature", "constants", "specialization", "launches", "options", "config")
            if k in launch
        }
    )


def _mark_kernels(info: CompileInfo, verdicts: list[KernelVerdict], launches: list[dict[str, Any]]) -> None:
    """Per launch: the front end's verdict (one verdict per recorded launch, in
    order), with the front end's details (`required_bits`, ...) beside it."""
    if len(verdicts) != len(launches) or info.kernels is None:
        return
    info.kernels = [
        KernelLaunch.model_validate(
            {
                **entry.model_dump(),
                "front_end": "passed" if verdict.passed and not verdict.details.get("skipped_by_autotuner") else verdict.category,
                **verdict.details,
            }
        )
        for entry, verdict in zip(info.kernels, verdicts)
    ]
