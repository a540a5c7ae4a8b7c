"""Helpers for the evaluation tests: the fixture tasks and cheats, a fast
Config, a task's reference as its own candidate. Fixtures are in conftest.py."""

from __future__ import annotations

import re
from pathlib import Path

from sage_engine.config import Config
from sage_engine.evaluation.host.tasks import Task, load_task

HERE = Path(__file__).parent
FIXTURE_TASKS = HERE / "fixtures" / "tasks"
CHEATS = HERE / "cheats"


def fast_config(cache_dir: Path, **changes) -> Config:
    """Small timing budget and few trials: the tests check behaviour, not speed."""
    base = dict(
        db_path=cache_dir / "memory.db",
        cache_dir=cache_dir,
        timing_budget_s=0.2,
        timing_min_reps=5,
        timing_max_reps=60,
        timing_warmup=2,
        correctness_trials=2,
        # A C++ example builds in 51 s on an idle core and took over 120 s on a loaded two-core CI machine.
        eval_timeout_s=300.0,
        eval_memory_mb=3072,
    )
    base.update(changes)
    return Config(**base)


def fixture_task(name: str) -> Task:
    return load_task(str(FIXTURE_TASKS / name))


def as_own_candidate(task: Task) -> str:
    """The reference renamed to ModelNew: what a no-op candidate looks like."""
    return re.sub(r"\bModel\b", "ModelNew", task.reference_source)
