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


def held_to_cpu(result) -> bool:
    """A correct result whose timers' speedup passed the CPU's and was credited
    at most 1.15x the CPU's (`worker/timed.py`, `claims_past_cpu`): a slowed
    clock caught where a loaded machine hid it from the misreport gap."""
    held = result.compile_info.checks.cpu_bound if result.compile_info and result.compile_info.checks else None
    return (
        result.status == "correct"
        and held is not None
        and (held.credited or 1.0) > 1.0
        and result.speedup is not None
        and result.speedup <= 1.15 * (held.by_cpu or 0.0) * 1.0001
    )
