"""Every example solution of the bundled suite is judged correct, and each
reference timed against itself runs at speedup ~1. Slow: C++ examples compile."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from sage_engine.evaluation.host.tasks import default_suite_dir, list_suite, load_task

from tests.evaluation.support import FIXTURE_TASKS, as_own_candidate

SUITE = default_suite_dir()
SOLUTIONS = (
    sorted(p for pattern in ("*/solutions/cpu_*.py", "*/solutions/triton_*.py") for p in SUITE.glob(pattern)) if SUITE.is_dir() else []
)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "path",
    SOLUTIONS or [pytest.param(None, marks=pytest.mark.skip(reason=f"no bundled suite solutions under {SUITE}"))],
    ids=lambda p: f"{p.parent.parent.name}/{p.stem}" if p else "empty-suite",
)
def test_suite_solution_is_correct(harness, path: Path):
    task = load_task(str(path.parent.parent))
    backend = "triton" if path.stem.startswith("triton_") else "cpu"
    result = harness.evaluate(task, path.read_text(), backend=backend)
    assert result.status == "correct", (result.message, [d.message for d in result.diagnostics])


# Every other task, in two halves: each is a test of its own, so two test
# workers share what took one 110-160 s (each half's median is over ~25 tasks).
@pytest.mark.parametrize("half", [0, 1], ids=["even", "odd"])
def test_references_timed_against_themselves_run_at_speedup_one(harness, half: int):
    tasks = [load_task(str(p)) for p in sorted(FIXTURE_TASKS.iterdir())] + (list_suite() if SUITE.is_dir() else [])
    tasks = tasks[half::2]
    speedups = []
    for task in tasks:
        task = replace(task, forbid=())
        result = harness.evaluate(task, as_own_candidate(task))
        assert result.status == "correct", (task.id, result.message)
        speedups.append(result.speedup)
    assert 0.9 <= statistics.median(speedups) <= 1.1, speedups
