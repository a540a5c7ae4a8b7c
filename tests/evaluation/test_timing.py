from __future__ import annotations

import pytest

from sage_engine.evaluation.timing import get_timer, measure_alternating, speedup, stats


def test_stats_give_median_iqr_mean_min_in_milliseconds():
    s = stats([0.001, 0.002, 0.003, 0.004, 0.100])
    assert s["median_ms"] == pytest.approx(3.0)
    assert s["iqr_ms"] == pytest.approx(2.0)
    assert s["min_ms"] == pytest.approx(1.0) and s["reps"] == 5
    assert s["mean_ms"] == pytest.approx(22.0)


def test_alternating_rounds_stop_at_max_reps_and_alternate_order():
    calls: list[str] = []
    ref_s, cand_s = measure_alternating(
        lambda: calls.append("r"), lambda: calls.append("c"), warmup=1, min_reps=2, max_reps=4, budget_s=100.0
    )
    assert len(ref_s) == len(cand_s) == 4
    assert "".join(calls) == "rc" + "rc" + "cr" + "rc" + "cr"


def test_budget_stops_after_min_reps_once_spent():
    now = [0.0]

    def clock() -> float:
        now[0] += 0.5  # every read of the clock moves time on by half a second
        return now[0]

    ref_s, _ = measure_alternating(lambda: None, lambda: None, warmup=0, min_reps=3, max_reps=1000,
                                   budget_s=0.1, clock=clock)
    assert len(ref_s) == 3


def test_timers_are_chosen_by_name_or_module_factory(tmp_path, monkeypatch):
    timer = get_timer("perf_counter")
    assert timer(lambda: None) >= 0.0
    (tmp_path / "my_timers.py").write_text("def fixed():\n    return lambda fn: (fn(), 0.25)[1]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert get_timer("my_timers:fixed")(lambda: None) == 0.25
    with pytest.raises(ValueError, match="unknown timer"):
        get_timer("sundial")


def test_speedup_is_reference_over_candidate():
    assert speedup(2.0, 1.0) == 2.0 and speedup(1.0, 0.0) is None
