"""Adoption-Traced Utility (ATU): the credit math, as pure functions.

An episode shows items R, the agent adopts A (a subset of R), the rest U = R - A
were shown and ignored. The episode earns a reward r from what the evaluation
measured; adopted items move toward their share of r, ignored items toward
-beta. An episode with no attempt measured nothing: it earns no reward and
credits nothing (browsing the memory must not teach it anything). The baselines `uniform` (MemRL/Memento: every shown item gets r) and
`adopted-only` (ignored items untouched) are selectable for ablation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from sage_engine.config import Config

RULE_VERSION = "atu-1"


@dataclass(frozen=True)
class AttemptOutcome:
    correct: bool
    candidate_ms: float | None = None
    speedup: float | None = None  # vs the reference; None where the backend measured none


def episode_reward(attempts: Iterable[AttemptOutcome], config: Config) -> tuple[float, dict[str, float]] | None:
    """Reward of one episode and its parts; None without an attempt (no
    evidence about what the episode showed, so no credit).

    paper: r = z = 1 - T_best / T_first over correct attempts, or -delta.
    sage:  r = correct_bonus + z + speedup_weight * clip(log2(S_best), -c, c),
           where S_best is the best kernel's speedup over the reference (the
           term is dropped when no backend measured one), or -delta; and
           z = max(0, 1 - T_best / min(T_first, T_ref)): the improvement is
           measured from no slower than the reference, which the agent does
           not control, so a deliberately slow first kernel earns nothing
           (z = 0 where no reference time was measured).
    """
    attempts = list(attempts)
    if not attempts:
        return None
    correct = [a for a in attempts if a.correct]
    if not correct:
        return -config.delta, {"no_correct": -config.delta}
    # (time, speedup) of each correct attempt that was timed, in order.
    timed = [(a.candidate_ms, a.speedup) for a in correct if a.candidate_ms is not None and a.candidate_ms > 0]
    best = min((ms for ms, _ in timed), default=0.0)
    if config.reward_mode == "paper":
        z = 1.0 - best / timed[0][0] if timed else 0.0
        return z, {"z": z}
    # The reference's median in the same evaluation: candidate time x speedup.
    references = [ms * speedup for ms, speedup in timed if speedup is not None and speedup > 0]
    z = max(0.0, 1.0 - best / min(timed[0][0], *references)) if references else 0.0
    parts = {"correct": config.correct_bonus, "z": z}
    speedups = [a.speedup for a in correct if a.speedup and a.speedup > 0]
    if speedups:
        clip = config.speedup_clip
        parts["speedup"] = config.speedup_weight * max(-clip, min(clip, math.log2(max(speedups))))
    return sum(parts.values()), parts


def credit_targets(
    shown: Iterable[int],
    adopted: Mapping[int, float],
    reward: float,
    config: Config,
    not_applicable: Iterable[int] = (),
) -> dict[int, tuple[float, bool]]:
    """Target utility for each shown item: {item_id: (target, adopted)}.

    `adopted` maps item id to its adoption weight in (0, 1]. Items missing from
    the result are not updated (adopted-only leaves ignored items alone; ATU
    leaves alone unadopted items in `not_applicable`, resident rules that did
    not match the task).
    """
    skip = set(not_applicable)
    shown = list(dict.fromkeys(shown))
    weights = {i: w for i, w in adopted.items() if i in set(shown)}
    total = sum(weights.values()) or 1.0
    out: dict[int, tuple[float, bool]] = {}
    for item in shown:
        is_adopted = item in weights
        if config.credit_strategy == "uniform":
            out[item] = (reward, is_adopted)
        elif is_adopted:
            share = weights[item] / total if config.adopted_share == "split" else weights[item]
            out[item] = (reward * share, True)
        elif config.credit_strategy == "atu" and item not in skip:
            out[item] = (-config.beta, False)
    return out


def learning_rate(n_retrieved: int, eta_min: float, form: str = "harmonic") -> float:
    """harmonic: eta = max(1 / (1 + n), eta_min), fast for new items, never
    frozen; constant: eta_min, the same pace whatever the history."""
    if form == "constant":
        return eta_min
    return max(1.0 / (1.0 + max(n_retrieved, 0)), eta_min)


def step(utility: float, target: float, eta: float) -> float:
    return (1.0 - eta) * utility + eta * target


def adoption_ema(p: float, adopted: bool, mu: float) -> float:
    return (1.0 - mu) * p + mu * (1.0 if adopted else 0.0)


def lower_confidence_bound(utility: float, n: int, target_sum: float, target_sq: float, z: float, min_count: int = 2) -> float:
    """utility minus z standard errors of the credited targets; with fewer
    than `min_count` (at least two) credits the spread is unknown, so the
    bound is taken as -inf."""
    if n < max(2, min_count):
        return -math.inf
    mean = target_sum / n
    var = max(target_sq / n - mean * mean, 0.0) * n / (n - 1)
    return utility - z * math.sqrt(var / n)
