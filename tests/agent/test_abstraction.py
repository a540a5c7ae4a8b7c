"""LLM rule abstraction inside real consolidation: faithful rewrites are
used, rewrites that lose evidence or drift are refused and the deterministic
rule is kept with a note saying why."""

from __future__ import annotations

import pytest

from sage_engine.agent.abstraction import LLMAbstractor, check_drift, numbers
from sage_engine.errors import InvalidInput
from sage_engine.models import NewItem, RuleDraft
from tests.agent.conftest import GRID_A, GRID_B, Replay, anthropic_llm, proven_cluster, recording


def consolidate_with(make_engine, scenario: str):
    replay = Replay({"abstract": recording("abstraction")[scenario]})
    engine = make_engine("atu", abstractor=LLMAbstractor(anthropic_llm(replay)))
    ids = proven_cluster(engine)
    return engine, ids, engine.consolidate(), replay


def test_faithful_rule_rewrite_becomes_the_resident_rule(make_engine):
    engine, ids, report, replay = consolidate_with(make_engine, "faithful")
    assert report.abstraction == "llm" and report.notes == [] and report.merged == [ids]
    rule = engine.resident_rules()[0]
    assert rule.title == "Loop over blocks in a persistent grid" and rule.derived_from == ids
    assert rule.content.startswith("> Launch one program per vector core") and "Evidence" not in rule.content
    assert report.created_rules[0].evidence == [1, 2]
    # The model was asked through the forced write_rule tool and shown every evidence id.
    request = replay.requests[0]
    assert request["tool_choice"]["name"] == "write_rule" and f"[#{ids[0]}]" in replay.first_text(0)


@pytest.mark.parametrize(
    "scenario, reason",
    [
        ("drops_evidence", "dropped evidence ids [2]"),
        ("new_number", "introduces numbers not in its sources: 16384"),
        ("drifts", "the rule drifts from its sources"),
    ],
)
def test_invalid_rule_rewrite_is_rejected_and_the_deterministic_rule_kept(make_engine, scenario, reason):
    engine, ids, report, _ = consolidate_with(make_engine, scenario)
    assert report.abstraction == "deterministic"
    assert len(report.notes) == 1 and "llm rewrite of cluster [1, 2] rejected" in report.notes[0]
    assert reason in report.notes[0] and "kept the deterministic rule" in report.notes[0]
    rule = engine.resident_rules()[0]
    assert rule.title == GRID_A[0] and rule.derived_from == ids  # the deterministic draft leads with the top item


def _item(engine, title, content):
    return engine.add_item(NewItem(title=title, content=content)).item


def test_numbers_inside_identifiers_are_not_facts():
    assert numbers("Ascend910B3 fp16 L0C tl.float32") == set()
    assert numbers("BLOCK=4,096, tiles 128x64, 2x faster, 0.8 of UB") == {4096.0, 128.0, 64.0, 2.0, 0.8}


def test_drift_check_accepts_a_rule_quoting_its_sources(engine):
    a, b = _item(engine, *GRID_A), _item(engine, *GRID_B)
    draft = RuleDraft(
        title="Persistent grid",
        trigger="Large vector kernels",
        rule="Loop over the blocks inside the kernel; BLOCK 4096 fits the Unified Buffer.",
        rationale="Adopted across operators.",
        when_not="Tiny tensors.",
        evidence=[a.id, b.id],
    )
    check_drift(draft, [a, b])
    with pytest.raises(InvalidInput, match="when_not introduces numbers not in its sources: 64"):
        check_drift(draft.model_copy(update={"when_not": "Tensors under 64 elements."}), [a, b])
