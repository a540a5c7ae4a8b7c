"""What the profile of one evaluation carries from the children to the host:
each side's kernels (the `profile-kernels` command's reply) and the work of
one call (the reference's reply only). The host judges them
(`host/roofline.py`); nothing here is a judgement."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sage_engine.evaluation.protocol.request import build

# What a reply may carry: a candidate writes its own reply line, so every
# count and name is bounded before the worker believes it.
MAX_KERNELS = 12  # per side: the costliest; the rest are summed into `launches` and `kernel_us`
MAX_NAME_CHARS = 200  # C++ template kernels have names of thousands of characters


@dataclass
class KernelTime:
    """One kernel (a device kernel, or a torch op on the CPU) per profiled call:
    launches per call, and device time per call (the op's self CPU time on the
    cpu backend). The child measures it and `EvalResult.profile` embeds it."""

    name: str
    launches: float
    time_us: float


@dataclass
class SideKernels:
    """One side's profiled calls, per call, unjudged: the costliest kernels, every
    kernel's launches and time summed, and the host clock around the calls
    with the profiler and without it."""

    source: str  # "cpu-ops", "cuda-kernels", "npu-ops"
    calls: int = 0
    kernels: list[KernelTime] = field(default_factory=list)
    launches: float = 0.0
    kernel_us: float = 0.0
    wall_us: float = 0.0
    bare_us: float = 0.0  # the host clock per call of the same calls without the profiler (0: not measured)
    overhead_us: float = 0.0  # what recording the call's ops cost, already out of the kernel times
    note: str = ""  # what the profiler could not see


@dataclass
class Work:
    """What one call of the reference must do: the bytes of its distinct
    input and output tensors (a lower bound on what moves) and the FLOPs of
    its matrix products and convolutions per dtype (empty: none counted)."""

    bytes: int = 0
    flops: dict[str, float] = field(default_factory=dict)
    note: str = ""


@dataclass
class ProfileReport:
    """The profile phase's account: a side that could not be profiled has
    None and its reason in `errors`."""

    reference: SideKernels | None = None
    candidate: SideKernels | None = None
    work: Work | None = None
    errors: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any) -> "ProfileReport":
        return build(cls, data, reference=side_profile, candidate=side_profile, work=work)


def side_profile(data: Any) -> SideKernels:
    """A side's reply, bounded: names cut, counts made finite and non-negative."""
    side = build(SideKernels, data)
    kernels = [build(KernelTime, k) for k in (side.kernels if isinstance(side.kernels, list) else [])][:MAX_KERNELS]
    return SideKernels(
        source=str(side.source)[:40],
        calls=max(0, int(side.calls)),
        kernels=[KernelTime(str(k.name)[:MAX_NAME_CHARS], _amount(k.launches), _amount(k.time_us)) for k in kernels],
        launches=_amount(side.launches),
        kernel_us=_amount(side.kernel_us),
        wall_us=_amount(side.wall_us),
        bare_us=_amount(side.bare_us),
        overhead_us=_amount(side.overhead_us),
        note=str(side.note)[:MAX_NAME_CHARS],
    )


def work(data: Any) -> Work:
    found = build(Work, data)
    flops = found.flops if isinstance(found.flops, dict) else {}
    return Work(
        bytes=max(0, int(found.bytes)), flops={str(k)[:20]: _amount(v) for k, v in flops.items()}, note=str(found.note)[:MAX_NAME_CHARS]
    )


def _amount(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) and number > 0 else 0.0
