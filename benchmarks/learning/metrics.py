"""Scoring: NDCG, Spearman, t intervals, per-run summaries and aggregation
over seeds. Pure functions over the traces the runner returns."""

from __future__ import annotations

import math
from typing import Any, Sequence

from benchmarks.learning.config import SimConfig

# Two-sided 95% Student t quantiles (t_0.975) for 1..30 degrees of freedom.
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)

# name -> (description, lower bound, upper bound); None = unbounded.
METRICS: dict[str, tuple[str, float | None, float | None]] = {
    "success": ("success rate over the training stream", 0.0, 1.0),
    "success_late": ("success rate over the last quarter of training", 0.0, 1.0),
    "p_expected": ("expected success given what was used (less noisy than success)", 0.0, 1.0),
    "fast_0.8": ("share of training episodes with a correct kernel faster than 0.8x the reference (failures count as 0)", 0.0, 1.0),
    "fast_1.0": ("share of training episodes with a correct kernel faster than the reference (failures count as 0)", 0.0, 1.0),
    "fast_1.2": ("share of training episodes with a correct kernel faster than 1.2x the reference (failures count as 0)", 0.0, 1.0),
    "speedup": ("geometric mean speedup of the best kernel over the reference (correct episodes)", 0.0, None),
    "z": ("mean z = 1 - T_best/T_first over correct episodes", 0.0, 1.0),
    "success_per_1k": ("training success rate per 1,000 context tokens per task", 0.0, None),
    "ndcg": ("NDCG@k of the retrieved items against the best k live items (training)", 0.0, 1.0),
    "ndcg_ctx": ("NDCG of the whole context (rules, then items) against the best context of the same length (training)", 0.0, 1.0),
    "fidelity": ("Spearman of learned utility with true usefulness, items shown at least once (end of training)", -1.0, 1.0),
    "context_precision": ("share of everything shown (rules and items) that carries a skill the task needs", 0.0, 1.0),
    "shown": ("entries shown per task (resident rules + retrieved items)", 0.0, None),
    "tokens": ("context tokens per task (RetrievalResult.tokens)", 0.0, None),
    "report_precision": ("share of reported adoptions the agent really used (a property of the world)", 0.0, 1.0),
    "report_recall": ("share of used entries the agent reported (a property of the world)", 0.0, 1.0),
    "rulebook_precision": ("share of resident rules whose source items are all truly useful (end of training)", 0.0, 1.0),
    "rules": ("resident rules at the end of training", 0.0, None),
    "rule_relevance": ("share of resident rules shown to a task that carry a skill the task needs", 0.0, 1.0),
    "success_post_drift": ("success rate over the training episodes after the drift", 0.0, 1.0),
    "stale_exit": ("episodes from the drift until a stale entry (shown just before it) was last shown in training", 0.0, None),
    "stale_exposures": ("training episodes after the drift in which a stale entry was still shown, per stale entry", 0.0, None),
    "lesson_first_shown": ("episodes from writing a correct lesson until it is first shown (censored at the end of training)", 0.0, None),
    "forgetting": ("success right after a family's block minus success when re-tested at the end", -1.0, 1.0),
    "transfer": ("success rate on held-out families", 0.0, 1.0),
    "transfer_early": ("success rate over the first episodes of each held-out family", 0.0, 1.0),
    "lessons_merged": ("share of written lessons the engine merged into an existing item (dedup)", 0.0, 1.0),
    "items": ("live memory items at the end (active + resident)", 0.0, None),
}

FAST_THRESHOLDS = {"fast_0.8": 0.8, "fast_1.0": 1.0, "fast_1.2": 1.2}


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


def _drift_times(run: dict[str, Any], sim: SimConfig) -> tuple[float | None, float | None]:
    """(mean episodes until a stale entry was last shown, mean showings after
    the drift) over the stale entries shown in the window before the drift."""
    d, eps = run.get("drift_episode"), run["episodes"]
    if d is None or not run.get("stale"):
        return None, None
    stale = set(run["stale"])
    before = {i for e in eps[max(0, d - sim.forget_window) : d] for i in e["ids"]} & stale
    if not before:
        return None, None
    shown = [set(e["ids"]) & before for e in eps[d : sim.train_episodes]]
    exits, exposures = [], []
    for i in sorted(before):
        at = [t for t, ids in enumerate(shown) if i in ids]
        exposures.append(len(at))
        exits.append(at[-1] + 1 if at else 0)
    return _mean(exits), _mean(exposures)


