"""TEST DOUBLE: makes a device type (`npu`, `cuda`) run on the CPU.

Used only by the backend tests on machines without that device, so the real
backend code path (probe, sandbox child, device runner, event timer, cache
flush, device name) runs end to end. Tensors and modules moved to the device
stay on the CPU; `torch.<device>` gets `is_available`, `device_count`,
`get_device_name`, `synchronize` and an `Event` backed by perf_counter;
factories given `device=` make CPU tensors.
Starting the "device" (the first `is_available()`) does what the CUDA
driver's start-up does to the host process: it reserves a terabyte of
address space (PROT_NONE, never touched) and takes some host memory for its
own state, so memory limits meet what they meet on a GPU host.
Nothing here measures a device.
"""

from __future__ import annotations

import contextlib
import mmap
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


MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)  # Linux's value; Python names it from 3.12
RESERVED_BYTES = 1 << 40  # cuInit reserves address space for unified addressing by the terabyte
DRIVER_STATE_BYTES = 64 << 20  # and keeps host memory of its own
_started: list = []


def start_device() -> bool:
    if not _started:
        reserved = mmap.mmap(-1, RESERVED_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE, prot=0)
        state = bytearray(DRIVER_STATE_BYTES)  # zero-filled: touched, counted as memory used
        _started.extend([reserved, state])
    return True


class NullStream:
    """A stream on the CPU: work runs at once, in order."""

    def __init__(self, *_args, **_kwargs):
        pass

    def synchronize(self) -> None:
        pass

    def wait_stream(self, _other) -> None:
        pass


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
    mod.is_available = start_device
    mod.device_count = lambda: 1
    mod.current_device = lambda: 0
    mod.set_device = lambda _device: None
    mod.get_device_name = lambda _device=0: device_name + DOUBLE_NAME_SUFFIX
    mod.synchronize = lambda _device=None: None
    mod.Event = PerfCounterEvent
    mod.Stream = NullStream
    mod.stream = lambda _stream=None: contextlib.nullcontext()
    mod.current_stream = lambda _device=None: NullStream()
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

    def on_cpu(factory):
        def make(*args, **kwargs):
            if _is_device(kwargs.get("device"), device_type):
                kwargs["device"] = "cpu"
            return factory(*args, **kwargs)

        return make

    for name in ("empty", "zeros", "ones", "randn", "rand", "full"):  # factories that take device=
        setattr(torch, name, on_cpu(getattr(torch, name)))
    return mod
