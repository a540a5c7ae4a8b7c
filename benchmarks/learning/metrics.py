"""Scoring: NDCG, Spearman, t intervals, per-run summaries and aggregation
over seeds. Pure functions over the traces the runner returns."""

from __future__ import annotations

import math
from typing import Any, Sequence

from benchmarks.learning.config import SimConfig

# Two-sided 95% Student t quantiles (t_0.975) for 1..30 degrees of freedom.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)

# name -> (description, lower bound, upper bound); None = unbounded.
METRICS: dict[str, tuple[str, float | None, float | None]] = {
    "success": ("success rate over the training stream", 0.0, 1.0),
    "success_late": ("success rate over the last quarter of training", 0.0, 1.0),
    "p_expected": ("expected success given what was adopted (less noisy than success)", 0.0, 1.0),
    "speedup": ("geometric mean speedup of the best kernel over the reference (correct episodes)", 0.0, None),
    "z": ("mean z = 1 - T_best/T_first over correct episodes", 0.0, 1.0),
    "ndcg": ("NDCG@k of retrieved items against true usefulness (training)", 0.0, 1.0),
    "fidelity": ("Spearman of learned utility with true usefulness, items shown at least once (end of training)", -1.0, 1.0),
    "context_precision": ("share of everything shown (rules and items) that carries a skill the task needs", 0.0, 1.0),
    "shown": ("entries shown per task (resident rules + retrieved items)", 0.0, None),
    "tokens": ("context tokens per task (RetrievalResult.tokens)", 0.0, None),
    "rulebook_precision": ("share of resident rules whose source items are all truly useful (end of training)", 0.0, 1.0),
    "rules": ("resident rules at the end of training", 0.0, None),
    "rule_relevance": ("share of resident rules shown to a task that carry a skill the task needs", 0.0, 1.0),
    "forgetting": ("success right after a family's block minus success when re-tested at the end", -1.0, 1.0),
    "transfer": ("success rate on held-out families", 0.0, 1.0),
    "transfer_early": ("success rate over the first episodes of each held-out family", 0.0, 1.0),
    "lessons_merged": ("share of written lessons the engine merged into an existing item (dedup)", 0.0, 1.0),
    "items": ("live memory items at the end (active + resident)", 0.0, None),
}


def t975(df: int) -> float:
    if df < 1:
        raise ValueError("a t interval needs at least two values")
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.4 / df


def interval(values: Sequence[float], bounds: tuple[float | None, float | None] = (None, None)) -> dict[str, float | int | None]:
    """Mean and 95% t interval, clipped to the metric's valid range; with one
    value the interval is that value."""
    xs = [float(v) for v in values if v is not None and not math.isnan(v)]
    n = len(xs)
    if n == 0:
        return {"mean": None, "lo": None, "hi": None, "n": 0}
    mean = sum(xs) / n
    if n == 1:
        return {"mean": mean, "lo": mean, "hi": mean, "n": 1}
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    lo, hi = mean - half, mean + half
    if bounds[0] is not None:
        lo = max(lo, bounds[0])
    if bounds[1] is not None:
        hi = min(hi, bounds[1])
    return {"mean": mean, "lo": lo, "hi": hi, "n": n}


def ndcg(gains: Sequence[float], pool: Sequence[float], k: int) -> float | None:
    """NDCG@k of `gains` (in the order shown) against the best k of `pool`;
    None where nothing in the pool is useful (the score is undefined)."""
    def dcg(xs: Sequence[float]) -> float:
        return sum(g / math.log2(i + 2) for i, g in enumerate(xs[:k]))

    ideal = dcg(sorted(pool, reverse=True))
    if ideal <= 0:
        return None
    return min(dcg(list(gains)) / ideal, 1.0)


