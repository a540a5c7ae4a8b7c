"""The fresh-input re-measurement's arithmetic (`worker/remeasure.py`); that
it catches kernels fast only on inputs they had seen is in test_cheats.py."""

from __future__ import annotations

from sage_engine.evaluation.worker.remeasure import SAMPLE_BYTES, calls_per_sample, ratio


def test_a_fresh_sample_has_as_many_calls_as_a_timed_one_while_its_bytes_fit():
    assert calls_per_sample(inner=20, input_bytes=1 << 20) == 20
    assert calls_per_sample(inner=20, input_bytes=SAMPLE_BYTES // 4) == 4
    assert calls_per_sample(inner=20, input_bytes=SAMPLE_BYTES * 8) == 1


def test_the_ratio_compares_samples_of_one_round_so_a_loaded_machine_spoils_one_round_at_most():
    churned = [1.0, 3.0, 1.1, 2.0, 1.0]
    assert ratio([1.05, 9.0, 1.1, 2.1, 1.0], churned) == 1.05  # one spike: one round
    assert ratio([5.0, 15.2, 5.1, 10.0, 5.0], churned) == 5.0  # a memo: every new input set is computed
    assert ratio([], churned) == 1.0 and ratio([1.0], [0.0]) == 1.0
