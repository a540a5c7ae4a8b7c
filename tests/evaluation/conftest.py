"""Fixtures for the evaluation tests: three small tasks, a fast Config, and
harnesses shared per session so the warm worker starts once."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pytest

from sage_engine.config import Config
from sage_engine.evaluation.harness import Harness
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
        eval_timeout_s=120.0,
        eval_memory_mb=3072,
    )
    base.update(changes)
    return Config(**base)


def fixture_task(name: str) -> Task:
    return load_task(str(FIXTURE_TASKS / name))


def as_own_candidate(task: Task) -> str:
    """The reference renamed to ModelNew: what a no-op candidate looks like."""
    return re.sub(r"\bModel\b", "ModelNew", task.reference_source)


@pytest.fixture(scope="session")
def eval_cache(tmp_path_factory) -> Path:
    """One cache for the session. Its C++ builds live in a folder kept across
    runs and shared by parallel test workers (SAGE_TEST_BUILD_CACHE, default
    under the temp dir): a build costs 20-30 s of CPU, and the cache is keyed
    by source and toolchain, so a kept build is exactly what SAGE would load."""
    cache = tmp_path_factory.mktemp("sage-eval-cache")
    builds = Path(os.environ.get("SAGE_TEST_BUILD_CACHE") or Path(tempfile.gettempdir()) / "sage-test-builds")
    builds.mkdir(parents=True, exist_ok=True)
    (cache / "torch_extensions").symlink_to(builds, target_is_directory=True)
    return cache


@pytest.fixture(scope="session")
def harness(eval_cache: Path):
    with Harness(fast_config(eval_cache)) as h:
        yield h