def _ranks(xs: Sequence[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for m in range(i, j + 1):
            ranks[order[m]] = (i + j) / 2.0 + 1.0  # ties share their average rank
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    if len(a) != len(b):
        raise ValueError("spearman needs two sequences of the same length")
    if len(a) < 3:
        return None
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    if va == 0 or vb == 0:
        return None
    return max(-1.0, min(1.0, cov / math.sqrt(va * vb)))


def _mean(xs: Sequence[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def summarize(run: dict[str, Any], sim: SimConfig) -> dict[str, float | None]:
    """One number per metric for one (strategy, seed) run."""
    eps = run["episodes"]
    train = [e for e in eps if e["phase"] == "train"]
    late = train[len(train) - max(1, len(train) // 4):]
    correct = [e for e in train if e["success"]]
    held = [e for e in eps if e["phase"] == "heldout"]
    snap = run["snapshots"]["train_end"]
    forgetting = []
    for fam in dict.fromkeys(e["family"] for e in eps if e["phase"] == "retest"):
        block = [e["success"] for e in train if e["family"] == fam][-sim.forget_window:]
        again = [e["success"] for e in eps if e["phase"] == "retest" and e["family"] == fam]
        forgetting.append(_mean(block) - _mean(again))
    speedups = [e["speedup"] for e in correct if e["speedup"]]
    shown_rules = sum(e["residents"] for e in train)
    return {
        "success": _mean([e["success"] for e in train]),
        "success_late": _mean([e["success"] for e in late]),
        "p_expected": _mean([e["p_expected"] for e in train]),
        "speedup": math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None,
        "z": _mean([e["z"] for e in correct]),
        "ndcg": _mean([e["ndcg"] for e in train]),
        "fidelity": snap["fidelity"],
        "context_precision": _mean([e["shown_fit"] / e["shown"] for e in train if e["shown"]]),
        "shown": _mean([e["shown"] for e in train]),
        "tokens": _mean([e["tokens"] for e in train]),
        "rulebook_precision": snap["rulebook_precision"],
        "rules": snap["rules"],
        "rule_relevance": (sum(e["residents_fit"] for e in train) / shown_rules) if shown_rules else None,
        "forgetting": _mean(forgetting),
        "transfer": _mean([e["success"] for e in held]),
        "transfer_early": _mean([e["success"] for fam in dict.fromkeys(e["family"] for e in held)
                                 for e in [x for x in held if x["family"] == fam][: sim.transfer_window]]),
        "lessons_merged": _mean([float(e["lesson_merged"]) for e in eps if e["lesson_merged"] is not None]),
        "items": run["snapshots"]["run_end"]["items"],
    }


def curve(eps: list[dict[str, Any]], key: str, window: int) -> list[float | None]:
    """Mean of `key` over consecutive non-overlapping windows of the stream."""
    return [_mean([e[key] for e in eps[i:i + window]]) for i in range(0, len(eps), window)]


def aggregate(runs: list[dict[str, Any]], sim: SimConfig) -> dict[str, Any]:
    """Mean and 95% interval over seeds, per metric and per curve point."""
    summaries = [summarize(r, sim) for r in runs]
    out: dict[str, Any] = {
        "metrics": {m: interval([s[m] for s in summaries if s[m] is not None], METRICS[m][1:]) for m in METRICS},
        "per_seed": {m: [s[m] for s in summaries] for m in METRICS},
        "curves": {},
        "runtime_s": sum(r["runtime_s"] for r in runs),
        "cpu_s": sum(r["cpu_s"] for r in runs),
    }
    for key in ("success", "p_expected", "ndcg", "tokens"):
        per_seed = [curve(r["episodes"], key, sim.curve_window) for r in runs]
        points = [interval([c[i] for c in per_seed if c[i] is not None]) for i in range(len(per_seed[0]))]
        out["curves"][key] = {k: [p[k] for p in points] for k in ("mean", "lo", "hi")}
    return out


def paired(a: list[float | None], b: list[float | None]) -> dict[str, float | int | None]:
    """Interval of the per-seed difference a - b (same seeds, same luck)."""
    return interval([x - y for x, y in zip(a, b) if x is not None and y is not None])
