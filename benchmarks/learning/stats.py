"""Paired comparisons over seeds: Student t tests and intervals, and Holm's
step-down correction across a family of comparisons. Pure functions, no
SciPy (the benchmark must run on a bare install)."""

from __future__ import annotations

import math
from typing import Sequence


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf2(t: float, df: int) -> float:
    """Two-sided p-value P(|T| >= |t|) of Student's t with df degrees of freedom."""
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(p: float, df: int) -> float:
    """q with P(T <= q) = p, for p in (0.5, 1), by bisection on the tail."""
    if not 0.5 < p < 1.0:
        raise ValueError("t_quantile needs 0.5 < p < 1")
    lo, hi = 0.0, 1.0
    while t_sf2(hi, df) > 2 * (1 - p):
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_sf2(mid, df) > 2 * (1 - p) else (lo, mid)
    return (lo + hi) / 2


def paired(a: Sequence[float | None], b: Sequence[float | None], m: int = 1, alpha: float = 0.05) -> dict[str, float | int | None]:
    """Paired t test of a - b over the seeds where both are defined: mean,
    95% interval, the simultaneous interval for a family of m comparisons
    (Bonferroni, level 1 - alpha / m) and the unadjusted two-sided p-value."""
    diffs = [x - y for x, y in zip(a, b) if x is not None and y is not None]
    n = len(diffs)
    out: dict[str, float | int | None] = {"mean": None, "lo": None, "hi": None, "lo_adj": None, "hi_adj": None, "p": None, "n": n}
    if n == 0:
        return out
    mean = sum(diffs) / n
    out.update(mean=mean, lo=mean, hi=mean, lo_adj=mean, hi_adj=mean)
    if n < 2:
        return out
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    se = sd / math.sqrt(n)
    if se == 0:
        out["p"] = 1.0 if mean == 0 else 0.0
        return out
    half = t_quantile(1 - alpha / 2, n - 1) * se
    half_adj = t_quantile(1 - alpha / (2 * m), n - 1) * se
    out.update(lo=mean - half, hi=mean + half, lo_adj=mean - half_adj, hi_adj=mean + half_adj, p=t_sf2(mean / se, n - 1))
    return out


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values (step-down, family-wise error control); None
    entries (untestable comparisons) stay None and do not count in m."""
    idx = sorted((i for i, p in enumerate(pvalues) if p is not None), key=lambda i: pvalues[i])
    m = len(idx)
    adjusted: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted
