"""The agent loop against the real harness and store, with a replayed model
behind the real Anthropic SDK (see conftest)."""

from __future__ import annotations

import json

import pytest

from sage_engine.agent.loop import AgentSettings, solve_task
from sage_engine.agent.strategies import get_strategy
from sage_engine.engine import Engine
from tests.agent.conftest import Replay, anthropic_llm, config_in, openai_llm, recording, seed_items, task_ref


def _settings(strategy: str = "atu", rounds: int = 3) -> AgentSettings:
    return AgentSettings(strategy=get_strategy(strategy), rounds=rounds, backend="cpu", k=5)


@pytest.fixture(scope="module")
def two_rounds(tmp_path_factory):
    """scale_shift: round 1 has a syntax error, round 2 is correct, then DONE
    and a lesson. Run once for the tests that read it (an evaluation costs
    seconds); returns the engine, the outcome, the replay and the item ids."""
    with Engine(config_in(tmp_path_factory.mktemp("two_rounds"))) as engine:
        fused, other = seed_items(engine)
        replay = Replay(recording("two_rounds"))
        outcome = solve_task(engine, anthropic_llm(replay), task_ref("scale_shift"), _settings())
        yield engine, outcome, replay, fused, other


def test_task_is_solved_in_two_rounds_after_a_compile_error(two_rounds):
    engine, outcome, replay, _, _ = two_rounds
    rec = outcome.record
    assert rec.statuses == ["compile_error", "correct"]
    assert rec.solved and rec.first_correct_round == 2 and rec.rounds_used == 2 and rec.stop == "done"
    # The compile error reached the model as a tool result naming the line of the missing colon.
    feedback = replay.tool_results(1)[0]["content"]
    assert "Round 1 of 3: compile_error" in feedback and "line 5" in feedback and "[error syntax]" in feedback
    # ... and the correct round reported timing and speedup back.
    assert "Speedup over the reference" in replay.tool_results(2)[0]["content"]
    assert "\nWhere the time goes: " in replay.tool_results(2)[0]["content"]  # and why it is as fast as it is
    detail = engine.get_episode(rec.episode_id)
    assert [a.status for a in detail.attempt_list] == ["compile_error", "correct"]
    assert detail.status == "closed" and rec.best_speedup and rec.best_speedup > 0
    assert outcome.best_code is not None and "addcmul" in outcome.best_code
    # Usage from the four responses, as the SDK parsed it.
    assert rec.llm_calls == 4 and rec.input_tokens == 1480 + 1960 + 2330 + 2480 and rec.output_tokens == 210 + 190 + 12 + 150
    assert rec.cost_usd == pytest.approx((8250 * 3 + 562 * 15) / 1e6)
    # Each call marks the end of the conversation for prompt caching (the SDK sends it as given).
    assert replay.requests[2]["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in json.dumps(replay.requests[2]["messages"][:-1])


def test_adopted_item_gains_utility_and_shown_unused_item_loses(two_rounds):
    engine, outcome, _, fused, other = two_rounds
    assert set(outcome.record.shown_ids) >= {fused, other}
    assert outcome.record.adopted_ids == [fused]
    assert engine.get_item(fused).utility > 0 > engine.get_item(other).utility
    assert engine.get_item(fused).n_adopted == 1 and engine.get_item(other).n_adopted == 0
    # One adoption per episode and item, linked to the latest attempt that used it, evidence kept.
    detail = engine.get_episode(outcome.record.episode_id)
    assert detail.attempt_list[-1].adopted_ids == [fused]
    assert [a.id for a in detail.adopted] == [fused] and "addcmul" in detail.adopted[0].evidence


def test_lesson_is_stored_with_episode_and_attempt_provenance(two_rounds):
    engine, outcome, _, _, _ = two_rounds
    rec = outcome.record
    lesson = engine.get_item(rec.lesson_item_id)
    assert lesson.title == "Fuse elementwise scale and shift into one addcmul"
    assert lesson.source_episode == rec.episode_id
    assert lesson.source_attempt == rec.best_attempt_id == rec.attempt_ids[1]
    assert lesson.operator == "scale_shift" and lesson.kind == "experience" and "addcmul" in (lesson.code or "")


def test_retrieval_strategy_shows_memory_but_credits_nothing(make_engine):
    engine = make_engine("retrieval")
    fused, other = seed_items(engine)
    replay = Replay(recording("two_rounds"))
    outcome = solve_task(engine, anthropic_llm(replay), task_ref("scale_shift"), _settings("retrieval"))
    rec = outcome.record
    assert f"[#{fused}]" in replay.first_text(0)
    assert rec.solved and rec.claimed_ids == [fused] and rec.adopted_ids == []
    assert engine.get_item(fused).utility == 0.0 and engine.get_item(other).utility == 0.0
    assert engine.get_episode(rec.episode_id).status == "closed" and rec.lesson_item_id is not None


def test_none_strategy_through_an_openai_compatible_endpoint_shows_no_memory(make_engine):
    engine = make_engine("none")
    seed_items(engine)
    replay = Replay(recording("openai_chat"))
    outcome = solve_task(engine, openai_llm(replay), task_ref("scale_shift"), _settings("none"))
    rec = outcome.record
    assert rec.solved and rec.statuses == ["correct"] and rec.episode_id is None and rec.llm_calls == 2
    first = replay.requests[0]
    assert first["messages"][0]["role"] == "system" and "Resident rules" not in first["messages"][1]["content"]
    assert [t["function"]["name"] for t in first["tools"]] == ["submit_kernel"]
    # The second request carries the tool call back as chat-completions tool messages.
    second = replay.requests[1]["messages"]
    assert second[2]["tool_calls"][0]["function"]["name"] == "submit_kernel"
    assert second[3]["role"] == "tool" and second[3]["content"].startswith("Round 1 of 3: correct")
    assert engine.stats().episodes_closed == 0 and rec.input_tokens == 2500
