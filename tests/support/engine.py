"""Helpers around a real Engine in tests: a cache dir that shares the
session's calibration, an evaluation outcome to record without running a
kernel, and every row the memory holds."""

from __future__ import annotations

from pathlib import Path

from sage_engine.engine import Engine
from sage_engine.models import EvalResult, TimingStats


def share_calibration(cache_dir: Path, shared: Path) -> Path:
    cache_dir.mkdir(parents=True, exist_ok=True)
    (cache_dir / "calibration").symlink_to(shared, target_is_directory=True)
    return cache_dir


def make_result(
    status: str = "correct", ms: float | None = 1.0, speedup: float | None = None, task: str = "t", trusted: bool | None = None
) -> EvalResult:
    """An evaluation outcome as a harness would report it; used where a test
    is about memory and credit, not about running kernels. A speedup is
    trusted unless `trusted` says otherwise."""
    timing = TimingStats(median_ms=ms, iqr_ms=0.0, mean_ms=ms, min_ms=ms, reps=10) if ms else None
    if speedup is not None and trusted is None:
        trusted = True
    return EvalResult(
        status=status,
        task=task,
        backend="cpu",
        hardware="x86_64",
        candidate_hash="0" * 16,
        correct=status == "correct",
        candidate_timing=timing,
        speedup=speedup,
        speedup_trusted=trusted,
        speedup_note=None if trusted is not False else "unverified: skipped reading inputs",
    )


def table_rows(engine: Engine) -> dict[str, list[dict]]:
    """Every stored row of every table, read through the store's own export."""
    from sage_engine.memory.store.transfer import export_rows

    out: dict[str, list[dict]] = {}
    for rec in export_rows(engine.store):
        out.setdefault(rec["table"], []).append(rec["row"])
    return out
