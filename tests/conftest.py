"""Fixtures shared by every test: real SQLite files under tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.models import EvalResult, TimingStats


@pytest.fixture
def config(tmp_path: Path) -> Config:
    # Automatic consolidation off: tests consolidate when they mean to.
    return Config(db_path=tmp_path / "memory.db", cache_dir=tmp_path / "cache", auto_consolidate_every=0)


@pytest.fixture
def engine(config: Config):
    with Engine(config) as eng:
        yield eng


def make_result(status: str = "correct", ms: float | None = 1.0, speedup: float | None = None, task: str = "t") -> EvalResult:
    """An evaluation outcome as a harness would report it; used where a test
    is about memory and credit, not about running kernels."""
    timing = TimingStats(median_ms=ms, iqr_ms=0.0, mean_ms=ms, min_ms=ms, reps=10) if ms else None
    return EvalResult(status=status, task=task, backend="cpu", hardware="x86_64", candidate_hash="0" * 16,
                      correct=status == "correct", candidate_timing=timing, speedup=speedup)
