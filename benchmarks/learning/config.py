"""Every knob of the simulated world and agent, in one frozen dataclass.

The defaults were chosen from the description of the problem before any run
(the reason is beside each) and are not tuned to make one strategy win.
`SimConfig.quick()` and `SimConfig.tiny()` shrink only the stream lengths.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sage_engine.errors import InvalidInput


@dataclass(frozen=True)
class SimConfig:
    # --- the world ----------------------------------------------------------
    # Six families to learn on and two never seen in training: enough families
    # for the cross-family UGC gate (3 distinct operators) and for a transfer test.
    n_train_families: int = 6
    n_heldout_families: int = 2
    # Every operator needs the same number of skills, so the chance of a
    # memoryless agent is the same on every task and its curve is flat.
    needed_shared: int = 2  # drawn from the family's affine cross-family skills
    needed_family: int = 2  # drawn from the family's own skills
    shared_per_family: int = 3  # cross-family skills a family is affine to (of 6)
    # Starter memory per family: one item per family skill and per affine
    # shared skill (useful), plus misleading and irrelevant items that mention
    # the same operator words, so similarity alone cannot tell them apart.
    harmful_per_family: int = 3
    irrelevant_per_family: int = 3
    general_items: bool = True  # one family-less item per shared and misleading skill
    # Chance that the task text mentions the cue word of a needed skill
    # ("fp16 inputs", "odd tail"): a real task description hints at some needs.
    p_hint: float = 0.5
    p_distractor_hint: float = 0.5  # chance of a cue word of an unneeded skill

    # --- the stream -----------------------------------------------------------
    # Families arrive one block at a time (a team moving from operator family
    # to operator family); the first families are re-tested at the end.
    episodes_per_family: int = 40
    retest_families: int = 2
    retest_episodes: int = 20  # per re-tested family
    forget_window: int = 15  # last episodes of a block = "right after it was learned"
    heldout_episodes: int = 30  # per held-out family
    transfer_window: int = 10  # first episodes of a held-out family: transfer before in-family learning
    curve_window: int = 20  # episodes per point of the windowed learning curve

    # --- the simulated agent ---------------------------------------------------
    k: int = 5  # items asked for per task (the engine default)
    # Noisy adoption: an agent usually takes advice that fits its task, but not
    # always, and misleading advice is written to look plausible.
    p_adopt_useful: float = 0.8
    p_adopt_misleading: float = 0.3
    p_adopt_irrelevant: float = 0.15
    # Chance of finding a needed skill without memory in one episode.
    p_self_discover: float = 0.25
    # Success: p_base with no needed skill covered rising linearly to p_full
    # with all covered; each misleading skill adopted costs harm_penalty and
    # each irrelevant one (distraction, context) a little.
    p_base: float = 0.35
    p_full: float = 0.9
    harm_penalty: float = 0.2
    distraction_penalty: float = 0.02
    p_floor: float = 0.02
    p_ceiling: float = 0.98
    # Timing: the first correct kernel is naive (~1.3x slower than the
    # reference); each round applies one covered skill, a multiplicative gain.
    rounds: int = 6  # evaluations per episode at most
    first_kernel_ratio: float = 1.3  # T_first / T_ref, median
    first_kernel_sigma: float = 0.15  # log-normal spread of T_first
    skill_gain: float = 0.18  # a needed skill cuts time by 18%
    harm_slowdown: float = 0.10  # a misleading skill that did not break correctness costs 10%
    round_noise_sigma: float = 0.04  # timing noise per evaluation
    # Lessons: after a success the agent writes what it discovered by itself;
    # sometimes it credits the wrong thing (a misleading or irrelevant skill).
    p_lesson: float = 0.7
    p_wrong_lesson: float = 0.15

    # --- strategies -----------------------------------------------------------
    consolidate_every: int = 10  # closed episodes between UGC runs (engine default)

    def replace(self, **changes: Any) -> "SimConfig":
        return dataclasses.replace(self, **changes)

    def __post_init__(self) -> None:
        probs = ("p_hint", "p_distractor_hint", "p_adopt_useful", "p_adopt_misleading", "p_adopt_irrelevant",
                 "p_self_discover", "p_base", "p_full", "p_floor", "p_ceiling", "p_lesson", "p_wrong_lesson")
        for name in probs:
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise InvalidInput(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if not 1 <= self.n_train_families or self.n_heldout_families < 0:
            raise InvalidInput("need at least one training family and a non-negative number of held-out ones")
        if self.n_train_families + self.n_heldout_families > 10:
            raise InvalidInput("the catalogue has 10 families; n_train_families + n_heldout_families must be <= 10")
        if not 1 <= self.needed_shared <= self.shared_per_family <= 6:
            raise InvalidInput("need 1 <= needed_shared <= shared_per_family <= 6")
        if not 1 <= self.needed_family <= 3:
            raise InvalidInput("needed_family must lie in 1..3 (each family has 3 own skills)")
        if self.retest_families > self.n_train_families:
            raise InvalidInput("retest_families must not exceed n_train_families")
        if self.forget_window > self.episodes_per_family or self.forget_window < 1:
            raise InvalidInput("forget_window must lie in 1..episodes_per_family")
        if self.n_heldout_families and not 1 <= self.transfer_window <= self.heldout_episodes:
            raise InvalidInput("transfer_window must lie in 1..heldout_episodes")
        if self.rounds < 2 or self.k < 1 or self.curve_window < 1:
            raise InvalidInput("rounds must be >= 2, k and curve_window >= 1")
        if self.p_floor > self.p_ceiling:
            raise InvalidInput("p_floor must not exceed p_ceiling")

    @property
    def train_episodes(self) -> int:
        return self.n_train_families * self.episodes_per_family

    def quick(self) -> "SimConfig":
        """Half-length streams: a smoke run in well under a minute."""
        return self.replace(episodes_per_family=20, retest_episodes=10, forget_window=8, heldout_episodes=15,
                            transfer_window=8, curve_window=10)

    def tiny(self) -> "SimConfig":
        """The CI configuration: a few families, short blocks."""
        return self.replace(n_train_families=3, n_heldout_families=1, episodes_per_family=12, retest_families=1,
                            retest_episodes=6, forget_window=5, heldout_episodes=6, transfer_window=3,
                            curve_window=6)
