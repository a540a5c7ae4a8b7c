"""Where an evaluation's time goes, and the machine limits it is measured against."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from sage_engine.evaluation.protocol.profile import KernelTime
from sage_engine.models.base import _Model

Bound = Literal["memory", "compute", "latency"]


class SideProfile(_Model):
    """One side's calls, judged: its costliest kernels (`KernelTime`, as the
    child measured them, defined once in the protocol) and how close its timed
    median came to the limits. The child's unjudged account is the protocol's
    `SideKernels`."""

    kernels: list[KernelTime] = Field(default_factory=list)
    launches: float = Field(0.0, description="Kernels launched per call, all of them")
    kernel_us: float = Field(0.0, description="Kernel time per call, all of them")
    wall_us: float = Field(0.0, description="Host clock per call while profiled (profiler overhead included)")
    bare_us: float | None = Field(None, description="Host clock per call of the same calls without the profiler, just before them")
    overhead_us: float | None = Field(
        None, description="What recording the call's ops cost the profiler, measured in the same process; already out of the kernel times"
    )
    agreement: float | None = Field(None, description="Kernel time per call over the timed median: within 0.9-1.1 the two agree")
    agreement_note: str = Field("", description="By how much and why the kernel times differ from the timed median, when by more than 10%")
    achieved_gbps: float | None = Field(None, description="The call's bytes over its timed median")
    achieved_flops: float | None = Field(None, description="The call's FLOPs over its timed median (FLOP/s)")
    bandwidth_share: float | None = Field(None, description="Achieved over measured bandwidth")
    compute_share: float | None = Field(None, description="FLOPs at measured matmul peak over the timed median")
    bound: Bound | None = None
    note: str = ""


class BandwidthPoint(_Model):
    bytes: int = Field(description="Working set: bytes one pass touches")
    copy_gbps: float
    read_gbps: float


class MachineLimits(_Model):
    """A backend's measured limits on one host: `sage backends calibrate`."""

    backend: str
    hardware: str
    threads: int
    torch: str
    bandwidth: list[BandwidthPoint]
    matmul_flops: dict[str, float] = Field(description="FLOP/s of a large square matmul per dtype")
    launch_us: float = Field(description="What one smallest op costs, launch to completion, back to back")
    measured_at: float
    seconds: float = Field(description="How long measuring took")
    cached: bool = Field(False, description="Read from the cache rather than measured now")
    path: str | None = Field(None, description="The cache file")
    notes: list[str] = Field(default_factory=list)

    def bandwidth_at(self, nbytes: float) -> float | None:
        """GB/s measured for a working set of `nbytes`: the envelope of the
        sizes measured (a smaller set is never slower: a small set's measured
        figure is slowed by per-call costs only), geometric between them."""
        rows = sorted(self.bandwidth, key=lambda p: p.bytes)
        if not rows:
            return None
        envelope = [max(p.copy_gbps, p.read_gbps) for p in rows]
        for i in range(len(envelope) - 2, -1, -1):
            envelope[i] = max(envelope[i], envelope[i + 1])
        if nbytes <= rows[0].bytes:
            return envelope[0]
        for i in range(len(rows) - 1):
            lo, hi = rows[i].bytes, rows[i + 1].bytes
            if nbytes < hi:
                t = math.log(nbytes / lo) / math.log(hi / lo)
                return math.exp((1 - t) * math.log(envelope[i]) + t * math.log(envelope[i + 1]))
        return envelope[-1]


class Profile(_Model):
    source: str = Field(description="What the profiler saw: cpu-ops, cuda-kernels or npu-ops")
    bytes: int | None = Field(None, description="Input plus output tensor bytes of one call: a lower bound")
    flops: float | None = Field(None, description="FLOPs of one call's matrix products and convolutions")
    reference: SideProfile | None = None
    candidate: SideProfile | None = None
    peak_gbps: float | None = Field(None, description="Measured bandwidth for a working set of this call's bytes")
    peak_flops: float | None = Field(None, description="Measured matmul FLOP/s for the call's dtype")
    bound: Bound | None = Field(None, description="The candidate's binding limit")
    summary: str = Field("", description="One sentence to act on")
    impossible: str | None = Field(
        None,
        description="Why the candidate's time is physically impossible: faster than reading its inputs and "
        "writing its outputs once at the measured bandwidth allows (it skipped reading inputs)",
    )
    fewer_flops: str | None = Field(
        None,
        description="The candidate's time is below what the reference's FLOPs need at the measured matmul "
        "peak: it does less arithmetic (an algebraic shortcut), which its correctness vouches for",
    )
    own_kernels: bool | None = Field(
        None, description="cuda/npu: false when every kernel the candidate launched is one the reference launches"
    )
    calibration: str | None = Field(None, description="The measured limits used, and when they were measured")
    limits: MachineLimits | None = Field(None, description="Those limits: what a roofline chart of this result draws")
    ncu: list[dict[str, object]] | None = Field(None, description="Nsight Compute metrics per kernel, when asked")
    notes: list[str] = Field(default_factory=list)
