"""UGC over a real store: gating, rule scopes and per-task rulebooks,
budgets, hysteresis, revert."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.memory.consolidation import DeterministicAbstractor, choose_rulebook, cluster, validate_draft
from sage_engine.errors import InvalidInput
from sage_engine.models import Adoption, Item, NewItem
from tests.support.engine import make_result


def adopt_in_episodes(engine, item_title, operators, reward_status="correct", speedup=2.0):
    """Run one episode per operator in which the agent adopts the item."""
    for op in operators:
        r = engine.retrieve(item_title, operator=op)
        target = next(i.id for i in r.items + r.resident_rules if i.title == item_title)
        engine.record_result(make_result(reward_status, 1.0, speedup), episode_id=r.episode_id)
        engine.record_adoption(r.episode_id, [Adoption(id=target, evidence="applied")])
    return target


def test_item_adopted_by_one_operator_many_times_is_not_promoted(engine):
    engine.add_item(NewItem(title="persistent grid loop", content="launch one program per core and loop over blocks"))
    adopt_in_episodes(engine, "persistent grid loop", ["softmax"] * 6)
    report = engine.consolidate()
    assert report.eligible == [] and report.rulebook == []


def test_item_adopted_across_three_operators_with_positive_utility_is_promoted(engine):
    item_id = engine.add_item(NewItem(title="persistent grid loop", content="launch one program per core and loop over blocks")).item.id
    adopt_in_episodes(engine, "persistent grid loop", ["softmax", "layernorm", "gelu"])
    report = engine.consolidate()
    assert report.eligible == [item_id]
    assert len(report.rulebook) == 1 and report.rulebook[0].derived_from == [item_id]
    assert engine.get_item(item_id).status == "merged"
    rule = engine.resident_rules()[0]
    assert report.abstraction == "deterministic" and rule.derived_from == [item_id]
    # Concise: the advice and where it applies, no boilerplate.
    # The advice is the item's words, quoted: they cannot make the rule's structure.
    assert rule.content.startswith("> launch one program per core and loop over blocks\nWhen: kernels like gelu")
    assert "Evidence" not in rule.content and "Why" not in rule.content
    assert {"persistent", "grid", "loop"} <= set(rule.rule_triggers) and rule.rule_families == []
    assert rule.rule_operators == ["gelu", "layernorm", "softmax"]


def test_dry_run_changes_nothing(engine):
    engine.add_item(NewItem(title="persistent grid loop", content="launch one program per core and loop over blocks"))
    adopt_in_episodes(engine, "persistent grid loop", ["softmax", "layernorm", "gelu"])
    before = [i.model_dump() for i in engine.list_items(limit=100)]
    report = engine.consolidate(dry_run=True)
    assert report.dry_run and len(report.rulebook) == 1 and report.consolidation_id is None
    assert [i.model_dump() for i in engine.list_items(limit=100)] == before
    assert engine.stats().consolidations == 0


def test_demoted_rule_returns_to_the_retrievable_pool(engine):
    engine.add_item(NewItem(title="persistent grid loop", content="launch one program per core and loop over blocks"))
    adopt_in_episodes(engine, "persistent grid loop", ["softmax", "layernorm", "gelu"])
    rule = engine.consolidate().rulebook[0]
    # The rule keeps being adopted and failing: it must fall below the demote
    # threshold (slowly: it inherits its evidence's retrieval count, so eta is small).
    for _ in range(20):
        r = engine.retrieve("persistent grid loop")
        assert rule.id in [x.id for x in r.resident_rules]
        engine.record_result(make_result("incorrect"), episode_id=r.episode_id)
        engine.record_adoption(r.episode_id, [Adoption(id=rule.id)])
    assert engine.get_item(rule.id).utility < engine.config.demote_threshold
    report = engine.consolidate()
    assert report.demoted == [rule.id]
    assert engine.get_item(rule.id).status == "active"
    assert rule.id in [i.id for i in engine.retrieve("persistent grid loop").items]


def test_hysteresis_keeps_a_resident_rule_between_the_thresholds():
    cfg = Config(ugc_min_utility=0.0, demote_threshold=-0.1)
    rule = _rule(1, utility=-0.05, status="resident")
    assert choose_rulebook([rule], cfg, 1000).resident == [1]
    assert choose_rulebook([rule.model_copy(update={"status": "active"})], cfg, 1000).resident == []


def test_consolidation_is_reversible(engine):
    item_id = engine.add_item(NewItem(title="persistent grid loop", content="launch one program per core and loop over blocks")).item.id
    adopt_in_episodes(engine, "persistent grid loop", ["softmax", "layernorm", "gelu"])
    report = engine.consolidate()
    rule_id = report.rulebook[0].id
    engine.revert_consolidation(report.consolidation_id)
    assert engine.get_item(item_id).status == "active"
    assert engine.get_item(rule_id).status == "deleted"
    assert engine.resident_rules() == []


def _rule(i, utility=0.5, tokens=100, p=0.5, status="active"):
    return Item(
        id=i,
        kind="rule",
        status=status,
        title=f"r{i}",
        content="c",
        scope="global",
        utility=utility,
        n_retrieved=1,
        n_adopted=1,
        n_credited=1,
        adoption_rate=p,
        tokens=tokens,
        created_at=0,
        updated_at=0,
    )


@settings(max_examples=200, deadline=None)
@given(
    rules=st.lists(st.tuples(st.floats(-1, 1), st.integers(1, 3000), st.floats(0, 1), st.booleans()), max_size=40),
    budget=st.integers(1, 5000),
    max_rules=st.integers(1, 15),
)
def test_resident_rulebook_never_exceeds_its_budget_or_max_count(rules, budget, max_rules):
    cfg = Config(max_rules=max_rules)
    items = [_rule(i + 1, u, t, p, "resident" if r else "active") for i, (u, t, p, r) in enumerate(rules)]
    choice = choose_rulebook(items, cfg, budget)
    assert choice.tokens <= budget and len(choice.resident) <= max_rules
    assert choice.tokens == sum(it.tokens for it in items if it.id in choice.resident)


def test_near_duplicate_items_cluster_together_and_distinct_ones_do_not():
    a = _rule(1).model_copy(
        update={
            "kind": "experience",
            "title": "loop over blocks",
            "content": "launch one program per core and loop over blocks inside the kernel",
        }
    )
    b = a.model_copy(update={"id": 2, "content": "launch one program per core and loop over the blocks inside each kernel"})
    c = a.model_copy(update={"id": 3, "title": "fp32 accumulate", "content": "accumulate reductions in fp32 then cast back"})
    groups = cluster([a, b, c], 0.5)
    assert sorted(sorted(i.id for i in g) for g in groups) == [[1, 2], [3]]


def test_rule_draft_that_drops_evidence_is_rejected():
    items = [_rule(1).model_copy(update={"kind": "experience", "operators_adopted": ["a"]}), _rule(2)]
    draft = DeterministicAbstractor().abstract(items)
    validate_draft(draft, items)
    with pytest.raises(InvalidInput, match="dropped evidence"):
        validate_draft(draft.model_copy(update={"evidence": [1]}), items)
    with pytest.raises(InvalidInput, match="empty 'when_not'"):
        validate_draft(draft.model_copy(update={"when_not": " "}), items)


def test_a_global_rulebook_penalises_an_unadopted_rule_only_on_tasks_it_matches(config):
    engine = Engine(config.replace(rulebook_scope="global"))
    engine.add_item(NewItem(title="persistent grid loop", content="launch one program per core and loop over blocks"))
    adopt_in_episodes(engine, "persistent grid loop", ["softmax", "layernorm", "gelu"])
    rule = engine.consolidate().rulebook[0]
    before = engine.get_item(rule.id).utility

    unrelated = engine.retrieve("embedding table lookup")
    assert [r.id for r in unrelated.resident_rules] == [rule.id]
    engine.record_result(make_result("correct", 1.0), episode_id=unrelated.episode_id)
    engine.close_episode(unrelated.episode_id)
    assert engine.get_item(rule.id).utility == before

    related = engine.retrieve("grid loop over blocks for a softmax kernel")
    engine.record_result(make_result("correct", 1.0), episode_id=related.episode_id)
    engine.close_episode(related.episode_id)
    assert engine.get_item(rule.id).utility < before
    engine.close()


def _learn(engine, title, content, tasks):
    """An experience adopted in one episode per bundled task, then consolidated."""
    item_id = engine.add_item(NewItem(title=title, content=content)).item.id
    for task in tasks:
        r = engine.retrieve(task, k=10, reference=title)
        target = next(i.id for i in r.items if i.id == item_id)
        # Evidence is an attempt on the episode's own task.
        engine.record_result(make_result("correct", 1.0, 2.0, task=task), episode_id=r.episode_id)
        engine.record_adoption(r.episode_id, [Adoption(id=target, evidence="applied")])
    return engine.consolidate()


def test_a_rule_learned_in_one_family_is_resident_only_for_that_family(engine):
    report = _learn(
        engine,
        "softmax rows: subtract the max",
        "subtract the row max before exp in every softmax kernel",
        ["softmax", "log_softmax", "masked_softmax"],
    )
    rule = report.rulebook[0]
    assert rule.rule_families == ["softmax"]
    assert [r.id for r in engine.retrieve("log_softmax").resident_rules] == [rule.id]
    other = engine.retrieve("layer_norm")
    assert other.resident_rules == []


def test_a_rule_proven_in_two_families_crosses_families_where_its_terms_appear(engine):
    report = _learn(
        engine, "accumulate in fp32", "accumulate reductions in fp32 then cast back once", ["softmax", "layer_norm", "rms_norm"]
    )
    rule = report.rulebook[0]
    assert rule.rule_families == [] and rule.families_adopted == ["normalization", "softmax"]
    assert "fp32" in rule.rule_triggers and "accumulate" in rule.rule_triggers
    assert [r.id for r in engine.retrieve("sum of rows, accumulate in fp32").resident_rules] == [rule.id]
    assert engine.retrieve("matmul").resident_rules == []


def test_a_rule_not_resident_for_a_task_can_still_be_retrieved_as_an_item(engine):
    report = _learn(
        engine,
        "softmax rows: subtract the max",
        "subtract the row max before exp in every softmax kernel",
        ["softmax", "log_softmax", "masked_softmax"],
    )
    rule = report.rulebook[0]
    shown = engine.retrieve("layer_norm", operator="layer_norm", reference="subtract the row max before exp")
    assert shown.resident_rules == [] and rule.id in [i.id for i in shown.items]


def test_the_per_task_rulebook_stays_within_its_token_budget(config):
    from sage_engine.memory.consolidation import GateStats, TaskContext, residents_for_task

    cfg = config.replace(ugc_resident_tokens=250)
    rules = [
        GateStats(_rule(i, utility=0.5 - i / 100, tokens=100).model_copy(update={"rule_triggers": ["tile"]}), 0.5, 0.25)
        for i in range(1, 6)
    ]
    chosen = residents_for_task(rules, TaskContext.of("tile the output"), cfg)
    assert [r.id for r in chosen] == [1, 2]  # 2 x (100 + 12) <= 250 < 3 x 112
    assert residents_for_task(rules, TaskContext.of("nothing related"), cfg) == []


def test_a_free_text_task_that_names_its_family_learns_a_rule_scoped_to_that_family(engine):
    item_id = engine.add_item(NewItem(title="row max first", content="subtract the row max before exp")).item.id
    for op in ("softmax", "log_softmax", "masked_softmax"):
        r = engine.retrieve(f"a {op} kernel; subtract the row max before exp", operator=op, family="softmax", k=10)
        engine.record_result(make_result("correct", 1.0, 2.0), episode_id=r.episode_id)
        engine.record_adoption(r.episode_id, [Adoption(id=item_id, evidence="applied")])
    assert engine.get_item(item_id).families_adopted == ["softmax"]
    rule = engine.consolidate().rulebook[0]
    assert rule.rule_families == ["softmax"]
    mine = engine.retrieve("a fresh softmax variant", operator="sparse_softmax", family="softmax")
    theirs = engine.retrieve("a layer norm kernel; subtract the row max before exp", family="normalization")
    assert [r.id for r in mine.resident_rules] == [rule.id] and theirs.resident_rules == []


def test_words_most_tasks_mention_are_never_trigger_terms(engine):
    from sage_engine.memory.consolidation import common_task_words

    cfg = engine.config
    queries = [f"write an ascend kernel for op{i}" for i in range(12)] + ["tile the grid"] * 3
    assert {"kernel", "ascend", "write"} <= common_task_words(queries, cfg)
    assert "tile" not in common_task_words(queries, cfg) and not common_task_words(queries[:5], cfg)

    # Common words are learned from what tasks were shown: give them something to be shown.
    engine.add_item(NewItem(title="ascend kernel notes", content="notes on writing an ascend kernel"))
    for i in range(12):  # every task so far says "kernel"
        engine.close_episode(engine.retrieve(f"write an ascend kernel for op{i}").episode_id)
    report = _learn(
        engine, "kernel: accumulate in fp32", "every kernel should accumulate reductions in fp32", ["softmax", "layer_norm", "rms_norm"]
    )
    rule = report.rulebook[0]
    assert rule.rule_families == [] and "fp32" in rule.rule_triggers and "kernel" not in rule.rule_triggers
    assert engine.retrieve("write an ascend kernel for matmul").resident_rules == []
    assert [r.id for r in engine.retrieve("a kernel that must accumulate in fp32").resident_rules] == [rule.id]
