"""Suite runs: resume after an interruption, and the report's metrics."""

from __future__ import annotations

import json

import pytest

from sage_engine.agent.llm import LLMError
from sage_engine.agent.report import compute_metrics
from sage_engine.agent.runner import Runner, new_settings
from sage_engine.agent.state import RunState, TaskRecord
from sage_engine.agent.strategies import STRATEGIES, get_strategy, strategy_config
from sage_engine.config import Config
from sage_engine.errors import InvalidInput
from tests.agent.conftest import MODEL, TASKS, Replay, anthropic_llm, recording, task_ref


def test_interrupted_run_resumes_without_repeating_finished_tasks(make_engine, tmp_path):
    engine = make_engine("atu")
    settings = new_settings(
        suite=str(TASKS),
        tasks=[task_ref("scale_shift"), task_ref("row_sum")],
        model=MODEL,
        rounds=2,
        strategy="atu",
        db_path=str(engine.config.db_path),
    )
    run_dir = tmp_path / "run"
    # The network goes down at the 4th request: the first of row_sum (scale_shift takes 3).
    first = Replay(recording("two_tasks"), fail_from=4)
    with pytest.raises(LLMError, match="cannot reach the Anthropic API"):
        Runner(engine, anthropic_llm(first), settings, RunState.create(run_dir, settings)).run()
    assert first.keys == ["scale_shift"] * 3 + ["row_sum"]

    state = RunState(run_dir)  # as a new process would read it
    assert list(state.finished) == ["scale_shift"] and state.started["row_sum"] is not None
    interrupted = state.started["row_sum"]
    second = Replay(recording("two_tasks"))
    outcome = Runner(engine, anthropic_llm(second), settings, state).run()

    assert second.keys == ["row_sum"] * 3  # scale_shift is not asked again
    assert [r.task for r in outcome.records] == ["scale_shift", "row_sum"] and outcome.remaining == []
    assert all(r.solved for r in outcome.records) and outcome.stopped is None
    # The interrupted episode is continued, not left open or duplicated.
    assert outcome.records[1].episode_id == interrupted
    tasks = [e.task for e in engine.list_episodes()]
    assert sorted(tasks) == ["row_sum", "scale_shift"] and engine.stats().episodes_open == 0
    events = [json.loads(line)["event"] for line in (run_dir / "state.jsonl").read_text().splitlines()]
    assert events.count("finished") == 2 and "stopped" in events
    assert (run_dir / "candidates" / "row_sum.py").is_file() and (run_dir / "report.json").is_file()


def _rec(task, seq, solved, speedup=None, first_ms=None, best_ms=None, tokens=1000, rounds=1):
    return TaskRecord(
        task=task,
        finished_seq=seq,
        solved=solved,
        best_speedup=speedup,
        first_correct_ms=first_ms,
        best_ms=best_ms,
        input_tokens=tokens,
        rounds_used=rounds,
        first_correct_round=1 if solved else None,
    )


def test_fast_1_divides_by_solved_tasks_and_fast_p_by_all_tasks():
    records = [
        _rec("a", 1, True, speedup=2.0, first_ms=4.0, best_ms=2.0, rounds=3),
        _rec("b", 2, True, speedup=0.5, first_ms=1.0, best_ms=1.0, rounds=1),
        _rec("c", 3, False, tokens=3000, rounds=4),
        _rec("d", 4, True, speedup=1.2, first_ms=3.0, best_ms=2.0, rounds=2),
    ]
    m = compute_metrics(records, planned=5)
    assert m["execution_rate"] == 3 / 4 and m["tasks_planned"] == 5
    assert m["fast_1_0_over_solved"] == 2 / 3
    assert m["fast_p_over_all"] == {"1": 2 / 4, "1.5": 1 / 4, "2": 0.0}
    assert m["s_self_median"] == 1.5  # median of 2.0, 1.0, 1.5
    assert m["speedup_median"] == 1.2 and m["speedup_geomean"] == pytest.approx((2.0 * 0.5 * 1.2) ** (1 / 3))
    assert m["rounds_per_solved_task"] == 2.0 and m["tokens_per_solved_task"] == 6000 / 3
    assert [round(p["cumulative_success_rate"], 3) for p in m["learning_curve"]] == [1.0, 1.0, 0.667, 0.75]


def test_metrics_of_an_empty_run_are_undefined_not_zero():
    m = compute_metrics([])
    assert m["execution_rate"] is None and m["fast_1_0_over_solved"] is None and m["speedup_geomean"] is None


def test_strategies_map_onto_the_engine_credit_rule_and_consolidation():
    base = Config(auto_consolidate_every=7)
    mapped = {name: strategy_config(base, get_strategy(name)) for name in STRATEGIES}
    assert {n: c.credit_strategy for n, c in mapped.items()} == {
        "none": "atu",
        "retrieval": "adopted-only",
        "uniform": "uniform",
        "adopted-only": "adopted-only",
        "atu": "atu",
        "atu+ugc": "atu",
    }
    assert [n for n, c in mapped.items() if c.auto_consolidate_every] == ["atu+ugc"]
    assert mapped["atu+ugc"].auto_consolidate_every == 7
    assert strategy_config(base, get_strategy("atu+ugc"), 3).auto_consolidate_every == 3
    assert not get_strategy("retrieval").report_adoptions and not get_strategy("none").retrieve
    with pytest.raises(InvalidInput, match="strategy must be one of"):
        get_strategy("ugc")
