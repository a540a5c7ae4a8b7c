"""The input changes that keep verdicts honest (child side, pure torch):
large values drawn by the task's builder, a few values replaced, elements swapped before each timed call."""

from __future__ import annotations

import random

import pytest

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
    churn.plan(seed=7, calls=50)
    seen = set()
    for i in range(50):
        churn(i)
        seen.add(x.numpy().tobytes())
    assert torch.equal(x.sort().values, original.sort().values)  # a permutation: the same values
    assert len(seen) == 50  # no two calls saw the same input
    churn.plan(seed=8, calls=2, hold=True)
    before = x.clone()
    churn(0)
    assert torch.equal(x, before)
    churn(1)
    assert not torch.equal(x, before)
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


def test_the_spot_call_is_the_one_the_worker_drew_with_the_outputs_it_returned():
    spot = SpotCall(torch)
    spot.begin(4)
    for call in range(4):
        spot.keep(call, torch.full((3,), float(call)))
    for call in range(4):
        assert torch.equal(spot.chosen(call)[0], torch.full((3,), float(call)))
    assert spot.chosen(4) is None


def test_a_kernel_that_reuses_its_output_buffer_is_judged_on_what_each_call_left_there():
    """Each call's values are copied as it returns: a buffer written again
    by later calls still shows the drawn call its own values."""
    spot, buffer = SpotCall(torch), torch.zeros(3)
    spot.begin(4)
    for call in range(4):
        spot.keep(call, buffer.fill_(call))
    for call in range(4):
        assert torch.equal(spot.chosen(call)[0], torch.full((3,), float(call)))
        assert spot.chosen(call)[0] is not buffer


def test_outputs_too_large_to_keep_for_every_call_are_kept_for_the_last_calls(monkeypatch):
    from sage_engine.evaluation.child import spot as spot_module

    monkeypatch.setattr(spot_module, "SPOT_RING_BYTES", 2 * 3 * 4)  # two calls' outputs of three floats
    spot = SpotCall(torch)
    spot.begin(5)
    for call in range(5):
        spot.keep(call, torch.full((3,), float(call)))
    assert spot.slots == 2 and [c for c in range(5) if spot.chosen(c) is not None] == [3, 4]
    assert spot_module.ring_slots(1, 5) == 5 and spot_module.ring_slots(10**12, 5) == 1


def test_a_timed_output_that_is_not_a_plain_tensor_is_not_copied_but_named():
    class Lazy(torch.Tensor):
        pass

    spot = SpotCall(torch)
    spot.begin(1)
    spot.keep(0, torch.zeros(3).as_subclass(Lazy))
    assert spot.odd == "test_a_timed_output_that_is_not_a_plain_tensor_is_not_copied_but_named.<locals>.Lazy"
    assert spot.chosen(0) is None


def test_the_reference_repeats_the_candidates_swaps_from_the_batch_seed_alone():
    """Two processes' copies of the same inputs, swapped from the same seeds,
    stay equal call by call, on either form of the swaps: the reference
    judges a drawn call on its own copy, never on the candidate's."""
    x = torch.randn(257)
    y = torch.randint(0, 9, (4,), dtype=torch.int64).float()  # four elements: positions repeat within a call
    for tensors in ([x.clone(), y.clone()], [y.clone()]):
        mine = [t.clone() for t in tensors]
        theirs = [t.clone() for t in tensors]
        a, b = changes.Churn(torch, mine, swaps=3), changes.Churn(torch, theirs, swaps=3)
        b.host = [None] * len(b.host)  # the device form: indexed writes of the batch's positions
        for seed, calls, hold in ((1, 5, False), (2, 1, True), (3, 7, False)):
            a.plan(seed, calls, hold)
            b.plan(seed, calls, hold)
            for i in range(calls):
                a(i)
                b(i)
                assert all(torch.equal(m, t) for m, t in zip(mine, theirs))
        assert torch.equal(mine[-1].sort().values, tensors[-1].sort().values)


def test_a_switched_off_churn_in_the_candidates_process_leaves_the_references_copy_changed():
    x = torch.randn(64)
    theirs = x.clone()
    changes.Churn(torch, [theirs], swaps=2).run(seed=5, calls=4, hold=False)
    assert not torch.equal(x, theirs)  # what the reference judges on: the inputs the swaps made


def test_the_churn_leaves_in_place_what_the_task_set_by_hand():
    table = torch.randn(64, 32)
    table[0] = 1.0  # the task promises row 0 is ones
    index = torch.arange(64)
    churn = changes.Churn(torch, [table, index], swaps=8)
    churn.run(seed=7, calls=50, hold=False)
    assert torch.equal(table[0], torch.ones(32)), "row 0 moved"
    assert not torch.equal(table[1:], table[1:].sort(dim=0).values), "the other rows still move"
    moved_before = table.clone()
    churn.run(seed=8, calls=5, hold=False)
    assert not torch.equal(table, moved_before)


def test_random_float32_inputs_have_every_position_movable_and_narrow_floats_are_not_searched():
    assert changes.movable_positions(torch, torch.randn(256, 256)) is None
    assert changes.movable_positions(torch, torch.randn(256, 256, dtype=torch.bfloat16)) is None
    padded = torch.randn(20)
    padded[7:] = 0.0
    assert changes.movable_positions(torch, padded).tolist() == list(range(7))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_positions_held_are_those_whose_value_is_found_eight_times_or_more(dtype):
    # Values at the search's edges: seven and eight repeats, zeros of both
    # signs (equal as floats), NaNs (equal to nothing).
    gen = torch.Generator().manual_seed(3)
    t = torch.randn(4096, generator=gen, dtype=dtype)
    spots = torch.randperm(4096, generator=gen)
    t[spots[:7]] = 2.5  # seven: moves
    t[spots[7:15]] = -1.25  # eight: held
    t[spots[15:19]] = 0.0
    t[spots[19:23]] = -0.0  # with the 0.0s, eight zeros: held
    t[spots[23:40]] = float("nan")  # never equal: moves
    found = changes.movable_positions(torch, t)
    assert found is not None and len(found) == 4096 - 16
    held = set(range(4096)) - set(found.tolist())
    assert held == set(spots[7:15].tolist()) | set(spots[15:23].tolist())


def test_a_churn_made_like_another_on_the_same_values_takes_its_positions_without_a_search(monkeypatch):
    # The reference's own timed inputs and its copy of the candidate's hold the
    # same values: one search a side, as the candidate's process makes one.
    padded = torch.randn(20)
    padded[7:] = 0.0
    first = changes.Churn(torch, [padded.clone()], 2)
    searches: list[int] = []
    real = changes.movable_positions
    monkeypatch.setattr(changes, "movable_positions", lambda t, x: searches.append(x.numel()) or real(t, x))
    second = changes.Churn(torch, [padded.clone()], 2, like=first)
    assert searches == [] and second.movable[0].tolist() == list(range(7))
    # Inputs of another shape are searched.
    other = changes.Churn(torch, [torch.randn(30)], 2, like=first)
    assert searches == [30] and other.movable == [None]
