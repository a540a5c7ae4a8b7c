"""What the `npu` and `cuda` backends share: a device probe, device-event
timing with a cache flush, and results that name the device.

Workers are warm but single-use: one is started ahead, with torch and the
backend's libraries imported, and serves one evaluation; only its forked
children start the device (forking a process that has started a GPU or NPU
runtime is not safe). The sandbox binds the backend's device nodes. The
probe runs once per backend instance as an evaluation does (same sandbox,
device nodes and limits), so `status()` reports what an evaluation would find.
"""

from __future__ import annotations

import secrets
import sys
import threading
from typing import Any, ClassVar

from sage_engine.errors import BackendUnavailable
from sage_engine.evaluation.backends.base import Progress, SandboxBackend
from sage_engine.evaluation.host.launch import Launch
from sage_engine.evaluation.protocol import Request, TaskSpec
from sage_engine.evaluation.tasks import Task
from sage_engine.models import BackendStatus, EvalResult

CHILD = "sage_engine.evaluation.child.device"
PROBE_TIMEOUT_S = 120.0  # importing torch_npu initialises CANN; slow on a cold host
# The probe runs no task: its request carries an empty one.
PROBE_TASK = TaskSpec(id="device-probe", reference_source="", reference_path=None, cases=[{}], tolerance={},
                      forbid=[], seed=0, import_roots=[])


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
            request = Request(token=secrets.token_hex(16), task=PROBE_TASK, timeout_s=PROBE_TIMEOUT_S,
                              limits=self.limits(), runner=f"{CHILD}:probe", device=self.device,
                              preload=list(self.preload), threads=self.config.eval_threads)
            outcome = self.pool.run(request, self.launch(), lambda _event: None)
            found = outcome.runner_result or {}
            if "available" in found:
                self._probe_cache = found
            else:
                why = (outcome.report.message if outcome.report else "") or (
                    f"killed ({outcome.killed})" if outcome.killed else f"ended with exit code {outcome.exit_code}")
                said = (outcome.output_tail.strip().splitlines() or [""])[-1]
                self._probe_cache = {"available": False,
                                     "error": f"device probe failed: {why}" + (f" ({said})" if said else "")}
        return self._probe_cache

    def status(self) -> BackendStatus:
        why = self.missing()
        if why is None:
            probe = self.probe()
            if not probe.get("available"):
                why = probe.get("error") or f"torch.{self.module}.is_available() is False"
        if why is not None:
            return BackendStatus(name=self.name, ready=False, hardware=None, reason=why, setup=self.setup_hint,
                                 timing_representative=True)
        name = self.probe().get("name")
        return BackendStatus(name=self.name, ready=True, hardware=name, timing_representative=True,
                             reason=f"{name} via torch.{self.module}; device-event timing with a cache flush")

    def setup(self, log=None, *, force: bool = False) -> None:
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
        return (self._probe_cache or {}).get("name") or self.module

    def build_request(self, task: Task, source: str, trials: int) -> Request:
        request = super().build_request(task, source, trials)
        request.preload = list(self.preload)
        request.device_time = self.device_time
        return request

    def evaluate(self, task: Task, source: str, *, trials: int, progress: Progress | None = None,
                 cancel: threading.Event | None = None) -> EvalResult:
        status = self.status()
        if not status.ready:
            raise BackendUnavailable(f"backend {self.name!r} is unavailable: {status.reason}. {status.setup}")
        return super().evaluate(task, source, trials=trials, progress=progress, cancel=cancel)
