"""The learning benchmark in its tiny configuration: `--quick` runs every
world end to end through the real Engine and writes its outputs, and the
numbers obey what any correct implementation must (ranges, a memoryless
baseline that cannot learn, determinism, consolidation only where enabled).
The simulated agent and world are checked directly: reports are noisy where
the world says so, context costs what the world says, drift flips skills."""

from __future__ import annotations

import ast
import json
import math
import random
from pathlib import Path

import pytest

from benchmarks.learning import __main__ as cli
from benchmarks.learning.agent import Shown, effective, expected_success, run_episode, success_probability, use_probability
from benchmarks.learning.bench import _signature
from benchmarks.learning.catalogue import MIRROR
from benchmarks.learning.compare import PAIRS
from benchmarks.learning.config import DRIFT, EASY, NOISY, WORLDS, SimConfig, engine_overrides
from benchmarks.learning.metrics import METRICS, interval, ndcg, spearman, summarize
from benchmarks.learning.runner import run, strategies, strategy_names
from benchmarks.learning.stats import holm, paired, t_quantile, t_sf2
from benchmarks.learning.world import Operator, Situation, Truth, build_world
from sage_engine.errors import InvalidInput

TINY = SimConfig().tiny()
SEEDS = (0, 1)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("learning")
    assert cli.main(["--quick", "--out", str(out)]) == 0
    return out, {w: json.loads((out / w / "results.json").read_text()) for w in WORLDS}


