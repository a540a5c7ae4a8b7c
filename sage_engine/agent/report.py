"""Run metrics (the SAGE paper's and KernelBench's), as JSON, a markdown
table and PNG plots.

Denominators, stated because papers differ:
- execution rate: solved tasks / finished tasks (a task is solved when one
  submission was correct);
- Fast_1.0: solved tasks whose best kernel beats the reference / *solved* tasks
  (the SAGE paper's definition);
- fast_p: tasks solved with best speedup > p / *all* finished tasks
  (KernelBench's definition);
- S_self: median over solved tasks of (first correct kernel's time / best
  kernel's time);
- speedups vs the reference: median and geometric mean over solved tasks with
  a measured speedup.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
from pathlib import Path
from typing import Any, Sequence

from sage_engine.agent.state import RunState, TaskRecord
from sage_engine.errors import InvalidInput

log = logging.getLogger(__name__)

FAST_PS: tuple[float, ...] = (1.0, 1.5, 2.0)


def compute_metrics(records: Sequence[TaskRecord], *, planned: int | None = None) -> dict[str, Any]:
    """Pure: the metrics of a set of finished tasks."""
    recs = sorted(records, key=lambda r: (r.finished_seq, r.order))
    n = len(recs)
    solved = [r for r in recs if r.solved]
    speedups = [r.best_speedup for r in solved if r.best_speedup and r.best_speedup > 0]
    s_self = [r.s_self for r in solved if r.s_self]
    tokens = sum(r.tokens for r in recs)
    costs = [r.cost_usd for r in recs if r.cost_usd is not None]
    shown = sum(len(r.shown_ids) for r in recs)
    curve, wins = [], 0
    for i, r in enumerate(recs, 1):
        wins += r.solved
        curve.append({"seq": i, "task": r.task, "solved": r.solved, "cumulative_success_rate": wins / i})
    return {
        "tasks_finished": n,
        "tasks_planned": planned if planned is not None else n,
        "solved": len(solved),
        "execution_rate": _ratio(len(solved), n),
        "fast_1_0_over_solved": _ratio(sum(s > 1.0 for s in speedups), len(solved)),
        "fast_p_over_all": {f"{p:g}": _ratio(sum(s > p for s in speedups), n) for p in FAST_PS},
        "s_self_median": statistics.median(s_self) if s_self else None,
        "speedup_median": statistics.median(speedups) if speedups else None,
        "speedup_geomean": math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None,
        "rounds_per_solved_task": _mean([r.rounds_used for r in solved]),
        "rounds_to_first_correct": _mean([r.first_correct_round for r in solved if r.first_correct_round]),
        "tokens_total": tokens,
        "tokens_per_solved_task": tokens / len(solved) if solved else None,
        "tokens_per_task": tokens / n if n else None,
        "cost_usd_total": sum(costs) if costs else None,
        "cost_usd_per_solved_task": sum(costs) / len(solved) if costs and solved else None,
        "adoption_rate": _ratio(sum(len(r.claimed_ids) for r in recs), shown) if shown else None,
        "lessons_stored": sum(r.lesson_item_id is not None for r in recs),
        "learning_curve": curve,
    }


def write_report(run_dir: Path | str) -> dict[str, Any]:
    """Recompute the report from a run directory's state file (also used by
    `sage run --report DIR`); writes report.json, report.md and plots/."""
    run_dir = Path(run_dir)
    settings = RunState.settings(run_dir)
    if settings is None:
        raise InvalidInput(f"{run_dir} is not a run directory (no run.json)")
    state = RunState(run_dir)
    records = state.records()
    metrics = compute_metrics(records, planned=len(settings.tasks))
    consolidations = [e for e in state.events if e.get("event") == "consolidation"]
    report = {
        "run": settings.model_dump(mode="json"),
        "metrics": metrics,
        "consolidations": consolidations,
        "tasks": [r.model_dump(mode="json") | {"s_self": r.s_self, "tokens": r.tokens} for r in records],
    }
    (run_dir / "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    plots = write_plots(run_dir / "plots", records, title=f"{settings.strategy} · {settings.model}")
    report["plots"] = [str(p.relative_to(run_dir)) for p in plots]
    (run_dir / "report.md").write_text(render_markdown(report), encoding="utf-8")
    return report


def render_markdown(report: dict[str, Any]) -> str:
    run, m = report["run"], report["metrics"]
    rows = [
        ("tasks finished / planned", f"{m['tasks_finished']} / {m['tasks_planned']}"),
        ("solved", str(m["solved"])),
        ("execution rate (solved / finished)", _pct(m["execution_rate"])),
        ("Fast_1.0 (beats reference / solved)", _pct(m["fast_1_0_over_solved"])),
    ]
    rows += [(f"fast_{p} (speedup > {p} / all finished)", _pct(v)) for p, v in m["fast_p_over_all"].items()]
    rows += [
        ("S_self (median best / first correct)", _x(m["s_self_median"])),
        ("speedup vs reference, median (solved)", _x(m["speedup_median"])),
        ("speedup vs reference, geometric mean (solved)", _x(m["speedup_geomean"])),
        ("rounds per solved task (mean)", _num(m["rounds_per_solved_task"])),
        ("rounds to first correct (mean)", _num(m["rounds_to_first_correct"])),
        ("tokens per solved task (all tokens / solved)", _num(m["tokens_per_solved_task"], 0)),
        ("tokens total", str(m["tokens_total"])),
        ("estimated cost, USD (approximate prices)", _num(m["cost_usd_total"], 3)),
        ("adoption rate (adopted / shown)", _pct(m["adoption_rate"])),
        ("lessons stored", str(m["lessons_stored"])),
    ]
    out = [
        f"# SAGE run `{run['run_id']}`",
        "",
        f"Model `{run['model']}` ({run['provider']}), strategy `{run['strategy']}`, backend `{run['backend']}`, "
        f"{run['rounds']} rounds, suite `{run['suite']}`.",
        "",
        "| metric | value |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in rows],
        "",
        "## Tasks (completion order)",
        "",
        "| # | task | solved | rounds | statuses | best speedup | S_self | adopted | tokens | cost |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in report["tasks"]:
        out.append(
            f"| {t['finished_seq']} | {t['task']} | {'yes' if t['solved'] else 'no'} | {t['rounds_used']} | "
            f"{' '.join(t['statuses'])} | {_best(t)} | {_x(t['s_self'])} | "
            f"{', '.join(f'#{i}' for i in t['adopted_ids'] or t['claimed_ids']) or '-'} | {t['tokens']} | "
            f"{_num(t['cost_usd'], 3)} |"
        )
    if report.get("consolidations"):
        out += ["", "## Consolidations", ""]
        for c in report["consolidations"]:
            out.append(
                f"- #{c.get('consolidation_id')} after {c.get('task')}: promoted {c.get('promoted')}, "
                f"demoted {c.get('demoted')}, abstraction {c.get('abstraction')}" + (f"; {'; '.join(c['notes'])}" if c.get("notes") else "")
            )
    if report.get("plots"):
        out += ["", "## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in report["plots"]]
    return "\n".join(out) + "\n"


def compare_markdown(reports: Sequence[dict[str, Any]]) -> str:
    """One row per run: the table an ablation reads (same suite, different
    strategies or models)."""
    out = [
        "| run | strategy | model | finished | execution rate | Fast_1.0 (solved) | fast_1 (all) | S_self | "
        "geomean speedup | tokens / solved | cost USD |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        run, m = r["run"], r["metrics"]
        out.append(
            f"| {run['run_id']} | {run['strategy']} | {run['model']} | {m['tasks_finished']}/{m['tasks_planned']} | "
            f"{_pct(m['execution_rate'])} | {_pct(m['fast_1_0_over_solved'])} | {_pct(m['fast_p_over_all'].get('1'))} | "
            f"{_x(m['s_self_median'])} | {_x(m['speedup_geomean'])} | {_num(m['tokens_per_solved_task'], 0)} | "
            f"{_num(m['cost_usd_total'], 3)} |"
        )
    return "\n".join(out) + "\n"


def write_plots(folder: Path, records: Sequence[TaskRecord], *, title: str = "") -> list[Path]:
    """Learning curve and per-task speedups as PNG (matplotlib's Agg canvas,
    no display needed). Skipped with a log line when matplotlib is missing."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        log.warning("matplotlib is not installed (pip install 'sage-npu[plots]'); no plots written")
        return []
    recs = sorted(records, key=lambda r: (r.finished_seq, r.order))
    if not recs:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    paths = []

    from matplotlib.ticker import MaxNLocator, ScalarFormatter

    fig = Figure(figsize=(6, 3.5), dpi=110)
    ax = fig.subplots()
    curve = compute_metrics(recs)["learning_curve"]
    ax.plot([c["seq"] for c in curve], [c["cumulative_success_rate"] for c in curve], marker="o", ms=3)
    ax.set_ylim(0, 1.05)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("tasks finished (completion order)")
    ax.set_ylabel("cumulative success rate")
    ax.set_title(f"Learning curve {title}".strip(), fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    paths.append(folder / "learning_curve.png")
    fig.savefig(paths[-1])

    fig = Figure(figsize=(max(5.0, 0.4 * len(recs) + 2), 3.8), dpi=110)
    ax = fig.subplots()
    solved = [(i, r.best_speedup) for i, r in enumerate(recs) if r.solved and r.best_speedup]
    floor = min([s for _, s in solved] + [1.0]) / 2
    ax.bar(
        [i for i, _ in solved],
        [s - floor for _, s in solved],
        bottom=floor,
        color=["tab:green" if s > 1 else "tab:orange" for _, s in solved],
    )
    unsolved = [i for i, r in enumerate(recs) if not r.solved]
    ax.plot(unsolved, [floor * 1.05] * len(unsolved), "x", color="tab:red", ms=8, label="unsolved")
    ax.set_yscale("log")
    ax.set_ylim(bottom=floor)
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(ScalarFormatter())
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(recs)), [r.task for r in recs], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("best speedup vs reference")
    ax.set_title(f"Best speedup per task {title}".strip(), fontsize=9)
    if unsolved:
        ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    paths.append(folder / "speedups.png")
    fig.savefig(paths[-1])
    return paths


def _ratio(a: int, b: int) -> float | None:
    return a / b if b else None


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _best(task: dict[str, Any]) -> str:
    """The best speedup, or the unverified one marked so (counted in no metric)."""
    if task.get("best_speedup") is None and task.get("best_speedup_unverified"):
        return f"{_x(task['best_speedup_unverified'])} (unverified)"
    return _x(task.get("best_speedup"))


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _num(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"
