"""Shared by the backend tests (imported by name: the tests dir is no package)."""

from __future__ import annotations

from pathlib import Path

from sage_engine.config import Config

SUITE = Path(__file__).resolve().parents[3] / "sage_engine" / "suite" / "tasks"


def ascend_config(tmp: Path, **changes) -> Config:
    # The env lives in the real cache dir; the database does not matter here.
    base = dict(db_path=tmp / "memory.db", cache_dir=Config.from_env().cache_dir, correctness_trials=1, eval_timeout_s=300.0)
    base.update(changes)
    return Config(**base)
