"""The input changes that keep verdicts honest (child side, pure torch):
large values drawn by the task's builder, a few values replaced, elements swapped before each timed call."""

from __future__ import annotations

import random

import torch

from sage_engine.evaluation.child import changes
from sage_engine.evaluation.child.spot import SpotCall
from sage_engine.evaluation.worker.timed import check_positions, churn_of


def _sorted_gather_inputs():
    torch.random.default_generator.manual_seed(7)
    table = torch.randn(8, 4)
    table[0] = 1.0  # what the task promises: row 0 is all ones
    index = (torch.rand(5) * 8).long().sort().values
    labels = torch.randint(0, 3, (5,)).float()
    noise = torch.empty(6).normal_()
    return [table, index, labels, noise, 4]


def test_large_values_scale_the_builders_draws_and_keep_what_it_sets_indices_and_masks():
    ordinary = _sorted_gather_inputs()
    with changes.scaled_draws(torch, 100.0) as count:
        drawn = _sorted_gather_inputs()
    out = changes.large_values(ordinary, drawn)
    assert out is not None and count == [3]  # randn, rand and normal_ (randint draws integers)
    assert torch.equal(out[0][0], torch.ones(4)) and torch.equal(out[0][1:], ordinary[0][1:] * 100.0)
    assert torch.equal(out[3], ordinary[3] * 100.0)
    # Integers and whole numbers come from the ordinary draw: indices made from a scaled draw would change.
    assert out[1] is ordinary[1] and out[2] is ordinary[2] and out[4] == 4
    # Closed, torch draws as before.
    assert torch.equal(_sorted_gather_inputs()[0], ordinary[0]) and "normal_" not in torch.Tensor.__dict__


def test_large_values_are_none_where_the_builder_draws_nothing_at_random():
    ones = [torch.ones(4), torch.arange(3)]
    with changes.scaled_draws(torch, 100.0) as count:
        drawn = [torch.ones(4), torch.arange(3)]
    assert changes.large_values(ones, drawn) is None and count == [0]


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


def test_the_spot_call_is_any_call_of_the_batch_alike():
    """Reservoir sampling over 4 calls, 4000 batches: each call kept about a
    quarter of the time (a count outside 800-1200 has odds under 1e-9 for a
    fair draw), with the outputs that call returned."""
    spot = SpotCall()
    kept = [0, 0, 0, 0]
    for _ in range(4000):
        spot.reset()
        for call in range(4):
            spot.offer(torch.full((3,), float(call)))
        chosen = spot.chosen()
        assert chosen is not None
        kept[chosen[0]] += 1
        assert torch.equal(chosen[1][0], torch.full((3,), float(chosen[0])))
    assert all(800 <= k <= 1200 for k in kept), kept


def test_a_kernel_that_reuses_its_output_buffer_is_judged_on_its_last_call():
    spot, buffer = SpotCall(), torch.zeros(3)
    for _ in range(50):
        spot.reset()
        for call in range(4):
            spot.offer(buffer.fill_(call), last=call == 3)
        assert spot.chosen()[0] == 3  # only the last call's values are still in the buffer
        assert spot.chosen()[1][0] is buffer


def test_rewinding_the_swaps_gives_the_inputs_of_each_call_and_redo_restores_them():
    x, y = torch.randn(64), torch.arange(10)
    churn = changes.Churn(torch, [x, y], swaps=3)
    churn.begin()
    seen = []
    for call in range(6):
        churn(call)
        seen.append(x.clone())
    final = x.clone()
    for call in range(6):
        redo = churn.rewind(call)
        assert torch.equal(x, seen[call])
        redo()
        assert torch.equal(x, final)


def test_the_device_form_of_the_swaps_rewinds_too_even_where_positions_collide():
    """The swaps a device tensor gets (indexing with positions drawn ahead),
    run here on a host tensor; a tensor of 4 elements makes positions that
    repeat within a call."""
    x = torch.randn(4)
    churn = changes.Churn(torch, [], swaps=3)
    churn.device = [(x, torch.randint(4, (changes.CHURN_POOL, 2), generator=torch.Generator().manual_seed(0)))]
    churn.begin()
    seen = []
    for call in range(8):
        churn(call)
        seen.append(x.clone())
    final = x.clone()
    for call in range(8):
        redo = churn.rewind(call)
        assert torch.equal(x, seen[call])
        redo()
        assert torch.equal(x, final)
