"""Writing the results: per world one JSON, a markdown table and PNG plots;
across worlds a summary table and, with the noise sweep, a sweep plot."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from benchmarks.learning.compare import PAIR_METRICS, significant
from benchmarks.learning.metrics import METRICS

TABLES = (
    (
        "Outcomes (training stream unless named)",
        (
            "success",
            "success_late",
            "fast_0.8",
            "fast_1.0",
            "fast_1.2",
            "speedup",
            "success_per_1k",
            "transfer_early",
            "transfer",
            "forgetting",
        ),
    ),
    (
        "Memory quality",
        (
            "ndcg",
            "ndcg_ctx",
            "context_precision",
            "fidelity",
            "shown",
            "tokens",
            "rules",
            "rulebook_precision",
            "rule_relevance",
            "items",
            "lessons_merged",
        ),
    ),
    (
        "Reports, drift and new lessons",
        ("report_precision", "report_recall", "success_post_drift", "stale_exit", "stale_exposures", "lesson_first_shown"),
    ),
)
HEADERS = {
    "success": "success",
    "success_late": "success, last 1/4",
    "p_expected": "expected success",
    "fast_0.8": "fast_0.8",
    "fast_1.0": "fast_1.0",
    "fast_1.2": "fast_1.2",
    "speedup": "speedup (geo)",
    "z": "z",
    "success_per_1k": "success / 1k tokens",
    "ndcg": "NDCG@k items",
    "ndcg_ctx": "NDCG context",
    "fidelity": "credit fidelity",
    "context_precision": "context precision",
    "shown": "shown/task",
    "tokens": "tokens/task",
    "report_precision": "report precision",
    "report_recall": "report recall",
    "rules": "resident rules",
    "rulebook_precision": "rulebook precision",
    "rule_relevance": "rule relevance",
    "items": "items at end",
    "success_post_drift": "success after drift",
    "stale_exit": "stale exit (episodes)",
    "stale_exposures": "stale showings",
    "lesson_first_shown": "lesson first shown (episodes)",
    "forgetting": "forgetting",
    "transfer": "held-out success",
    "transfer_early": "held-out, first episodes",
    "lessons_merged": "lessons merged",
}
COUNTS = ("tokens", "items", "shown", "rules", "stale_exit", "stale_exposures", "lesson_first_shown")
HEADLINE = ("success", "fast_1.0", "ndcg_ctx", "tokens", "success_per_1k", "transfer")


def _digits(metric: str) -> int:
    return 1 if metric in COUNTS else 3


def fmt(m: dict[str, Any], digits: int = 3) -> str:
    if m["mean"] is None:
        return "n/a"
    if m["n"] < 2:
        return f"{m['mean']:.{digits}f}"
    return f"{m['mean']:.{digits}f} [{m['lo']:.{digits}f}, {m['hi']:.{digits}f}]"


def fmt_pair(row: dict[str, Any], digits: int = 3) -> str:
    if row["mean"] is None:
        return "n/a"
    if row.get("same_run"):
        return "same run"
    star = "*" if significant(row) else ""
    if row["n"] < 2 or row["lo_adj"] is None:
        return f"{row['mean']:+.{digits}f}{star}"
    return f"{row['mean']:+.{digits}f}{star} [{row['lo_adj']:+.{digits}f}, {row['hi_adj']:+.{digits}f}]"


def _defined(results: dict[str, Any], metric: str) -> bool:
    return any(s["metrics"][metric]["mean"] is not None for s in results["strategies"].values())


def markdown(results: dict[str, Any]) -> str:
    strategies = results["strategies"]
    sim = results["config"]
    lines = [
        f"World **{results['world']}**. Mean and 95% t interval over {len(results['seeds'])} seeds; "
        f"{sim['n_train_families']} training families x {sim['episodes_per_family']} episodes, "
        f"{sim['retest_families']} re-tested x {sim['retest_episodes']}, "
        f"{sim['n_heldout_families']} held-out x {sim['heldout_episodes']}; k = {sim['k']}. "
        f"{results['cpu_s']:.0f} s of CPU for this world.",
        "",
    ]
    for title, cols in TABLES:
        cols = [c for c in cols if _defined(results, c)]
        lines += [f"**{title}**", "", "| strategy | " + " | ".join(HEADERS[c] for c in cols) + " |", "|---|" + "---|" * len(cols)]
        for name, res in strategies.items():
            lines.append(f"| {name} | " + " | ".join(fmt(res["metrics"][c], _digits(c)) for c in cols) + " |")
        lines.append("")
    diffs = results.get("paired", {})
    if diffs:
        cols = [c for c in PAIR_METRICS if any(row[c]["mean"] is not None for row in diffs.values())]
        lines += [
            "**Paired differences (A - B, same seeds)**: mean, * where Holm-adjusted p < 0.05 within the "
            "metric's family of comparisons, and the simultaneous (Bonferroni) interval of that family",
            "",
            "| A - B | " + " | ".join(HEADERS[c] for c in cols) + " |",
            "|---|" + "---|" * len(cols),
        ]
        for key, row in diffs.items():
            lines.append(f"| {key} | " + " | ".join(fmt_pair(row[c], _digits(c)) for c in cols) + " |")
        lines.append("")
    if results.get("goals"):
        lines += ["**Goal**", "", "| goal | holds | measured |", "|---|---|---|"]
        for g in results["goals"]:
            lines.append(f"| {g['goal']} | {'yes' if g['holds'] else 'no'} | {g['detail']} |")
        lines.append("")
    shared = [
        f"{n} ran exactly as {s['same_run_as']} (same engine settings and k: one set of runs, shared)"
        for n, s in strategies.items()
        if s.get("same_run_as")
    ]
    if shared:
        lines += ["; ".join(shared) + ".", ""]
    lines.append("Metrics: " + "; ".join(f"{HEADERS[m]}: {d}" for m, (d, _, _) in METRICS.items()) + ".")
    return "\n".join(lines) + "\n"


def summary_markdown(all_results: dict[str, dict[str, Any]], wall_s: float | None = None) -> str:
    """One headline table per world and the goal checks, side by side."""
    lines = []
    if wall_s is not None:
        first = next(iter(all_results.values()))
        lines += [
            f"{len(all_results)} worlds x {len(first['strategies'])} strategies x {len(first['seeds'])} seeds "
            f"in {wall_s:.0f} s wall on {first['workers']} processes "
            f"({sum(r['cpu_s'] for r in all_results.values()):.0f} s of CPU).",
            "",
        ]
    for world, results in all_results.items():
        cols = [c for c in HEADLINE if _defined(results, c)]
        lines += [f"### {world}", "", "| strategy | " + " | ".join(HEADERS[c] for c in cols) + " |", "|---|" + "---|" * len(cols)]
        for name, res in results["strategies"].items():
            lines.append(f"| {name} | " + " | ".join(fmt(res["metrics"][c], _digits(c)) for c in cols) + " |")
        lines.append("")
        if results.get("goals"):
            lines += ["| goal | holds | measured |", "|---|---|---|"]
            lines += [f"| {g['goal']} | {'yes' if g['holds'] else 'no'} | {g['detail']} |" for g in results["goals"]]
            lines.append("")
    return "\n".join(lines) + "\n"


def write(results: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "results.json", out / "results.md"]
    paths[0].write_text(json.dumps(results, indent=1, default=_json_default) + "\n", encoding="utf-8")
    paths[1].write_text(markdown(results), encoding="utf-8")
    paths += plots(results, out)
    return paths


def write_all(all_results: dict[str, dict[str, Any]], out: Path, wall_s: float | None = None) -> list[Path]:
    """Every world under out/<world>/, plus out/summary.md and the cross-world plots."""
    paths: list[Path] = []
    for world, results in all_results.items():
        paths += write(results, out / world)
    out.mkdir(parents=True, exist_ok=True)
    summary = out / "summary.md"
    summary.write_text(summary_markdown(all_results, wall_s), encoding="utf-8")
    paths.append(summary)
    paths += cross_world_plots(all_results, out)
    return paths


def _json_default(o: Any) -> Any:
    if isinstance(o, float) and math.isnan(o):
        return None
    raise TypeError(f"cannot serialise {type(o).__name__}")


def _phases(results: dict[str, Any]) -> list[tuple[float, str]]:
    """Episode index where each part of the stream starts, and its label."""
    sim = results["config"]
    marks = [(i * sim["episodes_per_family"], f"family {i + 1}") for i in range(sim["n_train_families"])]
    start = sim["n_train_families"] * sim["episodes_per_family"]
    if sim["retest_families"]:
        marks.append((start, "re-test"))
    start += sim["retest_families"] * sim["retest_episodes"]
    if sim["n_heldout_families"]:
        marks.append((start, "held-out"))
    return marks


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on a server or in CI
    import matplotlib.pyplot as plt

    return plt


def _nan(vs: list[float | None]) -> list[float]:
    return [v if v is not None else math.nan for v in vs]


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    _pyplot().close(fig)
    return path


def plots(results: dict[str, Any], out: Path) -> list[Path]:
    plt = _pyplot()
    strategies = results["strategies"]
    names = list(strategies)
    color = {n: f"C{i}" for i, n in enumerate(names)}  # one colour per strategy in every panel
    sim = results["config"]
    w = sim["curve_window"]
    written = []

    rows = (("success", "success rate"), ("ndcg_ctx", "NDCG of the whole context"), ("tokens", "context tokens per task"))
    fig, axes = plt.subplots(len(rows), 1, figsize=(10, 9.5), sharex=True)
    for ax, (key, label) in zip(axes, rows):
        top = 0.0
        for name, res in strategies.items():
            c = res["curves"][key]
            if all(v is None for v in c["mean"]):
                continue
            x = [(i + 0.5) * w for i in range(len(c["mean"]))]
            ax.plot(x, _nan(c["mean"]), label=name, lw=1.4, color=color[name])
            ax.fill_between(x, _nan(c["lo"]), _nan(c["hi"]), color=color[name], alpha=0.08, lw=0)
            top = max([top] + [v for v in c["hi"] if v is not None])
        marks = _phases(results)
        drift = results["config"].get("drift_skills") and int(sim["drift_at"] * sim["n_train_families"] * sim["episodes_per_family"])
        if drift:
            marks.append((drift, "drift"))
        for pos, text in marks:
            ax.axvline(pos, color="red" if text == "drift" else "grey", lw=0.8 if text == "drift" else 0.6, ls=":")
            if ax is axes[0]:
                ax.text(pos + 1, 1.01, text, fontsize=7, transform=ax.get_xaxis_transform(), va="bottom")
        ax.set_ylabel(label)
        ax.set_ylim(0, 1 if key != "tokens" else max(top * 1.05, 1.0))
        ax.grid(alpha=0.2)
    axes[-1].set_xlabel(f"episode (each point: mean over a window of {w} episodes)")
    axes[0].legend(fontsize=7, ncol=4, loc="lower right")
    fig.suptitle(f"World {results['world']}: mean and 95% interval over {len(results['seeds'])} seeds", y=0.995)
    written.append(_save(fig, out / "learning_curve.png"))

    panels = [
        (k, t)
        for k, t in (
            ("success", "success"),
            ("fast_1.0", "fast_1.0"),
            ("ndcg_ctx", "NDCG of the whole context"),
            ("tokens", "context tokens per task"),
            ("success_per_1k", "success per 1k tokens"),
            ("fidelity", "credit fidelity (Spearman)"),
            ("stale_exit", "stale exit (episodes)"),
        )
        if _defined(results, k)
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(2.6 * len(panels), 3.8))
    for ax, (key, title) in zip(axes, panels):
        _bars(ax, [strategies[n]["metrics"][key] for n in names], names, [color[n] for n in names])
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"World {results['world']}", fontsize=10)
    written.append(_save(fig, out / "summary.png"))
    return written


def _bars(ax, ms: list[dict[str, Any]], names: list[str], colors: list[str]) -> None:
    vals = [m["mean"] if m["mean"] is not None else 0.0 for m in ms]
    err = [
        [(m["mean"] - m["lo"]) if m["mean"] is not None else 0 for m in ms],
        [(m["hi"] - m["mean"]) if m["mean"] is not None else 0 for m in ms],
    ]
    ax.bar(range(len(names)), vals, yerr=err, color=colors, capsize=2)
    for i, m in enumerate(ms):
        if m["mean"] is None:
            ax.text(i, 0, "n/a", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
    ax.axhline(0, color="black", lw=0.6)
    ax.grid(axis="y", alpha=0.2)


def cross_world_plots(all_results: dict[str, dict[str, Any]], out: Path) -> list[Path]:
    """worlds.png: headline metrics of every arm in every main world;
    sweep.png: paired differences along the report-noise sweep."""
    plt = _pyplot()
    written = []
    main = {w: r for w, r in all_results.items() if not w.startswith("noisy-")}
    if main:
        names = list(next(iter(main.values()))["strategies"])
        color = {n: f"C{i}" for i, n in enumerate(names)}
        keys = [k for k in ("success", "fast_1.0", "ndcg_ctx", "tokens") if any(_defined(r, k) for r in main.values())]
        fig, axes = plt.subplots(len(keys), len(main), figsize=(4.2 * len(main), 2.9 * len(keys)), squeeze=False)
        for j, (world, res) in enumerate(main.items()):
            arms = [n for n in names if n in res["strategies"]]
            for i, key in enumerate(keys):
                ax = axes[i][j]
                _bars(ax, [res["strategies"][n]["metrics"][key] for n in arms], arms, [color[n] for n in arms])
                if i < len(keys) - 1:
                    ax.set_xticklabels([])
                ax.set_title(f"{world}: {HEADERS[key]}", fontsize=9)
        written.append(_save(fig, out / "worlds.png"))
    sweep = {w: r for w, r in all_results.items() if w.startswith("noisy-") or w == "noisy"}
    if len(sweep) > 1:
        knobs = (
            ("over_claim", "over-claim rate at rank 1"),
            ("report_used", "report rate of used entries"),
            ("p_misapply", "misapplication rate"),
        )
        pairs = ("atu - uniform-pure", "atu - adopted-only", "atu+ugc-scoped - atu", "atu - similarity")
        base = sweep.get("noisy")
        fig, axes = plt.subplots(1, len(knobs), figsize=(15, 4))
        for ax, (knob, label) in zip(axes, knobs):
            pts = sorted(
                (r["config"][knob], r)
                for w, r in sweep.items()
                if base is None or all(r["config"][k] == base["config"][k] for k, _ in knobs if k != knob)
            )
            for c, pair in enumerate(pairs):
                rows = [r["paired"].get(pair, {}).get("success") for _, r in pts]
                if not all(rows):
                    continue
                x = [v for v, _ in pts]
                ax.errorbar(
                    x,
                    _nan([r["mean"] for r in rows]),
                    yerr=[
                        _nan([r["mean"] - r["lo_adj"] if r["lo_adj"] is not None else 0 for r in rows]),
                        _nan([r["hi_adj"] - r["mean"] if r["hi_adj"] is not None else 0 for r in rows]),
                    ],
                    label=pair,
                    marker="o",
                    capsize=3,
                    color=f"C{c}",
                )
            ax.axhline(0, color="black", lw=0.6)
            ax.set_xlabel(label)
            ax.set_ylabel("paired success difference")
            ax.grid(alpha=0.2)
        axes[0].legend(fontsize=7)
        fig.suptitle("Report-noise sweep around the noisy world (simultaneous intervals)", fontsize=10)
        written.append(_save(fig, out / "sweep.png"))
    return written
