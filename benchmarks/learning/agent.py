"""The simulated agent and kernel outcomes: the only simulated part.

Given the operator, what is true for it now, and what the engine showed
(rulebook and retrieved items, in that order), the agent uses some entries
(less often lower down and in longer contexts), covers the needed skills it
used or found by itself, succeeds with a probability that rises with coverage
and falls with harmful advice and irrelevant context, then improves its first
correct kernel one skill per round. What it *reports* having adopted is a
noisy copy of what it used (under- and over-claiming). Every random draw comes
from generators seeded by (seed, episode), in a fixed order, so all strategies
face the same luck on the same task (common random numbers): differences
between strategies come from memory, not from noise.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from itertools import combinations
from typing import Sequence

from benchmarks.learning.catalogue import IRRELEVANT, MISLEADING, SHARED
from benchmarks.learning.config import SimConfig
from benchmarks.learning.world import Operator, Situation, Truth

FAIL_STATUSES = ("incorrect", "compile_error", "runtime_error")
_CATALOGUE_ORDER = [s.id for s in SHARED + MISLEADING + IRRELEVANT]
_IRRELEVANT_IDS = frozenset(s.id for s in IRRELEVANT)


@dataclass(frozen=True)
class Shown:
    id: int
    truth: Truth
    resident: bool
    chars: int = 0  # length of the entry's text, to split the context's tokens


@dataclass(frozen=True)
class Outcome:
    used: tuple[int, ...]  # entries the agent really applied
    reported: tuple[int, ...]  # entries it says it adopted (what the engine is told)
    misapplied: int  # used entries with a needed skill that covered nothing
    covered_from_memory: frozenset[str]
    discovered: frozenset[str]
    n_misleading: int  # distinct harmful skills used
    n_irrelevant: int  # used entries that carried nothing needed and nothing harmful, or were misapplied
    irrelevant_tokens: float  # context tokens of entries that carry no needed skill
    p_success: float  # after this episode's self-discovery draws
    p_expected: float  # expectation over self-discovery, given what was used
    success: bool
    attempts: tuple[tuple[str, float | None], ...]  # (status, candidate ms)
    t_ref_ms: float
    t_first_ms: float | None
    t_best_ms: float | None
    lesson_skill: str | None

    @property
    def speedup(self) -> float | None:
        return self.t_ref_ms / self.t_best_ms if self.t_best_ms else None

    @property
    def z(self) -> float | None:
        return 1.0 - self.t_best_ms / self.t_first_ms if self.t_best_ms and self.t_first_ms else None


def effective(covered: frozenset[str] | set[str], pair: frozenset[str]) -> frozenset[str]:
    """Covered skills that pay off: half of a pair alone is worth nothing."""
    covered = frozenset(covered)
    return covered if not pair or pair <= covered else covered - pair


def context_factor(irrelevant_tokens: float, sim: SimConfig) -> float:
    return math.exp(-sim.context_decay * irrelevant_tokens / 1000.0)


def success_probability(
    covered: int, needed: int, n_misleading: int, n_irrelevant: int, sim: SimConfig, irrelevant_tokens: float = 0.0
) -> float:
    p = sim.p_base + (sim.p_full - sim.p_base) * covered / needed
    p -= sim.harm_penalty * n_misleading + sim.distraction_penalty * n_irrelevant
    p *= context_factor(irrelevant_tokens, sim)
    return min(max(p, sim.p_floor), sim.p_ceiling)


def expected_success(
    from_memory: int | frozenset[str],
    needed: int | Situation,
    n_misleading: int,
    n_irrelevant: int,
    sim: SimConfig,
    irrelevant_tokens: float = 0.0,
) -> float:
    """Success probability averaged over which remaining skills the agent
    finds itself. Counts suffice without pairs; with a situation, the covered
    set matters (a pair pays only when both halves are found)."""
    q = sim.p_self_discover
    if isinstance(needed, int):
        m = needed - from_memory
        return sum(
            math.comb(m, j)
            * q**j
            * (1 - q) ** (m - j)
            * success_probability(from_memory + j, needed, n_misleading, n_irrelevant, sim, irrelevant_tokens)
            for j in range(m + 1)
        )
    situation, have = needed, frozenset(from_memory)
    rest = sorted(situation.needs - have)
    total = 0.0
    for j in range(len(rest) + 1):
        for found in combinations(rest, j):
            eff = effective(have | set(found), situation.pair)
            total += (
                q**j
                * (1 - q) ** (len(rest) - j)
                * success_probability(len(eff), len(situation.needs), n_misleading, n_irrelevant, sim, irrelevant_tokens)
            )
    return total


def use_probability(base: float, rank: int, n_shown: int, sim: SimConfig) -> float:
    """Chance of using an entry: its kind's base rate, less lower down the
    context and in a longer one."""
    position = max(sim.position_floor, 1.0 - sim.position_slope * (rank - 1))
    crowding = (1.0 - sim.entries_decay) ** max(0, n_shown - sim.entries_base)
    return base * position * crowding


def run_episode(
    op: Operator, situation: Situation, shown: Sequence[Shown], context_tokens: int, seed: int, index: int, sim: SimConfig
) -> Outcome:
    needs_set, harmful = situation.needs, situation.harmful
    draws = random.Random(f"agent:{seed}:{index}")
    u_success = draws.random()
    needs = sorted(needs_set)
    u_discover = {s: draws.random() for s in needs}
    first_noise = draws.gauss(0.0, 1.0)
    u_fail = [draws.random() for _ in range(2)]
    round_noise = [draws.gauss(0.0, 1.0) for _ in range(sim.rounds)]
    u_status = [draws.random() for _ in range(sim.rounds)]
    u_lesson, u_wrong, u_pick = draws.random(), draws.random(), draws.random()

    # Use: one draw per shown entry, in the order shown. Reports and
    # misapplication draw from their own generator, two draws per entry, so
    # the easy world (no report noise) makes exactly the draws it always made.
    adopt_rng = random.Random(f"adopt:{seed}:{index}")
    report_rng = random.Random(f"report:{seed}:{index}")
    used: list[int] = []
    reported: list[int] = []
    misapplied = 0
    from_memory: set[str] = set()
    misleading: set[str] = set()
    n_irrelevant = 0
    chars_all = sum(s.chars for s in shown) or 1
    irrelevant_chars = 0
    for rank, item in enumerate(shown, 1):
        fits = bool(item.truth.skills & needs_set)
        bad = bool(item.truth.skills & harmful)
        irrelevant_chars += 0 if fits else item.chars
        base = sim.p_adopt_useful if fits else sim.p_adopt_misleading if bad else sim.p_adopt_irrelevant
        is_used = adopt_rng.random() < use_probability(base, rank, len(shown), sim)
        u_misapply, u_report = report_rng.random(), report_rng.random()
        if is_used:
            used.append(item.id)
            wasted = fits and u_misapply < sim.p_misapply
            misapplied += wasted
            if not wasted:
                from_memory |= item.truth.skills & needs_set
            misleading |= item.truth.skills & harmful
            n_irrelevant += (not fits and not bad) or wasted
            if u_report < sim.report_used:
                reported.append(item.id)
        elif u_report < sim.over_claim * rank**-sim.over_claim_decay:
            reported.append(item.id)
    irrelevant_tokens = context_tokens * irrelevant_chars / chars_all

    discovered = frozenset(s for s in needs if s not in from_memory and u_discover[s] < sim.p_self_discover)
    covered = effective(from_memory | discovered, situation.pair)
    p_now = success_probability(len(covered), len(needs), len(misleading), n_irrelevant, sim, irrelevant_tokens)
    if situation.pair:
        p_exp = expected_success(frozenset(from_memory), situation, len(misleading), n_irrelevant, sim, irrelevant_tokens)
    else:
        p_exp = expected_success(len(from_memory), len(needs), len(misleading), n_irrelevant, sim, irrelevant_tokens)
    success = u_success < p_now

    attempts: list[tuple[str, float | None]] = []
    t_first = t_best = None
    if not success:
        attempts = [(FAIL_STATUSES[int(u * len(FAIL_STATUSES))], None) for u in u_status]
    else:
        for u in u_fail:  # a few wrong kernels before the first correct one, likelier when p is low
            if u >= 1.0 - p_now:
                break
            attempts.append((FAIL_STATUSES[int(u_status[len(attempts)] * len(FAIL_STATUSES))], None))
        t = op.t_ref_ms * sim.first_kernel_ratio * math.exp(sim.first_kernel_sigma * first_noise)
        t_first = t
        attempts.append(("correct", t))
        steps = [("gain", s) for s in sorted(covered)] + [("harm", s) for s in sorted(misleading)]
        random.Random(f"order:{seed}:{index}").shuffle(steps)
        for kind, _ in steps[: sim.rounds - len(attempts)]:
            t *= (1.0 - sim.skill_gain) if kind == "gain" else (1.0 + sim.harm_slowdown)
            t *= math.exp(sim.round_noise_sigma * round_noise[len(attempts)])
            attempts.append(("correct", t))
        t_best = min(ms for status, ms in attempts if status == "correct" and ms)

    lesson = None
    if success and u_lesson < sim.p_lesson:
        if u_wrong < sim.p_wrong_lesson:
            # Misattribution: credit something it used that did not help,
            # else a plausible-sounding trick it believes it used.
            wrong = sorted({s for i in shown if i.id in used for s in i.truth.skills if s not in needs_set})
            pool = wrong or [s for s in _CATALOGUE_ORDER if s in harmful or s in _IRRELEVANT_IDS]
            lesson = pool[int(u_pick * len(pool))]
        elif discovered:
            found = sorted(discovered)
            lesson = found[int(u_pick * len(found))]
    return Outcome(
        used=tuple(used),
        reported=tuple(reported),
        misapplied=misapplied,
        covered_from_memory=frozenset(from_memory),
        discovered=discovered,
        n_misleading=len(misleading),
        n_irrelevant=n_irrelevant,
        irrelevant_tokens=irrelevant_tokens,
        p_success=p_now,
        p_expected=p_exp,
        success=success,
        attempts=tuple(attempts),
        t_ref_ms=op.t_ref_ms,
        t_first_ms=t_first,
        t_best_ms=t_best,
        lesson_skill=lesson,
    )
