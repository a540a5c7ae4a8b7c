"""Every knob of the simulated world and agent, in one frozen dataclass, and
the named worlds the benchmark runs.

The defaults are the `easy` world, unchanged from the first version of the
benchmark. The harder worlds (`noisy`, `drift`) set the knobs below from
published measurements of LLM behaviour (sources beside each knob and in
docs/learning-benchmark.md); they were fixed before any strategy was run on
them and are not tuned to make one strategy win. `quick()` and `tiny()` shrink
only the stream lengths.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from sage_engine.config import Config
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
    # Crowding: per family, this many useless notes that reuse the words of
    # its useful items (skill phrase, cue, operator, family). A memory that
    # grows with every episode fills up with near-misses; 12 is two per useful
    # starter item, a structural choice (no published rate to copy).
    crowd_per_family: int = 0
    # Chance that the task text mentions the cue word of a needed skill
    # ("fp16 inputs", "odd tail"): a real task description hints at some needs.
    p_hint: float = 0.5
    p_distractor_hint: float = 0.5  # chance of a cue word of an unneeded skill
    # Non-additive outcomes: with this chance an operator's two needed skills
    # (one shared, one of its family) only pay together (tiling only helps with
    # the matching layout); alone, each is worth nothing.
    p_pair: float = 0.0
    # Operator-specific harm: with this chance the family skill an operator
    # does not need hurts it (a trick that helps layernorm breaks groupnorm).
    p_operator_harm: float = 0.0
    # Drift: this many cross-family skills flip at `drift_at` (a fraction of
    # the training stream): the skill turns harmful and its plausible mirror
    # (same cue word: double buffering <-> one buffer) becomes what is needed,
    # as after a toolchain or chip change. Flipped skills are drawn from the
    # skills of the family being trained at that point, so the drift lands in
    # the middle of a block whose items were just learned.
    drift_skills: int = 0
    drift_at: float = 0.6

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
    # Noisy use: an agent usually takes advice that fits its task, but not
    # always, and misleading advice is written to look plausible.
    p_adopt_useful: float = 0.8
    p_adopt_misleading: float = 0.3
    p_adopt_irrelevant: float = 0.15
    # Position bias of use (Liu et al. 2024, "Lost in the Middle", TACL 12:
    # with 20 passages GPT-3.5-Turbo answers 75% with the answer first and
    # about 53% with it in the middle, 0.71 of the first): the chance of using
    # an entry falls by `position_slope` per rank below the first (rules are
    # shown first, then items), down to `position_floor`. 1.0 / 0 = no bias.
    position_slope: float = 0.0
    position_floor: float = 1.0
    # Count effect (Levy, Mazor et al. 2025, "More Documents, Same Length",
    # EMNLP: at a fixed context length, more documents cost up to 20% of
    # multi-hop QA accuracy, going from the supporting few to about 20): each
    # entry shown beyond `entries_base` multiplies the chance of using any
    # entry by (1 - entries_decay); 0.8 ** (1 / 16) = 1 - 0.0139.
    entries_decay: float = 0.0
    entries_base: int = 4
    # Adoption reports, separated from use (Liu, Zhang and Liang 2023,
    # "Evaluating Verifiability in Generative Search Engines": 51.5% of
    # sentences fully supported by their citations, 74.5% of citations
    # support their sentence; Gao et al. 2023, ALCE: citation recall 50-75%).
    # A used entry is reported with `report_used` (under-claiming); an unused
    # one at rank r is reported with over_claim * r ** -over_claim_decay
    # (over-claiming, biased toward the top like clicks: Joachims et al. 2017,
    # examination propensity (1/r) ** eta with eta = 1).
    report_used: float = 1.0
    over_claim: float = 0.0
    over_claim_decay: float = 1.0
    # Adopted but misapplied: a used entry that carries a needed skill covers
    # nothing (RobustAPI, Zhong and Wang 2024: 62% of GPT-4's Java answers
    # misuse an API; a named trick is easier, so far less than that).
    p_misapply: float = 0.0
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
    # Cost of irrelevant context (Levy, Jacoby and Goldberg 2024, "Same Task,
    # More Tokens", ACL: reasoning accuracy 0.92 -> 0.68 when about 2,750
    # tokens of irrelevant padding are added): success is multiplied by
    # exp(-context_decay * irrelevant tokens / 1000); ln(0.92 / 0.68) / 2.75 = 0.11.
    # Irrelevant = shown entries that carry no skill the task needs.
    context_decay: float = 0.0
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
        probs = (
            "p_hint",
            "p_distractor_hint",
            "p_adopt_useful",
            "p_adopt_misleading",
            "p_adopt_irrelevant",
            "p_self_discover",
            "p_base",
            "p_full",
            "p_floor",
            "p_ceiling",
            "p_lesson",
            "p_wrong_lesson",
            "p_pair",
            "p_operator_harm",
            "position_slope",
            "position_floor",
            "entries_decay",
            "report_used",
            "over_claim",
            "p_misapply",
            "drift_at",
        )
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
        if not 0 <= self.drift_skills <= self.shared_per_family:
            raise InvalidInput("drift_skills must lie in 0..shared_per_family (flipped skills come from one family)")
        if self.crowd_per_family < 0 or self.entries_base < 0 or self.context_decay < 0 or self.over_claim_decay < 0:
            raise InvalidInput("crowd_per_family, entries_base, context_decay and over_claim_decay must be >= 0")

    @property
    def train_episodes(self) -> int:
        return self.n_train_families * self.episodes_per_family

    @property
    def drift_episode(self) -> int | None:
        """Index of the first episode after the drift; None without drift."""
        return int(self.drift_at * self.train_episodes) if self.drift_skills else None

    def quick(self) -> "SimConfig":
        """Half-length streams: a smoke run in well under a minute."""
        return self.replace(
            episodes_per_family=20, retest_episodes=10, forget_window=8, heldout_episodes=15, transfer_window=8, curve_window=10
        )

    def tiny(self) -> "SimConfig":
        """The CI configuration: a few families, short blocks."""
        return self.replace(
            n_train_families=3,
            n_heldout_families=1,
            episodes_per_family=12,
            retest_families=1,
            retest_episodes=6,
            forget_window=5,
            heldout_episodes=6,
            transfer_window=3,
            curve_window=6,
        )


EASY = SimConfig()

# The noisy world: every mechanism of the literature above, no drift.
NOISY = EASY.replace(
    crowd_per_family=12,
    p_pair=0.5,
    p_operator_harm=0.5,  # half the operators each: both regimes present in every family
    position_slope=0.032,
    position_floor=0.71,  # (1 - 0.71) / 9 ranks, Lost in the Middle
    entries_decay=round(1 - 0.8 ** (1 / 16), 4),
    entries_base=4,  # More Documents, Same Length
    report_used=0.7,
    over_claim=0.15,
    over_claim_decay=1.0,  # citation recall / precision, click propensity
    p_misapply=0.2,
    context_decay=round(math.log(0.92 / 0.68) / 2.75, 3),  # Same Task, More Tokens
)

# The drift world: the noisy world plus two cross-family skills that flip.
DRIFT = NOISY.replace(drift_skills=2, drift_at=0.6)

WORLDS: dict[str, SimConfig] = {"easy": EASY, "noisy": NOISY, "drift": DRIFT}

# One knob at a time around the noisy world: how each kind of report noise
# moves the arms that read adoption reports (and uniform credit, which does not).
SWEEP: dict[str, dict[str, float]] = {
    "noisy-over0": {"over_claim": 0.0},
    "noisy-over0.3": {"over_claim": 0.3},
    "noisy-over0.5": {"over_claim": 0.5},
    "noisy-report1": {"report_used": 1.0},
    "noisy-report0.5": {"report_used": 0.5},
    "noisy-misapply0": {"p_misapply": 0.0},
    "noisy-misapply0.4": {"p_misapply": 0.4},
}


def sweep_worlds() -> dict[str, SimConfig]:
    return {name: NOISY.replace(**changes) for name, changes in SWEEP.items()}


def engine_overrides(requested: dict[str, Any]) -> dict[str, Any]:
    """An arm's engine settings, checked against this engine's Config: a
    misspelt or vanished setting must stop the run, not quietly run the arm
    as another."""
    names = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(requested) - names)
    if unknown:
        raise InvalidInput(f"Config has no setting {', '.join(unknown)}; fix the arm's engine settings in runner.py")
    return dict(requested)
