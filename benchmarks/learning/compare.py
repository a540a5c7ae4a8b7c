"""The comparisons fixed in advance, their Holm-corrected paired tests, and
the checks against the learning goal. Pure functions over aggregated results.

Each metric is one family of hypotheses: the paired differences of all
comparisons below on that metric, corrected together with Holm's step-down
method. Intervals are paired Student t intervals over seeds, shown at the
simultaneous (Bonferroni) level of the family, which is conservative; the
decision (a star in the tables) uses the Holm-adjusted p-value.
"""

from __future__ import annotations

from typing import Any

from benchmarks.learning import stats

SCOPED = "atu+ugc-scoped"
PAIRS: tuple[tuple[str, str], ...] = tuple(
    (SCOPED, other)
    for other in (
        "no-memory",
        "similarity",
        "uniform",
        "uniform-pure",
        "adopted-only",
        "atu",
        "atu-2k",
        "atu-wide",
        "atu+ugc",
    )
) + (
    ("atu", "adopted-only"),
    ("atu", "uniform-pure"),
    ("atu", "uniform"),
    ("atu", "similarity"),
    ("atu+ugc", "atu"),
    ("atu+ugc", "atu-wide"),
)
PAIR_METRICS = (
    "success",
    "fast_1.0",
    "fast_1.2",
    "ndcg_ctx",
    "fidelity",
    "success_per_1k",
    "tokens",
    "success_post_drift",
    "stale_exit",
    "lesson_first_shown",
    "transfer",
)
ALPHA = 0.05


def paired_tests(strategies: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """{"A - B": {metric: {mean, lo, hi, lo_adj, hi_adj, p, p_holm, n}}} for
    every pre-registered pair whose arms both ran."""
    pairs = [(a, b) for a, b in PAIRS if a in strategies and b in strategies]
    out: dict[str, dict[str, dict[str, Any]]] = {f"{a} - {b}": {} for a, b in pairs}
    # Two arms that shared one run (an engine setting one of them asked for
    # does not exist yet) are not a comparison: no test, not counted in m.
    same = {(a, b) for a, b in pairs if _source(strategies, a) == _source(strategies, b)}
    for metric in PAIR_METRICS:

        def test(a: str, b: str, m: int = 1) -> dict[str, Any]:
            row = stats.paired(strategies[a]["per_seed"][metric], strategies[b]["per_seed"][metric], m, ALPHA)
            if (a, b) in same:
                row.update(p=None, same_run=True)
            return row

        m = sum(1 for a, b in pairs if test(a, b)["p"] is not None)
        rows = [test(a, b, max(m, 1)) for a, b in pairs]
        for (a, b), row, p_holm in zip(pairs, rows, stats.holm([r["p"] for r in rows])):
            row["p_holm"] = p_holm
            out[f"{a} - {b}"][metric] = row
    return out


def _source(strategies: dict[str, Any], name: str) -> str:
    return strategies[name].get("same_run_as") or name


def significant(row: dict[str, Any]) -> bool:
    return row.get("p_holm") is not None and row["p_holm"] < ALPHA


def _ahead(row: dict[str, Any] | None) -> bool:
    return row is not None and row["mean"] is not None and row["mean"] > 0 and significant(row)


def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The learning goal, item by item, as measured in one world: what was
    asked, the numbers, and whether it holds (None where an arm is missing)."""
    s, pairs = results["strategies"], results["paired"]
    out: list[dict[str, Any]] = []
    if SCOPED not in s:
        return out
    for metric in ("success", "fast_1.0"):
        rows = {k.split(" - ")[1]: v[metric] for k, v in pairs.items() if k.startswith(f"{SCOPED} - ")}
        behind = sorted(b for b, r in rows.items() if not _ahead(r))
        out.append(
            {
                "goal": f"{SCOPED} ahead of every other arm on {metric} (Holm p < {ALPHA})",
                "holds": not behind,
                "detail": "not ahead of: " + ", ".join(behind) if behind else "ahead of all",
            }
        )
    if "similarity" in s:
        ratio = [
            a / b if a is not None and b else None for a, b in zip(s[SCOPED]["per_seed"]["tokens"], s["similarity"]["per_seed"]["tokens"])
        ]
        vals = [r for r in ratio if r is not None]
        mean = sum(vals) / len(vals) if vals else None
        out.append(
            {
                "goal": f"{SCOPED} tokens <= 1.2x similarity's",
                "holds": mean is not None and mean <= 1.2,
                "detail": f"ratio {mean:.2f}" if mean is not None else "n/a",
            }
        )
    row = pairs.get(f"{SCOPED} - atu", {}).get("ndcg_ctx")
    if row is not None and row["mean"] is not None:
        below = row["mean"] < 0 and significant(row)
        out.append(
            {
                "goal": f"{SCOPED} whole-context NDCG not below atu's",
                "holds": not below,
                "detail": f"difference {row['mean']:+.3f}, Holm p {_p(row)}",
            }
        )
    for metric in ("success", "fast_1.0"):
        row = pairs.get("atu - adopted-only", {}).get(metric)
        if row is not None and row["mean"] is not None:
            out.append(
                {
                    "goal": f"atu ahead of adopted-only on {metric}",
                    "holds": _ahead(row),
                    "detail": f"difference {row['mean']:+.3f}, Holm p {_p(row)}",
                }
            )
    row = pairs.get("atu - uniform-pure", {}).get("success")
    if row is not None and row["mean"] is not None:
        worse = row["mean"] < 0 and significant(row)
        out.append(
            {
                "goal": "atu not worse than uniform-pure on success",
                "holds": not worse,
                "detail": f"difference {row['mean']:+.3f}, Holm p {_p(row)}",
            }
        )
    return out


def _p(row: dict[str, Any]) -> str:
    return "n/a" if row.get("p_holm") is None else f"{row['p_holm']:.3g}"