@pytest.mark.slow  # one ~15 s tiny run of every world, shared by the tests below
def test_quick_run_writes_one_results_file_per_world_with_every_arm_and_metric(quick):
    out, results = quick
    assert (out / "summary.md").is_file() and (out / "worlds.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for world, data in results.items():
        names = {p.name for p in (out / world).iterdir()}
        assert names == {"results.json", "results.md", "learning_curve.png", "summary.png"}, world
        assert list(data["strategies"]) == strategy_names()
        for name, res in data["strategies"].items():
            assert set(res["metrics"]) == set(METRICS), name
            assert all(set(m) == {"mean", "lo", "hi", "n"} for m in res["metrics"].values())
        table = (out / world / "results.md").read_text()
        assert all(f"| {name} |" in table for name in strategy_names())
        assert set(data["paired"]) == {f"{a} - {b}" for a, b in PAIRS}


@pytest.mark.slow  # shares the tiny run of every world
def test_every_metric_lies_in_its_valid_range(quick):
    for world, data in quick[1].items():
        for name, res in data["strategies"].items():
            for metric, (_, lo, hi) in METRICS.items():
                for value in res["per_seed"][metric]:
                    if value is None:
                        continue
                    assert lo is None or value >= lo - 1e-9, (world, name, metric, value)
                    assert hi is None or value <= hi + 1e-9, (world, name, metric, value)
                m = res["metrics"][metric]
                if m["mean"] is not None:
                    assert m["lo"] <= m["mean"] + 1e-12 and m["mean"] <= m["hi"] + 1e-12


@pytest.mark.slow  # shares the tiny run of every world
def test_reports_are_the_truth_in_the_easy_world_and_noisy_in_the_others(quick):
    for world, data in quick[1].items():
        atu = data["strategies"]["atu"]["metrics"]
        if world == "easy":
            assert atu["report_precision"]["mean"] == 1.0 and atu["report_recall"]["mean"] == 1.0
        else:
            assert atu["report_precision"]["mean"] < 0.97 and atu["report_recall"]["mean"] < 0.9


@pytest.mark.slow  # shares the tiny run of every world
def test_stale_entries_are_measured_only_where_the_world_drifts(quick):
    for world, data in quick[1].items():
        exits = data["strategies"]["atu"]["per_seed"]["stale_exit"]
        assert all(v is None for v in exits) if world != "drift" else any(v is not None for v in exits), world


@pytest.mark.slow  # shares the tiny run of every world
def test_memory_metrics_are_undefined_without_memory_and_defined_with_it(quick):
    s = quick[1]["easy"]["strategies"]
    assert s["no-memory"]["metrics"]["ndcg_ctx"]["mean"] is None and s["no-memory"]["metrics"]["tokens"]["mean"] == 0
    for name in strategy_names()[1:]:
        assert s[name]["metrics"]["ndcg_ctx"]["n"] == len(SEEDS) and s[name]["metrics"]["tokens"]["mean"] > 0


def test_no_memory_agent_sees_nothing_so_its_expected_success_is_the_same_on_every_task():
    r = run("no-memory", 0, TINY)
    flat = expected_success(0, TINY.needed_shared + TINY.needed_family, 0, 0, TINY)
    assert all(e["shown"] == 0 and e["tokens"] == 0 and e["used"] == 0 for e in r["episodes"])
    assert all(e["p_expected"] == pytest.approx(flat) for e in r["episodes"])


@pytest.mark.slow  # a few tiny runs through the real engine
def test_only_consolidating_arms_consolidate_and_only_they_show_resident_rules():
    sim = TINY.replace(episodes_per_family=20, forget_window=5)
    for name in ("atu", "atu+ugc"):
        snap = run(name, 0, sim)["snapshots"]["run_end"]
        if name == "atu+ugc":
            assert snap["consolidations"] >= 1
        else:
            assert snap["consolidations"] == 0 and snap["rules"] == 0


@pytest.mark.slow  # two tiny runs through the real engine
def test_same_world_seed_and_strategy_reproduce_the_same_run():
    sim = NOISY.tiny()
    assert run("atu", 1, sim)["episodes"] == run("atu", 1, sim)["episodes"]


@pytest.mark.slow  # four tiny runs through the real engine
def test_with_a_perfectly_reliable_adopter_atu_ranks_no_worse_than_uniform_credit():
    sim = TINY.replace(
        p_adopt_useful=1.0,
        p_adopt_misleading=0.0,
        p_adopt_irrelevant=0.0,
        p_wrong_lesson=0.0,
        first_kernel_sigma=0.0,
        round_noise_sigma=0.0,
    )
    atu = [summarize(run("atu", seed, sim), sim)["ndcg"] for seed in SEEDS]
    uniform = [summarize(run("uniform-pure", seed, sim), sim)["ndcg"] for seed in SEEDS]
    assert sum(atu) / len(atu) >= sum(uniform) / len(uniform)


def test_every_arm_runs_with_its_own_engine_settings_so_none_shares_a_run():
    signatures = [_signature(EASY, name) for name in strategy_names()]
    assert len(set(signatures)) == len(signatures)
    assert strategies(EASY)["atu+ugc"].engine["rulebook_scope"] == "global"
    assert strategies(EASY)["atu+ugc-scoped"].engine["rulebook_scope"] == "task"


def test_an_engine_setting_the_config_does_not_have_stops_the_run():
    assert engine_overrides({"w_adoption": 0.0}) == {"w_adoption": 0.0}
    with pytest.raises(InvalidInput, match="no_such_setting"):
        engine_overrides({"w_adoption": 0.0, "no_such_setting": 1})


def test_benchmark_reads_the_engine_only_through_its_public_methods():
    for path in Path("benchmarks/learning").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                assert node.attr not in ("store", "conn", "db"), (path, node.attr)
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not node.value.lstrip().upper().startswith(("SELECT ", "INSERT ", "UPDATE ", "DELETE ")), path
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("sage_engine.memory"), (path, node.module)


# ------------------------------------------------------------------ the agent


def _entries(n: int, truth: Truth) -> list[Shown]:
    return [Shown(i, truth, False, 200) for i in range(1, n + 1)]


OP = Operator("sum", "reduction", frozenset({"tree_reduce", "two_stage", "double_buffer", "tail_mask"}), 1.0)
NEEDS = Situation(OP.needs, frozenset({"fp16_accum"}), frozenset())


def _rates(sim: SimConfig, truth: Truth, n: int = 5, episodes: int = 3000) -> tuple[list[float], list[float]]:
    """Per rank: share of episodes where the entry was used, and where it was reported."""
    used, reported = [0] * n, [0] * n
    for i in range(episodes):
        out = run_episode(OP, NEEDS, _entries(n, truth), 300, 7, i, sim)
        for r in range(n):
            used[r] += (r + 1) in out.used
            reported[r] += (r + 1) in out.reported
    return [u / episodes for u in used], [x / episodes for x in reported]


def test_in_the_easy_world_the_agent_reports_exactly_what_it_used():
    for truth in (Truth(frozenset({"tree_reduce"}), frozenset()), Truth(frozenset({"printf"}), frozenset())):
        for i in range(200):
            out = run_episode(OP, NEEDS, _entries(5, truth), 300, 3, i, EASY)
            assert out.reported == out.used


def test_noisy_reports_under_claim_used_entries_and_over_claim_top_ranked_unused_ones():
    useful, useless = Truth(frozenset({"tree_reduce"}), frozenset()), Truth(frozenset({"printf"}), frozenset())
    sim = NOISY.replace(p_adopt_irrelevant=0.0, position_slope=0.0, entries_decay=0.0)
    _, reported_of_used = _rates(sim.replace(p_adopt_useful=1.0), useful)
    assert all(abs(r - NOISY.report_used) < 0.04 for r in reported_of_used)
    _, over = _rates(sim, useless)
    assert abs(over[0] - NOISY.over_claim) < 0.03 and over[0] > 2 * over[4]


def test_use_falls_with_rank_and_with_the_number_of_entries_shown():
    assert use_probability(0.8, 1, 5, NOISY) > use_probability(0.8, 5, 5, NOISY) > use_probability(0.8, 15, 5, NOISY)
    assert use_probability(0.8, 1, 5, NOISY) > use_probability(0.8, 1, 17, NOISY)
    assert use_probability(0.8, 15, 17, NOISY) >= 0.8 * NOISY.position_floor * (1 - NOISY.entries_decay) ** 13 - 1e-12
    assert use_probability(0.8, 9, 30, EASY) == 0.8


def test_irrelevant_context_lowers_success_only_where_the_world_charges_for_it():
    assert success_probability(2, 4, 0, 0, NOISY, 2000) < success_probability(2, 4, 0, 0, NOISY, 0)
    assert success_probability(2, 4, 0, 0, NOISY, 2000) == pytest.approx(
        success_probability(2, 4, 0, 0, NOISY, 0) * math.exp(-NOISY.context_decay * 2)
    )
    assert success_probability(2, 4, 0, 0, EASY, 2000) == success_probability(2, 4, 0, 0, EASY, 0)


def test_half_of_a_pair_of_skills_is_worth_nothing_and_both_halves_count_twice():
    pair = frozenset({"a", "b"})
    assert effective({"a", "c"}, pair) == {"c"}
    assert effective({"a", "b", "c"}, pair) == {"a", "b", "c"}
    assert effective({"a"}, frozenset()) == {"a"}


def test_expected_success_with_a_pair_matches_a_monte_carlo_estimate():
    sit = Situation(frozenset({"a", "b", "c", "d"}), frozenset(), frozenset({"a", "b"}))
    exact = expected_success(frozenset({"a"}), sit, 0, 0, NOISY)
    rng, q, n = random.Random(5), NOISY.p_self_discover, 40000
    total = 0.0
    for _ in range(n):
        found = {"a"} | {s for s in "bcd" if rng.random() < q}
        total += success_probability(len(effective(found, sit.pair)), 4, 0, 0, NOISY)
    assert exact == pytest.approx(total / n, abs=0.005)


# ------------------------------------------------------------------ the world


def test_easy_world_has_none_of_the_harder_mechanisms():
    w = build_world(EASY, 0)
    assert not w.flipped and w.drift_episode is None
    assert all(not o.pair and o.harm is None for o in w.operators.values())
    assert len(w.starter) == len(build_world(EASY, 0).starter) and not any("notes for" in n.title for n, _ in w.starter)


def test_noisy_world_crowds_the_memory_with_lexically_similar_useless_notes():
    w = build_world(NOISY, 0)
    crowd = [(n, t) for n, t in w.starter if "notes for" in n.title]
    assert len(crowd) == NOISY.crowd_per_family * (NOISY.n_train_families + NOISY.n_heldout_families)
    op = next(iter(w.operators.values()))
    assert all(w.gain(t, o, 0) == 0 for _, t in crowd for o in w.operators_of(next(iter(t.families))))
    assert sum(1 for o in w.operators.values() if o.pair) > 0 and sum(1 for o in w.operators.values() if o.harm) > 0
    assert op.harm is None or op.harm not in op.needs


def test_drift_flips_a_needed_skill_into_harm_and_its_mirror_into_a_need():
    w = build_world(DRIFT, 0)
    assert len(w.flipped) == DRIFT.drift_skills and w.drift_episode == int(DRIFT.drift_at * DRIFT.train_episodes)
    s = w.flipped[0]
    op = next(o for o in w.operators.values() if s in o.needs)
    before, after = w.situation(op, w.drift_episode - 1), w.situation(op, w.drift_episode)
    assert s in before.needs and s not in after.needs and MIRROR[s] in after.needs
    assert s in after.harmful and MIRROR[s] not in after.harmful and MIRROR[s] in before.harmful
    item = Truth(frozenset({s}), frozenset({op.family}))
    assert w.gain(item, op, w.drift_episode - 1) == 1 and w.gain(item, op, w.drift_episode) == -1


def test_invalid_simulation_settings_are_rejected_with_the_knob_named():
    with pytest.raises(InvalidInput, match="p_adopt_useful"):
        SimConfig(p_adopt_useful=1.5)
    with pytest.raises(InvalidInput, match="retest_families"):
        SimConfig(n_train_families=2, retest_families=3)
    with pytest.raises(InvalidInput, match="over_claim"):
        SimConfig(over_claim=-0.1)


# ------------------------------------------------------------------ statistics


def test_ndcg_is_one_for_the_ideal_order_lower_for_a_worse_one_and_undefined_without_useful_items():
    assert ndcg([2, 1, 0], [0, 1, 2, 0], 3) == pytest.approx(1.0)
    assert ndcg([0, 1, 2], [0, 1, 2, 0], 3) < 1.0
    assert ndcg([0, 0], [0, 0, 0], 2) is None


def test_spearman_detects_monotone_agreement_and_reversal():
    assert spearman([1, 2, 3, 4], [10, 20, 25, 100]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) is None


def test_t_interval_matches_a_hand_computed_one():
    m = interval([1.0, 2.0, 3.0])
    half = 4.303 * 1.0 / math.sqrt(3)
    assert m["mean"] == pytest.approx(2.0) and m["lo"] == pytest.approx(2 - half) and m["hi"] == pytest.approx(2 + half)


def test_student_t_tail_and_quantile_match_tabulated_values():
    assert t_sf2(2.262157, 9) == pytest.approx(0.05, abs=1e-6)
    assert t_sf2(3.249836, 9) == pytest.approx(0.01, abs=1e-6)
    assert t_quantile(0.975, 2) == pytest.approx(4.302653, abs=1e-5)
    assert t_quantile(0.995, 29) == pytest.approx(2.756386, abs=1e-5)


def test_holm_adjusts_step_down_and_keeps_untestable_comparisons_out_of_the_family():
    adj = holm([0.01, 0.04, 0.03, None, 0.005])
    assert adj[3] is None and adj[4] == pytest.approx(0.02) and adj[0] == pytest.approx(0.03)
    assert adj[1] == pytest.approx(0.06) and adj[2] == pytest.approx(0.06)


def test_paired_test_widens_its_interval_with_the_size_of_the_family():
    a, b = [1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 1.0, 3.0]
    one, many = paired(a, b, 1), paired(a, b, 10)
    assert one["mean"] == pytest.approx(1.25) and one["p"] == pytest.approx(0.01539, abs=1e-4)
    assert many["lo_adj"] < one["lo_adj"] == pytest.approx(one["lo"]) and many["p"] == one["p"]
    assert paired([1.0, 1.0], [1.0, 1.0])["p"] == 1.0
