"""The device backends, `npu` and `cuda`, and what they share: a device
probe, device-event timing with a cache flush, and results that name the
device.

Workers are warm but single-use: one is started ahead, with torch and the
backend's libraries imported and the device untouched, and serves one
evaluation; only its forked children start the device (forking a process
that has started a GPU or NPU runtime is not safe). The sandbox binds the
backend's device nodes. The probe runs once per backend instance as an
evaluation does (same sandbox, device nodes and limits), so `status()`
reports what an evaluation would find.

`npu`: reference and candidate on a real Ascend NPU via torch_npu. What a
host needs (SAGE installs none of it, and never puts torch_npu into a CPU
environment, where it breaks `import torch`): CANN, with its `set_env.sh`
sourced in the shell that starts SAGE (ASCEND_HOME_PATH or
ASCEND_TOOLKIT_HOME set; the evaluation child inherits the environment,
library paths included); torch_npu matching SAGE's torch; triton-ascend for
Triton-Ascend candidates. Candidates: PyTorch, Triton-Ascend kernels, and
Ascend C kernels the candidate module builds and loads itself; each gets its
own TORCH_EXTENSIONS_DIR. Timing: NPU events around each call, a 192 MB
buffer zeroed before every call; `device_time` adds the torch_npu profiler's
device-only time.

`cuda`: PyTorch and (upstream) Triton candidates on an NVIDIA GPU: a CUDA
build of torch and a visible GPU. Timing: CUDA events around each call, a
256 MB buffer zeroed before every call (the KernelBench and
`triton.testing.do_bench` recipe). With `Config.profile_ncu` and `ncu` on
PATH, a second sandboxed run (`child/ncu.py`) reads Nsight Compute metrics
per candidate kernel into the profile.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import secrets
import shutil
import sys
from typing import Any, Callable, ClassVar, Mapping

from sage_engine.config import Config
from sage_engine.errors import BackendUnavailable
from sage_engine.evaluation.backends.base import SandboxBackend
from sage_engine.evaluation.host.calibration import runner_failure
from sage_engine.evaluation.host.launch import Launch
from sage_engine.evaluation.host.pool import WorkerPool
from sage_engine.evaluation.host.tasks import Task
from sage_engine.evaluation.protocol import Request, TaskSpec
from sage_engine.models import BackendStatus, EvalResult

CHILD = "sage_engine.evaluation.child.device"
PROBE_TIMEOUT_S = 120.0  # importing torch_npu initialises CANN; slow on a cold host
# The probe runs no task: its request carries an empty one.
PROBE_TASK = TaskSpec(
    id="device-probe", reference_source="", reference_path=None, cases=[{}], tolerance={}, forbid=[], seed=0, import_roots=[]
)


class DeviceBackend(SandboxBackend):
    timing_representative = True
    module: ClassVar[str]  # torch.<module>: "npu" or "cuda"
    preload: ClassVar[tuple[str, ...]] = ()  # imported by each child after the fork
    devices: ClassVar[tuple[str, ...]] = ()
    setup_hint: ClassVar[str] = ""
    device_time: ClassVar[bool] = False  # ask the child for profiler device-only time

    _probe_cache: dict[str, Any] | None = None

    # ---------------------------------------------------------------- checks

    def missing(self) -> str | None:
        """Why this host cannot run the backend, before any probe; None if nothing is missing."""
        return None

    def probe(self) -> dict[str, Any]:
        """Device availability and name as an evaluation sees them (cached):
        the probe runs as an evaluation's candidate process does, in the same
        sandbox with the same device nodes and under the same limits, so
        `ready` means an evaluation can start the device."""
        if self._probe_cache is None:
            request = Request(
                token=secrets.token_hex(16),
                task=PROBE_TASK,
                timeout_s=PROBE_TIMEOUT_S,
                limits=self.limits(),
                runner=f"{CHILD}:probe",
                device=self.device,
                preload=list(self.preload),
                threads=self.config.eval_threads,
            )
            outcome = self.pool.run(request, self.launch(), lambda _event: None)
            found = outcome.runner_result or {}
            if "available" in found:
                self._probe_cache = found
            else:
                why = (outcome.report.message if outcome.report else "") or (
                    f"killed ({outcome.killed})" if outcome.killed else f"ended with exit code {outcome.exit_code}"
                )
                said = (outcome.output_tail.strip().splitlines() or [""])[-1]
                self._probe_cache = {"available": False, "error": f"device probe failed: {why}" + (f" ({said})" if said else "")}
        return self._probe_cache

    def status(self) -> BackendStatus:
        why = self.missing()
        if why is None:
            probe = self.probe()
            if not probe.get("available"):
                why = probe.get("error") or f"torch.{self.module}.is_available() is False"
        if why is not None:
            return BackendStatus(name=self.name, ready=False, hardware=None, reason=why, setup=self.setup_hint, timing_representative=True)
        name = self.probe().get("name")
        return BackendStatus(
            name=self.name,
            ready=True,
            hardware=name,
            timing_representative=True,
            reason=f"{name} via torch.{self.module}; device-event timing with a cache flush",
        )

    def setup(self, log: Callable[[str], None] | None = None, *, force: bool = False) -> None:
        """Nothing SAGE can install for a device: succeed when ready, else say what the host needs."""
        status = self.status()
        if not status.ready:
            raise BackendUnavailable(f"backend {self.name!r}: {status.reason}. {status.setup}")

    # ------------------------------------------------------------ sandboxing

    def launch(self) -> Launch:
        # Warm but single-use: a worker with torch and the backend's libraries
        # imported is ready before an evaluation asks; it has never touched the
        # device (its children start it), and serves one evaluation only.
        return Launch(python=sys.executable, preload=self.preload, single_use=True, devices=self.devices)

    def hardware(self) -> str:
        """The device's name as the probe found it (probed now if it has not been)."""
        if self._probe_cache is None and self.missing() is None:
            self.probe()
        return (self._probe_cache or {}).get("name") or self.module

    def build_request(self, task: Task, source: str, trials: int) -> Request:
        request = super().build_request(task, source, trials)
        return dataclasses.replace(request, preload=list(self.preload), device_time=self.device_time)


