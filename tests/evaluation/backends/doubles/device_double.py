"""TEST DOUBLE: makes a device type (`npu`, `cuda`) run on the CPU.

Used only by the backend tests on machines without that device, so the real
backend code path (probe, sandbox child, device runner, event timer, cache
flush, device name) runs end to end. Tensors and modules moved to the device
stay on the CPU; `torch.<device>` gets `is_available`, `device_count`,
`get_device_name`, `synchronize` and an `Event` backed by perf_counter.
Nothing here measures a device.
"""

from __future__ import annotations

import time
import types

import torch

DOUBLE_NAME_SUFFIX = " (test double on CPU)"


class PerfCounterEvent:
    def __init__(self, enable_timing: bool = False, **_kwargs):
        self.t: float | None = None

    def record(self, stream=None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "PerfCounterEvent") -> float:
        return (end.t - self.t) * 1000.0  # milliseconds, as torch.cuda.Event


def _is_device(value, device_type: str) -> bool:
    if isinstance(value, torch.device):
        return value.type == device_type
    return isinstance(value, str) and value.split(":")[0] == device_type


def install(device_type: str, device_name: str) -> types.ModuleType:
    """Patch torch so `device_type` maps to the CPU; returns torch.<device_type>."""
    mod = getattr(torch, device_type, None)
    if mod is None:
        mod = types.ModuleType(f"torch.{device_type}")
        torch._register_device_module(device_type, mod)
    mod.is_available = lambda: True
    mod.device_count = lambda: 1
    mod.current_device = lambda: 0
    mod.set_device = lambda _device: None
    mod.get_device_name = lambda _device=0: device_name + DOUBLE_NAME_SUFFIX
    mod.synchronize = lambda _device=None: None
    mod.Event = PerfCounterEvent
    # torch.manual_seed seeds every registered device module through these.
    mod._is_in_bad_fork = lambda: False
    mod.manual_seed_all = lambda _seed: None

    original_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        args = tuple("cpu" if _is_device(a, device_type) else a for a in args)
        if _is_device(kwargs.get("device"), device_type):
            kwargs["device"] = "cpu"
        return original_to(self, *args, **kwargs)

    torch.Tensor.to = to
    return mod
