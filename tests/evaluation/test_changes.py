"""The input changes that keep verdicts honest (child side, pure torch):
scaled inputs, a few values replaced, elements swapped before each timed call."""

from __future__ import annotations

import random

import torch

from sage_engine.evaluation.child import changes
from sage_engine.evaluation.worker.timed import check_positions, churn_of


def test_large_values_scale_measurements_and_leave_indices_and_masks_alone():
    x, idx, mask = torch.randn(8), torch.tensor([0.0, 3.0, 5.0]), torch.tensor([1.0, 0.0, 1.0])
    out = changes.scaled([x, idx, mask, 4], 100.0)
    assert torch.equal(out[0], x * 100.0) and out[1] is idx and out[2] is mask and out[3] == 4


def test_a_stale_check_changes_exactly_a_few_values_of_each_floating_input():
    a, b, n = torch.randn(64, 64), torch.randn(64, 64), torch.arange(10)
    other = [torch.randn(64, 64), torch.randn(64, 64), torch.arange(10) + 1]
    out = changes.with_changes([a, b, n], other, 2, random.Random(0))
    for before, after in zip((a, b), out[:2]):
        assert 1 <= int((before != after).sum()) <= 2 and after is not before
    assert out[2] is n  # integers stay where a floating input changed
    ints_only = changes.with_changes([n], [n + 1], 2, random.Random(0))
    assert 1 <= int((ints_only[0] != n).sum()) <= 2


def test_the_churn_keeps_every_value_changes_positions_and_can_hold_one_call():
    x = torch.randn(1000)
    original = x.clone()
    churn = changes.Churn(torch, [x, torch.arange(5)], swaps=2)
    assert churn.active
    seen = set()
    for i in range(50):
        churn(i)
        seen.add(x.numpy().tobytes())
    assert torch.equal(x.sort().values, original.sort().values)  # a permutation: the same values
    assert len(seen) == 50  # no two calls saw the same input
    churn.hold()
    before = x.clone()
    churn(50)
    assert torch.equal(x, before)
    assert not changes.Churn(torch, [torch.randn(1000)], swaps=0).active


def test_checked_samples_come_in_pairs_within_the_minimum_repetitions():
    for _ in range(50):
        at = check_positions(10, 2)
        assert sorted(at.values()) == ["fresh", "fresh", "stale", "stale"]
        assert all(at[p + 1] == "stale" for p, kind in at.items() if kind == "fresh") and max(at) < 10
    assert list(check_positions(1, 2).values()) == ["fresh"]
    # Five samples hold two pairs only as fresh, stale, plain, fresh, stale: every draw finds it.
    assert all(check_positions(5, 2) == {0: "fresh", 1: "stale", 3: "fresh", 4: "stale"} for _ in range(50))
    assert sorted(check_positions(4, 2).values()) == ["fresh", "stale"]
    assert churn_of("ok 0.001 churn 2.5e-06") == 2.5e-06 and churn_of("ok 0.001") == 0.0
