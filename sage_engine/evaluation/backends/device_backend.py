"""What the `npu` and `cuda` backends share: a device probe, device-event
timing with a cache flush, and results that name the device.

Workers are cold (one per evaluation) and import the device runtime only in
the forked children: forking a process that has touched a GPU or NPU runtime
is not safe. The sandbox binds the backend's device nodes (`devices`). The
probe runs once per backend instance as an evaluation does (same sandbox,
device nodes and limits), so `status()` reports what an evaluation would find.
"""

from __future__ import annotations

import secrets
import sys
import threading
from typing import Any, ClassVar

from sage_engine.errors import BackendUnavailable
from sage_engine.evaluation.backends.base import Progress, SandboxBackend, _ProgressRelay
from sage_engine.evaluation.pool import Launch
from sage_engine.evaluation.tasks import Task
from sage_engine.models import BackendStatus, EvalResult

CHILD = "sage_engine.evaluation.backends.device_child"
PROBE_TIMEOUT_S = 120.0  # importing torch_npu initialises CANN; slow on a cold host


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
            request = {"token": secrets.token_hex(16), "runner": f"{CHILD}:probe", "device": self.device,
                       "preload": list(self.preload), "threads": self.config.eval_threads, "env": {},
                       "timeout_s": PROBE_TIMEOUT_S, "limits": self.limits()}
            outcome = self.pool.run(request, self.launch(), lambda _event: None)
            found = outcome.result or {}
            if "available" in found:
                self._probe_cache = found
            else:
                why = found.get("message") or (f"killed ({outcome.killed})" if outcome.killed
                                               else f"ended with exit code {outcome.exit_code}")
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
        return Launch(python=sys.executable, warm=False, devices=self.devices)

    def hardware(self) -> str:
        return (self._probe_cache or {}).get("name") or self.module

    def build_request(self, task: Task, source: str, trials: int) -> dict[str, Any]:
        request = super().build_request(task, source, trials)
        request["preload"] = list(self.preload)
        request["device_time"] = self.device_time
        return request

    def evaluate(self, task: Task, source: str, *, trials: int, progress: Progress | None = None,
                 cancel: threading.Event | None = None) -> EvalResult:
        status = self.status()
        if not status.ready:
            raise BackendUnavailable(f"backend {self.name!r} is unavailable: {status.reason}. {status.setup}")
        report = _ProgressRelay(progress, total=3 + len(task.case_rows))
        result, outcome = self.run_sandbox(task, source, trials, report, cancel)
        if outcome is None:
            report.finish(result.status)
            return result
        report_ = outcome.result or {}
        update: dict[str, Any] = {}
        if report_.get("device_name"):
            update["hardware"] = report_["device_name"]
        device_time = (report_.get("timing") or {}).get("device_time_us")
        if device_time is not None:
            update["compile_info"] = {**result.compile_info, "device_time_us": device_time}
        result = result.model_copy(update=update) if update else result
        report.finish(result.status)
        return result
