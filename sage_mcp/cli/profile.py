"""Tables for where an evaluation's time goes (`sage bench --profile`) and
for a host's measured limits (`sage backends calibrate`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sage_mcp.cli.common import console, table

if TYPE_CHECKING:
    from sage_engine.models import EvalResult


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _number(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value / scale:.{digits}f}"


def _bytes(n: float | None) -> str:
    if not n:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def render_profile(r: EvalResult) -> None:
    """Both sides against the machine's measured limits, then their costliest kernels."""
    p = r.profile
    if p is None or p.reference is None or p.candidate is None:  # judged profiles always have both sides
        console.print(
            "no profile: only a correct, timed candidate is profiled (and SAGE_PROFILE must not be off)", highlight=False, markup=False
        )
        return
    ref, cand = p.reference, p.candidate
    medians = (r.reference_timing.median_ms if r.reference_timing else None, r.candidate_timing.median_ms if r.candidate_timing else None)
    rows = [
        ("median (timed)", *(_number(m, 1, 4) + " ms" if m is not None else "-" for m in medians)),
        (f"{'kernels' if p.source != 'cpu-ops' else 'torch ops'} a call", _number(ref.launches), _number(cand.launches)),
        ("kernel time a call (µs)", _number(ref.kernel_us), _number(cand.kernel_us)),
        ("kernel time / timed median", _share(ref.agreement), _share(cand.agreement)),
        ("achieved GB/s", _number(ref.achieved_gbps, digits=2), _number(cand.achieved_gbps, digits=2)),
        ("share of measured bandwidth", _share(ref.bandwidth_share), _share(cand.bandwidth_share)),
        ("achieved GFLOP/s", _number(ref.achieved_flops, 1e9), _number(cand.achieved_flops, 1e9)),
        ("share of matmul peak", _share(ref.compute_share), _share(cand.compute_share)),
        ("bound", ref.bound or "-", cand.bound or "-"),
    ]
    table(f"where the time goes ({p.source})", ["", "reference", "candidate"], rows)
    table(
        None,
        ["side", "kernel", "launches a call", "µs a call"],
        [
            (side, k.name, _number(k.launches), _number(k.time_us))
            for side, s in (("reference", ref), ("candidate", cand))
            for k in s.kernels
        ],
    )
    work = f"{_number(p.flops, 1e6)} MFLOP of matrix work" if p.flops else "no matrix work torch counts"
    peak = f", matmul peak {_number(p.peak_flops, 1e9)} GFLOP/s" if p.peak_flops else ""
    console.print(
        f"a call moves at least {_bytes(p.bytes)} (inputs plus outputs) and does {work}; measured here: "
        f"{_number(p.peak_gbps)} GB/s for that working set{peak}",
        highlight=False,
        markup=False,
    )
    if p.calibration:
        console.print(f"limits: {p.calibration}", highlight=False, markup=False)
    console.print(p.summary, highlight=False, markup=False)
    for note in p.notes:
        console.print(f"  note: {note}", highlight=False, markup=False)
    if p.ncu is not None:
        keys = sorted({k for row in p.ncu for k in row if k != "kernel"})
        table("Nsight Compute", ["kernel", *keys], [(row.get("kernel"), *(row.get(k, "") for k in keys)) for row in p.ncu])


def render_limits(limits) -> None:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(limits.measured_at))
    how = f"cached, measured {when}" if limits.cached else f"measured now in {limits.seconds:.1f} s"
    console.print(
        f"{limits.backend} on {limits.hardware}, {limits.threads} thread(s), torch {limits.torch}: {how}", highlight=False, markup=False
    )
    table(
        "bandwidth",
        ["working set", "copy GB/s", "read GB/s"],
        [(_bytes(b.bytes), _number(b.copy_gbps), _number(b.read_gbps)) for b in limits.bandwidth],
    )
    table("matmul", ["dtype", "GFLOP/s"], [(k, _number(v, 1e9)) for k, v in limits.matmul_flops.items()])
    console.print(f"one smallest op, back to back: {limits.launch_us:.2f} µs", highlight=False, markup=False)
    for note in limits.notes:
        console.print(f"  note: {note}", highlight=False, markup=False)
    if limits.path:
        console.print(f"cache: {limits.path}", highlight=False, markup=False)
