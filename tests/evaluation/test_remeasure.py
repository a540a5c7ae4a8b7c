"""The fresh-input re-measurement's arithmetic (`worker/remeasure.py`); that
it catches kernels fast only on inputs they had seen is in test_cheats.py."""

from __future__ import annotations

from sage_engine.evaluation.worker.remeasure import SAMPLE_BYTES, calls_per_sample, ratio


def test_a_fresh_sample_has_as_many_calls_as_a_timed_one_while_its_bytes_fit():
    assert calls_per_sample(inner=20, input_bytes=1 << 20) == 20
    assert calls_per_sample(inner=20, input_bytes=SAMPLE_BYTES // 4) == 4
    assert calls_per_sample(inner=20, input_bytes=SAMPLE_BYTES * 8) == 1


def test_the_ratio_compares_the_fastest_samples_so_a_loaded_machine_only_adds_noise():
    churned = [1.0, 3.2, 1.1, 2.9, 1.05]
    assert ratio([1.02, 1.5, 4.0, 1.1, 2.2], churned) == 1.02
    assert ratio([5.0, 5.2, 5.1], churned) == 5.0  # a memo: every new input set is computed
    assert ratio([], churned) == 1.0 and ratio([1.0], [0.0]) == 1.0
