"""The learning benchmark on a tiny stream: it runs end to end through the
real Engine, writes its outputs, and its numbers obey what any correct
implementation must (ranges, a memoryless baseline that cannot learn,
determinism, ATU ranking no worse than uniform credit for a reliable agent)."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.learning.agent import expected_success
from benchmarks.learning.bench import collect
from benchmarks.learning.config import SimConfig
from benchmarks.learning.metrics import METRICS, interval, ndcg, spearman, summarize
from benchmarks.learning.report import write
from benchmarks.learning.runner import run, strategy_names
from sage_engine.errors import InvalidInput

TINY = SimConfig().tiny()
SEEDS = (0, 1)


@pytest.fixture(scope="module")
def runs():
    return {(name, seed): run(name, seed, TINY) for name in strategy_names() for seed in SEEDS}


@pytest.fixture(scope="module")
def results(runs):
    return collect(list(runs.values()), TINY)


@pytest.mark.slow  # shares one ~10 s set of tiny runs through the real engine
def test_benchmark_writes_json_table_and_plots_with_every_strategy_and_metric(results, tmp_path):
    paths = write(results, tmp_path)
    assert {p.name for p in paths} == {"results.json", "results.md", "learning_curve.png", "summary.png"}
    for p in paths:
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((tmp_path / "results.json").read_text())
    assert list(data["strategies"]) == strategy_names()
    for name, res in data["strategies"].items():
        assert set(res["metrics"]) == set(METRICS), name
        assert all(set(m) == {"mean", "lo", "hi", "n"} for m in res["metrics"].values())
        assert set(res["curves"]) == {"success", "p_expected", "ndcg", "tokens"}
    table = (tmp_path / "results.md").read_text()
    assert all(f"| {name} |" in table for name in strategy_names())


@pytest.mark.slow  # shares one ~10 s set of tiny runs through the real engine
def test_every_metric_lies_in_its_valid_range(results):
    for name, res in results["strategies"].items():
        for metric, (_, lo, hi) in METRICS.items():
            for value in res["per_seed"][metric]:
                if value is None:
                    continue
                assert lo is None or value >= lo - 1e-9, (name, metric, value)
                assert hi is None or value <= hi + 1e-9, (name, metric, value)
            m = res["metrics"][metric]
            if m["mean"] is not None:
                assert m["lo"] <= m["mean"] + 1e-12 and m["mean"] <= m["hi"] + 1e-12


@pytest.mark.slow  # shares one ~10 s set of tiny runs through the real engine
def test_metrics_that_need_memory_are_undefined_without_it_and_defined_with_it(results):
    s = results["strategies"]
    assert s["no-memory"]["metrics"]["ndcg"]["mean"] is None and s["no-memory"]["metrics"]["tokens"]["mean"] == 0
    for name in strategy_names()[1:]:
        assert s[name]["metrics"]["ndcg"]["n"] == len(SEEDS) and s[name]["metrics"]["tokens"]["mean"] > 0


@pytest.mark.slow  # shares one ~10 s set of tiny runs through the real engine
def test_no_memory_agent_sees_nothing_so_its_expected_success_is_the_same_on_every_task(runs):
    r = runs[("no-memory", 0)]
    flat = expected_success(0, TINY.needed_shared + TINY.needed_family, 0, 0, TINY)
    assert all(e["shown"] == 0 and e["tokens"] == 0 and e["adopted"] == 0 for e in r["episodes"])
    assert all(e["p_expected"] == pytest.approx(flat) for e in r["episodes"])


@pytest.mark.slow  # shares one ~10 s set of tiny runs through the real engine
def test_only_the_ugc_strategy_consolidates_and_only_it_shows_resident_rules(runs):
    for (name, _), r in runs.items():
        snap = r["snapshots"]["run_end"]
        if name == "atu+ugc":
            assert snap["consolidations"] == len(r["episodes"]) // TINY.consolidate_every
        else:
            assert snap["consolidations"] == 0 and snap["rules"] == 0
            assert all(e["residents"] == 0 for e in r["episodes"])


@pytest.mark.slow  # shares one ~10 s set of tiny runs through the real engine
def test_same_seed_and_strategy_reproduce_the_same_run(runs):
    assert run("atu+ugc", 0, TINY)["episodes"] == runs[("atu+ugc", 0)]["episodes"]


@pytest.mark.slow  # shares one ~10 s set of tiny runs through the real engine
def test_with_a_perfectly_reliable_adopter_atu_ranks_no_worse_than_uniform_credit():
    sim = TINY.replace(p_adopt_useful=1.0, p_adopt_misleading=0.0, p_adopt_irrelevant=0.0, p_wrong_lesson=0.0,
                       first_kernel_sigma=0.0, round_noise_sigma=0.0)
    atu = [summarize(run("atu", seed, sim), sim)["ndcg"] for seed in SEEDS]
    uniform = [summarize(run("uniform", seed, sim), sim)["ndcg"] for seed in SEEDS]
    assert sum(atu) / len(atu) >= sum(uniform) / len(uniform)


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


def test_invalid_simulation_settings_are_rejected_with_the_knob_named():
    with pytest.raises(InvalidInput, match="p_adopt_useful"):
        SimConfig(p_adopt_useful=1.5)
    with pytest.raises(InvalidInput, match="retest_families"):
        SimConfig(n_train_families=2, retest_families=3)