CANN_VARIABLES = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
NPU_SETUP_HINT = (
    "on an Ascend host: install CANN and `source <ascend-toolkit>/set_env.sh` before starting SAGE, then "
    "install the torch_npu release that matches this torch into SAGE's environment (never on a machine "
    "without CANN). For a machine without an NPU use the ascend-compile backend."
)


def cann_home(environ: Mapping[str, str]) -> str | None:
    """CANN's install dir as its set_env.sh exports it."""
    for name in CANN_VARIABLES:
        if environ.get(name):
            return environ[name]
    return None


class NpuBackend(DeviceBackend):
    name = "npu"
    device = "npu"
    module = "npu"
    timer = f"{CHILD}:npu_timer"
    preload = ("torch_npu",)
    setup_hint = NPU_SETUP_HINT
    device_time = True
    # The Ascend driver's nodes, as Ascend's container runtime passes them through.
    devices = ("/dev/davinci*", "/dev/hisi_hdc*", "/dev/devmm_svm*")
    build_namespace = "npu_extensions"  # Ascend C candidates build torch extensions: one folder per source

    def __init__(self, config: Config, pool: WorkerPool | None = None, *, environ: Mapping[str, str] | None = None):
        super().__init__(config, pool)
        # CANN is configured by its own set_env.sh in the process environment,
        # which the evaluation child inherits; it is not SAGE configuration.
        self.environ = os.environ if environ is None else environ

    def missing(self) -> str | None:
        if cann_home(self.environ) is None:
            return "CANN is not set up in this environment (neither ASCEND_HOME_PATH nor ASCEND_TOOLKIT_HOME is set)"
        if importlib.util.find_spec("torch_npu") is None:
            return "torch_npu is not installed in SAGE's environment"
        return None

    def build_vars(self) -> dict[str, str]:
        return {"TORCH_EXTENSIONS_DIR": ""}


NCU_RUNNER = "sage_engine.evaluation.child.ncu:run"
CUDA_SETUP_HINT = (
    "needs an NVIDIA GPU and a CUDA build of torch in SAGE's environment "
    "(pip install torch==<version> from the CUDA index); triton for Triton candidates"
)


class CudaBackend(DeviceBackend):
    name = "cuda"
    device = "cuda"
    module = "cuda"
    timer = f"{CHILD}:cuda_timer"
    preload = ("triton",)
    setup_hint = CUDA_SETUP_HINT
    devices = ("/dev/nvidia*",)  # nvidia0.., nvidiactl, nvidia-uvm, nvidia-caps/
    # C++/CUDA load_inline candidates: one build folder per source, Triton's cache inside it.
    build_namespace = "cuda_extensions"

    def build_vars(self) -> dict[str, str]:
        return {"TORCH_EXTENSIONS_DIR": "", "TRITON_CACHE_DIR": "triton"}

    def ncu_metrics(self, task: Task, source: str, result: EvalResult) -> EvalResult:
        """`result` with `profile.ncu` filled, or a note saying why it is not."""
        if result.profile is None:
            return result
        profile = result.profile.model_copy(deep=True)
        ncu = shutil.which("ncu")
        if ncu is None:
            profile.notes.append(
                "ncu metrics were asked for, but ncu is not on PATH: install Nsight Compute and put the folder holding ncu on PATH"
            )
        else:
            request = self.build_request(task, source, 1)
            cases = request.task.cases
            timed = result.compile_info.timed_case
            request = dataclasses.replace(
                request,
                runner=NCU_RUNNER,
                timing=None,
                profile=None,
                candidate_hook=None,
                runner_args={"ncu": ncu, "case": cases.index(timed) if timed in cases else 0},
            )
            outcome = self.pool.run(request, self.launch_for(task), lambda _event: None)
            found = outcome.runner_result or {}
            if isinstance(found.get("kernels"), list):
                profile.ncu = found["kernels"]
            else:
                profile.notes.append(f"ncu failed: {found.get('error') or runner_failure(outcome)}")
        return result.model_copy(update={"profile": profile})