def _lesson_wait(run: dict[str, Any], sim: SimConfig) -> float | None:
    eps, end = run["episodes"], sim.train_episodes
    waits = []
    for t0, item, correct in run.get("lessons", []):
        if not correct or t0 >= end - 1:
            continue
        first = next((t for t in range(t0 + 1, end) if item in eps[t]["ids"]), None)
        waits.append((first if first is not None else end) - t0)
    return _mean(waits)


def summarize(run: dict[str, Any], sim: SimConfig) -> dict[str, float | None]:
    """One number per metric for one (strategy, seed) run."""
    eps = run["episodes"]
    train = [e for e in eps if e["phase"] == "train"]
    late = train[len(train) - max(1, len(train) // 4) :]
    correct = [e for e in train if e["success"]]
    held = [e for e in eps if e["phase"] == "heldout"]
    snap = run["snapshots"]["train_end"]
    forgetting = []
    for fam in dict.fromkeys(e["family"] for e in eps if e["phase"] == "retest"):
        block = [e["success"] for e in train if e["family"] == fam][-sim.forget_window :]
        again = [e["success"] for e in eps if e["phase"] == "retest" and e["family"] == fam]
        forgetting.append(_mean(block) - _mean(again))
    speedups = [e["speedup"] for e in correct if e["speedup"]]
    shown_rules = sum(e["residents"] for e in train)
    reported, used = sum(e["reported"] for e in train), sum(e["used"] for e in train)
    both = sum(e["reported_used"] for e in train)
    tokens = _mean([e["tokens"] for e in train])
    success = _mean([e["success"] for e in train])
    d = run.get("drift_episode")
    stale_exit, stale_exposures = _drift_times(run, sim)
    out = {
        "success": success,
        "success_late": _mean([e["success"] for e in late]),
        "p_expected": _mean([e["p_expected"] for e in train]),
        "speedup": math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None,
        "z": _mean([e["z"] for e in correct]),
        "success_per_1k": success / tokens * 1000 if tokens else None,
        "ndcg": _mean([e["ndcg"] for e in train]),
        "ndcg_ctx": _mean([e["ndcg_ctx"] for e in train]),
        "fidelity": snap["fidelity"],
        "context_precision": _mean([e["shown_fit"] / e["shown"] for e in train if e["shown"]]),
        "shown": _mean([e["shown"] for e in train]),
        "tokens": tokens,
        "report_precision": both / reported if reported else None,
        "report_recall": both / used if used else None,
        "rulebook_precision": snap["rulebook_precision"],
        "rules": snap["rules"],
        "rule_relevance": (sum(e["residents_fit"] for e in train) / shown_rules) if shown_rules else None,
        "success_post_drift": _mean([e["success"] for e in train[d:]]) if d is not None else None,
        "stale_exit": stale_exit,
        "stale_exposures": stale_exposures,
        "lesson_first_shown": _lesson_wait(run, sim),
        "forgetting": _mean(forgetting),
        "transfer": _mean([e["success"] for e in held]),
        "transfer_early": _mean(
            [
                e["success"]
                for fam in dict.fromkeys(e["family"] for e in held)
                for e in [x for x in held if x["family"] == fam][: sim.transfer_window]
            ]
        ),
        "lessons_merged": _mean([float(e["lesson_merged"]) for e in eps if e["lesson_merged"] is not None]),
        "items": run["snapshots"]["run_end"]["items"],
    }
    for name, p in FAST_THRESHOLDS.items():
        out[name] = _mean([float(bool(e["success"] and e["speedup"] and e["speedup"] > p)) for e in train])
    return out


def curve(eps: list[dict[str, Any]], key: str, window: int) -> list[float | None]:
    """Mean of `key` over consecutive non-overlapping windows of the stream."""
    return [_mean([e[key] for e in eps[i : i + window]]) for i in range(0, len(eps), window)]


CURVES = ("success", "p_expected", "ndcg_ctx", "tokens")


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
    for key in CURVES:
        per_seed = [curve(r["episodes"], key, sim.curve_window) for r in runs]
        points = [interval([c[i] for c in per_seed if c[i] is not None]) for i in range(len(per_seed[0]))]
        out["curves"][key] = {k: [p[k] for p in points] for k in ("mean", "lo", "hi")}
    return out
