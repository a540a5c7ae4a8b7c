"""The run report's metrics: what counts as a speedup."""

from __future__ import annotations

from sage_engine.agent.report import _best, compute_metrics
from sage_engine.agent.state import TaskRecord


def test_an_unverified_speedup_counts_as_solved_and_in_no_speed_metric():
    honest = TaskRecord(task="a", solved=True, best_speedup=1.5, finished_seq=1)
    flagged = TaskRecord(task="b", solved=True, best_speedup=None, best_speedup_unverified=50.0, finished_seq=2)
    metrics = compute_metrics([honest, flagged])
    assert metrics["execution_rate"] == 1.0
    assert metrics["fast_1_0_over_solved"] == 0.5  # only the verified 1.5x beats the reference
    assert metrics["speedup_median"] == 1.5
    assert _best(flagged.model_dump(mode="json")) == "50.00x (unverified)"
