import math

import pytest

from sage_engine.config import Config
from sage_engine.memory.utility import (
    AttemptOutcome,
    credit_targets,
    episode_reward,
    learning_rate,
    lower_confidence_bound,
    step,
)


def test_an_episode_without_an_attempt_earns_no_reward_at_all():
    # Nothing was measured, so there is nothing to credit: not -delta.
    assert episode_reward([], Config()) is None
    assert episode_reward(iter([]), Config(reward_mode="paper")) is None


def test_episode_without_a_correct_kernel_earns_minus_delta():
    r, parts = episode_reward([AttemptOutcome(False), AttemptOutcome(False)], Config(delta=0.3))
    assert r == pytest.approx(-0.3) and parts == {"no_correct": -0.3}


def test_paper_reward_is_improvement_of_best_over_first_correct_kernel():
    attempts = [AttemptOutcome(False), AttemptOutcome(True, 4.0), AttemptOutcome(True, 1.0), AttemptOutcome(True, 2.0)]
    r, _ = episode_reward(attempts, Config(reward_mode="paper"))
    assert r == pytest.approx(1 - 1.0 / 4.0)


def test_sage_reward_adds_correctness_and_clipped_speedup_terms():
    cfg = Config(correct_bonus=0.2, speedup_weight=0.3)
    r, parts = episode_reward([AttemptOutcome(True, 2.0, 2.0), AttemptOutcome(True, 1.0, 4.0)], cfg)
    assert parts == pytest.approx({"correct": 0.2, "z": 0.5, "speedup": 0.3})  # log2(4) clipped to 1
    assert r == pytest.approx(1.0)
    slow, _ = episode_reward([AttemptOutcome(True, 1.0, 0.5)], cfg)
    assert slow == pytest.approx(0.2 - 0.3)


def test_a_deliberately_slow_first_kernel_earns_no_improvement_term():
    # A copy of the reference (1.0x) after a first kernel ten times slower
    # than the reference: the improvement is measured from the reference.
    cfg = Config(correct_bonus=0.2, speedup_weight=0.3)
    _, parts = episode_reward([AttemptOutcome(True, 10.0, 0.1), AttemptOutcome(True, 1.0, 1.0)], cfg)
    assert parts["z"] == pytest.approx(0.0)
    # Without a reference time nothing the agent does not control is there to measure from.
    _, untimed = episode_reward([AttemptOutcome(True, 10.0), AttemptOutcome(True, 1.0)], cfg)
    assert untimed["z"] == 0.0


def test_atu_sends_adopted_items_toward_reward_and_unused_toward_minus_beta():
    t = credit_targets([1, 2, 3], {1: 1.0}, 0.8, Config(beta=0.2))
    assert t == {1: (0.8, True), 2: (-0.2, False), 3: (-0.2, False)}


def test_uniform_credit_gives_every_shown_item_the_reward():
    t = credit_targets([1, 2, 3], {1: 1.0}, 0.8, Config(credit_strategy="uniform"))
    assert {k: v[0] for k, v in t.items()} == {1: 0.8, 2: 0.8, 3: 0.8}


def test_adopted_only_leaves_unused_items_untouched():
    t = credit_targets([1, 2, 3], {2: 0.5}, 0.8, Config(credit_strategy="adopted-only"))
    assert t == {2: (0.4, True)}


def test_split_share_divides_reward_by_adoption_weights():
    t = credit_targets([1, 2], {1: 1.0, 2: 1.0}, 0.8, Config(adopted_share="split"))
    assert t[1][0] == pytest.approx(0.4) and t[2][0] == pytest.approx(0.4)


def test_adoptions_of_items_never_shown_are_ignored_by_credit():
    assert 9 not in credit_targets([1], {1: 1.0, 9: 1.0}, 1.0, Config())


def test_learning_rate_decays_with_retrievals_but_not_below_eta_min():
    assert learning_rate(1, 0.05) == pytest.approx(0.5)
    assert learning_rate(1000, 0.05) == pytest.approx(0.05)
    assert step(0.0, 1.0, 0.25) == pytest.approx(0.25)


def test_lower_confidence_bound_is_undefined_below_two_credits_and_shrinks_with_spread():
    assert lower_confidence_bound(0.5, 1, 0.5, 0.25, 1.0) == -math.inf
    steady = lower_confidence_bound(0.5, 4, 2.0, 1.0, 1.0)  # four targets of 0.5
    noisy = lower_confidence_bound(0.5, 4, 2.0, 2.0, 1.0)
    assert steady == pytest.approx(0.5) and noisy < steady
