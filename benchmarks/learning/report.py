"""Writing the results: one JSON, a markdown table, PNG plots."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from benchmarks.learning.metrics import METRICS

TABLES = (
    ("Learning (training stream)", ("success", "success_late", "p_expected", "speedup", "z")),
    ("Memory quality", ("ndcg", "context_precision", "fidelity", "shown", "tokens", "rules", "rulebook_precision", "rule_relevance", "items")),
    ("Retention and transfer", ("forgetting", "transfer_early", "transfer", "lessons_merged")),
)
HEADERS = {
    "success": "success", "success_late": "success, last 1/4", "p_expected": "expected success",
    "speedup": "speedup (geo)", "z": "z", "ndcg": "NDCG@k", "fidelity": "credit fidelity", "context_precision": "context precision",
    "shown": "shown/task", "tokens": "tokens/task", "rules": "resident rules",
    "rulebook_precision": "rulebook precision", "rule_relevance": "rule relevance", "items": "items at end",
    "forgetting": "forgetting", "transfer": "held-out success", "transfer_early": "held-out success, first episodes",
    "lessons_merged": "lessons merged",
}
# Differences worth reading with their own interval: the same seeds face the
# same luck under every strategy, so paired intervals are much tighter.
PAIRS = (("atu", "similarity"), ("atu", "uniform"), ("atu", "adopted-only"), ("atu", "no-memory"),
         ("atu+ugc", "atu"), ("atu+ugc", "atu-wide"), ("atu-wide", "atu"), ("atu+ugc", "no-memory"))
PAIR_METRICS = ("success", "success_late", "ndcg", "context_precision", "fidelity", "tokens", "forgetting",
                "transfer_early", "transfer")


def fmt(m: dict[str, Any], digits: int = 3) -> str:
    if m["mean"] is None:
        return "n/a"
    if m["n"] < 2:
        return f"{m['mean']:.{digits}f}"
    return f"{m['mean']:.{digits}f} [{m['lo']:.{digits}f}, {m['hi']:.{digits}f}]"


def markdown(results: dict[str, Any]) -> str:
    strategies = results["strategies"]
    sim = results["config"]
    lines = [
        f"Mean and 95% t interval over {len(results['seeds'])} seeds; "
        f"{sim['n_train_families']} training families x {sim['episodes_per_family']} episodes, "
        f"{sim['retest_families']} re-tested x {sim['retest_episodes']}, "
        f"{sim['n_heldout_families']} held-out x {sim['heldout_episodes']}; k = {sim['k']}. "
        f"Run time {results['wall_s']:.0f} s wall on {results['workers']} processes ({results['cpu_s']:.0f} s CPU).",
        "",
    ]
    for title, cols in TABLES:
        digits = {m: 1 if m in ("tokens", "items", "shown", "rules") else 3 for m in cols}
        lines += [f"**{title}**", "", "| strategy | " + " | ".join(HEADERS[c] for c in cols) + " |",
                  "|---|" + "---|" * len(cols)]
        for name, res in strategies.items():
            lines.append(f"| {name} | " + " | ".join(fmt(res["metrics"][c], digits[c]) for c in cols) + " |")
        lines.append("")
    diffs = results.get("paired", {})
    if diffs:
        cols = [m for m in PAIR_METRICS]
        lines += ["**Paired differences (A - B, same seeds)**", "",
                  "| A - B | " + " | ".join(HEADERS[c] for c in cols) + " |", "|---|" + "---|" * len(cols)]
        for key, row in diffs.items():
            lines.append(f"| {key} | " + " | ".join(fmt(row[c], 1 if c == "tokens" else 3) for c in cols) + " |")
        lines.append("")
    lines.append("Metrics: " + "; ".join(f"{HEADERS[m]}: {d}" for m, (d, _, _) in METRICS.items()) + ".")
    return "\n".join(lines) + "\n"


def write(results: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "results.json", out / "results.md"]
    paths[0].write_text(json.dumps(results, indent=1, default=_json_default) + "\n", encoding="utf-8")
    paths[1].write_text(markdown(results), encoding="utf-8")
    paths += plots(results, out)
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


def plots(results: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on a server or in CI
    import matplotlib.pyplot as plt

    strategies = results["strategies"]
    names = list(strategies)
    color = {n: f"C{i}" for i, n in enumerate(names)}  # one colour per strategy in every panel
    w = results["config"]["curve_window"]
    written = []

    rows = (("success", "success rate"), ("p_expected", "expected success"),
            ("ndcg", f"NDCG@k (k = {results['config']['k']}; atu-wide: its own k)"))
    fig, axes = plt.subplots(len(rows), 1, figsize=(10, 9.5), sharex=True)
    for ax, (key, label) in zip(axes, rows):
        for name, res in strategies.items():
            c = res["curves"][key]
            if all(v is None for v in c["mean"]):
                continue
            x = [(i + 0.5) * w for i in range(len(c["mean"]))]
            nan = lambda vs: [v if v is not None else math.nan for v in vs]  # noqa: E731
            ax.plot(x, nan(c["mean"]), label=name, lw=1.6, color=color[name])
            ax.fill_between(x, nan(c["lo"]), nan(c["hi"]), color=color[name], alpha=0.10, lw=0)
        for pos, text in _phases(results):
            ax.axvline(pos, color="grey", lw=0.6, ls=":")
            if ax is axes[0]:
                ax.text(pos + 1, 1.01, text, fontsize=7, transform=ax.get_xaxis_transform(), va="bottom")
        ax.set_ylabel(label)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.2)
    axes[-1].set_xlabel(f"episode (each point: mean over a window of {w} episodes)")
    axes[0].legend(fontsize=8, ncol=3, loc="lower right")
    fig.suptitle(f"Learning curves: mean and 95% interval over {len(results['seeds'])} seeds", y=0.995)
    fig.tight_layout()
    path = out / "learning_curve.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    panels = (("success_late", "success, last quarter of training"), ("transfer", "success on held-out families"),
              ("forgetting", "forgetting (after block - re-test)"), ("ndcg", "NDCG@k of retrieved items"),
              ("fidelity", "credit fidelity (Spearman)"), ("tokens", "context tokens per task"))
    fig, axes = plt.subplots(1, len(panels), figsize=(17, 3.6))
    for ax, (key, title) in zip(axes, panels):
        ms = [strategies[n]["metrics"][key] for n in names]
        vals = [m["mean"] if m["mean"] is not None else 0.0 for m in ms]
        err = [[(m["mean"] - m["lo"]) if m["mean"] is not None else 0 for m in ms],
               [(m["hi"] - m["mean"]) if m["mean"] is not None else 0 for m in ms]]
        ax.bar(range(len(names)), vals, yerr=err, color=[color[n] for n in names], capsize=3)
        for i, m in enumerate(ms):
            if m["mean"] is None:
                ax.text(i, 0, "n/a", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.axhline(0, color="black", lw=0.6)
        ax.grid(axis="y", alpha=0.2)
    fig.tight_layout()
    path = out / "summary.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written
