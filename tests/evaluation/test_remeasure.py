"""The fresh-input re-measurement's arithmetic (`worker/remeasure.py`); that
it catches kernels fast only on inputs they had seen is in test_cheats.py."""

from __future__ import annotations

import statistics

from sage_engine.evaluation.worker.remeasure import SAMPLE_BYTES, calls_per_sample, fastest, ratio, ratios, relative


def test_a_fresh_sample_has_as_many_calls_as_a_timed_one_while_its_bytes_fit():
    assert calls_per_sample(inner=20, input_bytes=1 << 20) == 20
    assert calls_per_sample(inner=20, input_bytes=SAMPLE_BYTES // 4) == 4
    assert calls_per_sample(inner=20, input_bytes=SAMPLE_BYTES * 8) == 1


def test_the_ratio_compares_samples_of_one_round_so_a_loaded_machine_spoils_one_round_at_most():
    churned = [1.0, 3.0, 1.1, 2.0, 1.0]
    assert ratio([1.05, 9.0, 1.1, 2.1, 1.0], churned) == 1.05  # one spike: one round
    assert ratio([5.0, 15.2, 5.1, 10.0, 5.0], churned) == 5.0  # a memo: every new input set is computed
    assert ratio([], churned) == 1.0 and ratio([1.0], [0.0]) == 1.0


def test_a_ratio_past_the_bound_needs_the_fastest_samples_past_it_too():
    # An honest kernel whose samples were preempted in most rounds (its fresh
    # sample, or the reference's churned one): past the bound by the median of rounds alone.
    honest = {
        ("candidate", "churned"): [1.0, 1.0, 1.1, 1.0, 1.0],
        ("candidate", "fresh"): [3.0, 2.9, 1.0, 3.1, 1.05],
        ("reference", "churned"): [1.0, 1.0, 3.0, 1.0, 1.0],
        ("reference", "fresh"): [1.0, 1.0, 1.0, 1.05, 1.0],
    }
    rounds = [relative(cf / cc, rf / rc) for cc, cf, rc, rf in zip(*honest.values())]
    assert statistics.median(rounds) > 2.0
    assert fastest(honest) == 1.0 and ratios(honest)[2] == 1.0
    # A memo: every fresh sample computes, the fastest too; past the bound by both.
    memo = {**honest, ("candidate", "fresh"): [5.0, 5.2, 5.1, 9.0, 5.0]}
    assert ratios(memo)[2] > 2.0
    assert fastest({}) == 1.0
