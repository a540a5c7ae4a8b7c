"""The simulated agent and kernel outcomes: the only simulated part.

Given the operator and what the engine showed (rulebook and retrieved items),
the agent adopts items noisily, covers the needed skills it adopted or found by
itself, succeeds with a probability that rises with coverage and falls with
misleading advice, then improves its first correct kernel one skill per round.
Every random draw comes from generators seeded by (seed, episode), in a fixed
order, so all strategies face the same luck on the same task (common random
numbers): differences between strategies come from memory, not from noise.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Sequence

from benchmarks.learning.catalogue import IRRELEVANT, MISLEADING
from benchmarks.learning.config import SimConfig
from benchmarks.learning.world import Operator, Truth, is_misleading

FAIL_STATUSES = ("incorrect", "compile_error", "runtime_error")


@dataclass(frozen=True)
class Shown:
    id: int
    truth: Truth
    resident: bool


@dataclass(frozen=True)
class Outcome:
    adopted: tuple[int, ...]
    covered_from_memory: frozenset[str]
    discovered: frozenset[str]
    n_misleading: int  # distinct misleading skills adopted
    n_irrelevant: int  # adopted items that carried nothing needed and nothing misleading
    p_success: float  # after this episode's self-discovery draws
    p_expected: float  # expectation over self-discovery, given what was adopted
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


def success_probability(covered: int, needed: int, n_misleading: int, n_irrelevant: int, sim: SimConfig) -> float:
    p = sim.p_base + (sim.p_full - sim.p_base) * covered / needed
    p -= sim.harm_penalty * n_misleading + sim.distraction_penalty * n_irrelevant
    return min(max(p, sim.p_floor), sim.p_ceiling)


def expected_success(from_memory: int, needed: int, n_misleading: int, n_irrelevant: int, sim: SimConfig) -> float:
    """Success probability averaged over which remaining skills the agent finds itself."""
    m = needed - from_memory
    q = sim.p_self_discover
    return sum(
        math.comb(m, j) * q**j * (1 - q) ** (m - j) * success_probability(from_memory + j, needed, n_misleading, n_irrelevant, sim)
        for j in range(m + 1)
    )


def run_episode(op: Operator, shown: Sequence[Shown], seed: int, index: int, sim: SimConfig) -> Outcome:
    draws = random.Random(f"agent:{seed}:{index}")
    u_success = draws.random()
    needs = sorted(op.needs)
    u_discover = {s: draws.random() for s in needs}
    first_noise = draws.gauss(0.0, 1.0)
    u_fail = [draws.random() for _ in range(2)]
    round_noise = [draws.gauss(0.0, 1.0) for _ in range(sim.rounds)]
    u_status = [draws.random() for _ in range(sim.rounds)]
    u_lesson, u_wrong, u_pick = draws.random(), draws.random(), draws.random()

    # Adoption: one draw per shown entry, in the order shown.
    adopt_rng = random.Random(f"adopt:{seed}:{index}")
    adopted: list[int] = []
    from_memory: set[str] = set()
    misleading: set[str] = set()
    n_irrelevant = 0
    for item in shown:
        fits = bool(item.truth.skills & op.needs)
        bad = any(is_misleading(s) for s in item.truth.skills)
        p = sim.p_adopt_useful if fits else sim.p_adopt_misleading if bad else sim.p_adopt_irrelevant
        if adopt_rng.random() < p:
            adopted.append(item.id)
            from_memory |= item.truth.skills & op.needs
            misleading |= {s for s in item.truth.skills if is_misleading(s)}
            n_irrelevant += not fits and not bad

    discovered = frozenset(s for s in needs if s not in from_memory and u_discover[s] < sim.p_self_discover)
    covered = from_memory | discovered
    p_now = success_probability(len(covered), len(needs), len(misleading), n_irrelevant, sim)
    p_exp = expected_success(len(from_memory), len(needs), len(misleading), n_irrelevant, sim)
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
            # Misattribution: credit something it adopted that did not help,
            # else a plausible-sounding trick it believes it used.
            wrong = sorted({s for i in shown if i.id in adopted for s in i.truth.skills if s not in op.needs})
            pool = wrong or [s.id for s in MISLEADING + IRRELEVANT]
            lesson = pool[int(u_pick * len(pool))]
        elif discovered:
            found = sorted(discovered)
            lesson = found[int(u_pick * len(found))]
    return Outcome(
        adopted=tuple(adopted), covered_from_memory=frozenset(from_memory), discovered=discovered,
        n_misleading=len(misleading), n_irrelevant=n_irrelevant, p_success=p_now, p_expected=p_exp,
        success=success, attempts=tuple(attempts), t_ref_ms=op.t_ref_ms, t_first_ms=t_first, t_best_ms=t_best,
        lesson_skill=lesson,
    )
