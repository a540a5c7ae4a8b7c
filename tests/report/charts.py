"""Results to draw, judged by the real judgement (`host/roofline.py`) from
profiles as the children report them, and the SVG read back as a structure."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

from sage_engine.evaluation.host import roofline
from sage_engine.evaluation.protocol import KernelTime, ProfileReport, SideKernels, Work
from sage_engine.models import BandwidthPoint, EvalResult, MachineLimits, TimingStats

SVG = "{http://www.w3.org/2000/svg}"
LIMITS = MachineLimits(
    backend="cpu",
    hardware="x86_64-avx2",
    threads=1,
    torch="2.13.0",
    measured_at=1_780_000_000.0,
    seconds=3.0,
    launch_us=2.4,
    bandwidth=[
        BandwidthPoint(bytes=1 << 15, copy_gbps=60.0, read_gbps=75.0),
        BandwidthPoint(bytes=1 << 20, copy_gbps=80.0, read_gbps=90.0),
        BandwidthPoint(bytes=1 << 24, copy_gbps=17.0, read_gbps=16.0),
        BandwidthPoint(bytes=1 << 28, copy_gbps=15.0, read_gbps=17.0),
    ],
    matmul_flops={"float32": 90e9, "bfloat16": 210e9},
)


def side(ops: int, kernel_us: float) -> SideKernels:
    return SideKernels(
        source="cpu-ops",
        calls=5,
        kernels=[KernelTime("aten::op", float(ops), kernel_us)],
        launches=float(ops),
        kernel_us=kernel_us,
        wall_us=kernel_us * 1.02,
        bare_us=kernel_us,
        overhead_us=1.0,
    )


def result(
    ref_ms: float,
    cand_ms: float,
    *,
    nbytes: int = 16 << 20,
    flops: dict | None = None,
    ops=(1, 3),
    limits: MachineLimits | None = LIMITS,
    task: str = "leaky_relu",
    profiled: bool = True,
) -> EvalResult:
    report = ProfileReport(
        reference=side(ops[0], ref_ms * 1000), candidate=side(ops[1], cand_ms * 1000), work=Work(bytes=nbytes, flops=flops or {})
    )
    profile = roofline.judge(report, reference_ms=ref_ms, candidate_ms=cand_ms, limits=limits, rules=roofline.Rules()) if profiled else None
    if profile is not None and limits is not None:
        profile.limits = limits
    timing = {
        k: TimingStats(median_ms=ms, iqr_ms=ms / 50, mean_ms=ms, min_ms=ms, reps=30)
        for k, ms in (("reference_timing", ref_ms), ("candidate_timing", cand_ms))
    }
    return EvalResult(
        status="correct",
        correct=True,
        task=task,
        backend="cpu",
        hardware="x86_64-avx2",
        candidate_hash="0" * 16,
        speedup=ref_ms / cand_ms,
        profile=profile,
        **timing,
    )


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def numbers(svg: str) -> list[str]:
    """Every coordinate-like attribute value, for a check that none is NaN or infinite."""
    return re.findall(r'(?<![\w-])(?:x|y|x1|x2|y1|y2|cx|cy|r|width|height|points)="([^"]*)"', svg)


def finite(svg: str) -> bool:
    for value in numbers(svg):
        for token in re.split(r"[ ,]+", value.strip()):
            if token and not math.isfinite(float(token)):
                return False
    return True


def plot_box(root: ET.Element) -> tuple[float, float, float, float]:
    rect = next(e for e in root.iter(f"{SVG}rect") if e.get("class") == "plot")
    x, y, w, h = (float(rect.get(k)) for k in ("x", "y", "width", "height"))
    return x, y, x + w, y + h


def points(root: ET.Element) -> dict[str, tuple[float, float]]:
    return {
        e.get("class").split()[1]: (float(e.get("cx")), float(e.get("cy")))
        for e in root.iter(f"{SVG}circle")
        if (e.get("class") or "").startswith("point ")
    }


def roofs(root: ET.Element) -> dict[str, ET.Element]:
    return {e.get("class").split()[1]: e for e in root.iter(f"{SVG}polyline") if (e.get("class") or "").startswith("roof ")}


def texts(root: ET.Element, cls: str | None = None) -> list[str]:
    return ["".join(e.itertext()) for e in root.iter(f"{SVG}text") if cls is None or e.get("class") == cls]
