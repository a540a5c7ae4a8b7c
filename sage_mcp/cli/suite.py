"""`sage suite ...`: list, show, run, import and check task suites."""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from typing import Any

import click

from sage_mcp.cli.common import State, console, emit, err_console, handle_errors, json_option, pass_state, table
from sage_mcp.cli.evaluation import SOLUTION_PREFIX, _progress


@click.group()
def suite() -> None:
    """Task suites: the bundled one, or folders of imported tasks."""


@suite.command("list")
@click.option("--level", type=int)
@click.option("--family")
@click.option(
    "--dir",
    "suite_dir",
    type=click.Path(exists=True, file_okay=False),
    help="A folder of task directories (e.g. from `sage suite import`) instead of the bundled suite.",
)
@json_option
@pass_state
@handle_errors
def suite_list(state: State, level, family, suite_dir) -> None:
    """Every task with its family, level, cases and example solutions."""
    state.chose(suite_dir)
    tasks = state.engine.list_tasks(level=level, family=family, suite_dir=suite_dir)
    emit(
        state,
        tasks,
        lambda ts: table(
            f"{len(ts)} tasks",
            ["id", "family", "level", "cases", "examples", "name"],
            [(t.id, t.family, t.level, t.cases, ", ".join(t.examples), t.name) for t in ts],
        ),
    )


@suite.command("show")
@click.argument("task_id")
@json_option
@pass_state
@handle_errors
def suite_show(state: State, task_id) -> None:
    """A task's description, cases and reference source."""
    state.chose(task_id)
    summary = state.engine.get_task(task_id)
    source = state.engine.task_source(task_id)

    def render(_):
        console.print(f"[bold]{summary.id}[/bold]: {summary.name} ({summary.family}, level {summary.level}, {summary.cases} cases)")
        if summary.description:
            console.print(summary.description, highlight=False, markup=False)
        console.print(f"examples: {', '.join(summary.examples) or '-'}\n")
        console.print(source, highlight=False, markup=False)

    emit(state, {"task": summary, "reference": source}, render)


@suite.command("run")
@click.option("--level", type=int)
@click.option("--family")
@click.option("--tasks", "task_ids", help="Comma-separated task ids.")
@click.option("--backend", "run_backend", help="Backend; also picks which example solutions run.")
@click.option(
    "--dir", "suite_dir", type=click.Path(exists=True, file_okay=False), help="A folder of task directories instead of the bundled suite."
)
@click.option(
    "--report", "report_path", type=click.Path(dir_okay=False), help="Write an HTML report to FILE.html, rewritten as each result arrives."
)
@json_option
@pass_state
@handle_errors
def suite_run(state: State, level, family, task_ids, run_backend, suite_dir, report_path) -> None:
    """Evaluate the suite's example solutions and print a summary table."""
    state.chose(suite_dir)
    backend = run_backend or state.engine.config.backend
    prefix = SOLUTION_PREFIX.get(backend, "cpu_")
    tasks = state.engine.suite_tasks(Path(suite_dir).resolve() if suite_dir else None, level=level, family=family)
    if task_ids:
        wanted = {t.strip() for t in task_ids.split(",") if t.strip()}
        unknown = wanted - {t.id for t in tasks}
        if unknown:
            raise click.BadParameter(f"unknown task ids {sorted(unknown)}; see `sage suite list`", param_hint="--tasks")
        tasks = [t for t in tasks if t.id in wanted]
    jobs = [(t, name, path) for t in tasks for name, path in sorted(t.examples.items()) if name.startswith(prefix) and "broken" not in name]
    rows = []
    page = state.engine.suite_report(report_path, kind="run", backend=backend, total=len(jobs)) if report_path else None
    with _progress() as bar:
        job = bar.add_task("suite", total=len(jobs))
        for t, name, path in jobs:
            bar.update(job, description=f"{t.id}/{name}")
            r = state.engine.evaluate(str(path), str(t.reference_path.parent) if suite_dir else t.id, backend=backend)
            if page is not None:
                page.add_result(t.id, name, r, benchmark=str(t.origin.get("benchmark") or ("local" if suite_dir else "bundled")))
            rows.append(
                {
                    "task": t.id,
                    "solution": name,
                    "status": r.status,
                    "speedup": r.speedup,
                    "speedup_trusted": r.speedup_trusted,
                    "speedup_note": r.speedup_note,
                    "reference_ms": r.reference_timing.median_ms if r.reference_timing else None,
                    "candidate_ms": r.candidate_timing.median_ms if r.candidate_timing else None,
                    "front_end": r.compile_info.front_end,
                    "message": r.message,
                }
            )
            bar.advance(job)
    if page is not None:
        err_console.print(f"report: {page.finish()}", highlight=False, markup=False)
    speedups = [r["speedup"] for r in rows if r["status"] == "correct" and r["speedup"] and r["speedup_trusted"] is not False]
    summary = {
        "backend": backend,
        "evaluated": len(rows),
        "correct": sum(r["status"] == "correct" for r in rows),
        "geomean_speedup": math.exp(statistics.fmean(math.log(s) for s in speedups)) if speedups else None,
        "results": rows,
    }

    def render(s):
        table(
            None,
            ["task", "solution", "status", "speedup", "ref ms", "cand ms", "front end"],
            [
                (
                    r["task"],
                    r["solution"],
                    r["status"],
                    _speedup_cell(r),
                    f"{r['reference_ms']:.3f}" if r["reference_ms"] else "-",
                    f"{r['candidate_ms']:.3f}" if r["candidate_ms"] else "-",
                    r["front_end"] or "",
                )
                for r in s["results"]
            ],
        )
        gm = f"{s['geomean_speedup']:.2f}x" if s["geomean_speedup"] else "-"
        unverified = sum(r["speedup_trusted"] is False for r in s["results"])
        note = f" ({unverified} unverified speedup(s) left out)" if unverified else ""
        console.print(f"{s['correct']}/{s['evaluated']} correct on {s['backend']}; geometric-mean speedup {gm}{note}")

    emit(state, summary, render)


def _speedup_cell(row) -> str:
    if not row["speedup"]:
        return "-"
    return f"{row['speedup']:.2f}x" + (" unverified" if row["speedup_trusted"] is False else "")


@suite.command("import")
@click.argument("path", type=click.Path(exists=True))
@click.option(
    "--dest", default="sage-tasks", show_default=True, type=click.Path(file_okay=False), help="Folder to write task directories into."
)
@click.option("--overwrite", is_flag=True, help="Replace task directories that already exist.")
@click.option("--max-cases", type=int, help="Keep at most N case rows per task.")
@click.option("--scale", type=click.Choice(["cpu"]), help="Shrink the benchmark's sizes for a CPU check (originals kept in task.json).")
@json_option
@pass_state
@handle_errors
def suite_import(state: State, path, dest, overwrite, max_cases, scale) -> None:
    """Convert NPUKernelBench, MultiKernelBench or KernelBench tasks into SAGE tasks."""
    with _progress() as bar:
        job = bar.add_task("importing", total=None)

        def progress(done: float, total: float | None, message: str) -> None:
            bar.update(job, completed=done, total=total, description=message[:60])

        imported = state.engine.import_tasks(path, dest, overwrite=overwrite, max_cases=max_cases, scale=scale, progress=progress)
    rows = [t.as_dict() for t in imported]

    def render(rs: list[dict[str, Any]]) -> None:
        table(
            f"{len(rs)} tasks imported into {dest}",
            ["id", "layout", "cases", "needs", "notes"],
            [(r["id"], r["layout"], r["cases"], "; ".join(r["requires"]), "; ".join(r["notes"])) for r in rs],
        )
        console.print(f"check them with: sage suite check {dest}")

    emit(state, rows, render)


@suite.command("check")
@click.argument("suite_dir", required=False, type=click.Path(exists=True, file_okay=False))
@click.option("--suite", "suite_name", help="'bundled' (the default) or a folder of task directories.")
@click.option("--backend", "check_backend", help="Backend to check on (default: the configured one).")
@click.option(
    "--jobs",
    type=int,
    help="Evaluations at once: their correctness overlaps, timing takes turns (default: 1; on cuda and npu, half the cores, at most 8).",
)
@click.option(
    "--rows", "rows_path", type=click.Path(dir_okay=False), help="Append each task's row to this JSON-lines file as soon as it is checked."
)
@click.option(
    "--report", "report_path", type=click.Path(dir_okay=False), help="Write an HTML report to FILE.html, rewritten as each task is checked."
)
@click.option("--tasks", "task_ids", help="Comma-separated task ids.")
@click.option("--trials", type=int, help="Seeded correctness trials per case.")
@json_option
@pass_state
@handle_errors
def suite_check(state: State, suite_dir, suite_name, check_backend, jobs, task_ids, trials, rows_path, report_path) -> None:
    """Evaluate every task's reference as its own candidate; exit 1 when a runnable task fails."""
    if suite_dir and suite_name:
        raise click.UsageError("give the suite either as DIR or as --suite, not both")
    chosen = suite_dir or suite_name
    folder = None if chosen in (None, "bundled") else chosen
    if folder is not None and not Path(folder).is_dir():
        raise click.BadParameter(f"{folder!r} is neither 'bundled' nor a folder", param_hint="--suite")
    ids = [t.strip() for t in task_ids.split(",") if t.strip()] if task_ids else None
    state.chose(folder)
    with _progress() as bar:
        job = bar.add_task("checking", total=None)

        def progress(done: float, total: float | None, message: str) -> None:
            bar.update(job, completed=done, total=total, description=message[:60])

        report = state.engine.check_suite(
            folder, backend=check_backend, jobs=jobs, trials=trials, task_ids=ids, progress=progress, rows=rows_path, report=report_path
        )
    emit(state, report.as_dict(), _render_check)
    if report_path:
        err_console.print(f"report: {report_path}", highlight=False, markup=False)
    if report.summary["runnable"] != report.summary["correct"]:
        sys.exit(1)


def _render_check(report: dict) -> None:
    table(
        None,
        ["task", "benchmark", "status", "cause", "self-speedup", "ref ms", "variants", "time s"],
        [
            (
                t["id"],
                t["benchmark"],
                "degenerate" if t["degenerate"] else t["status"],
                t["cause"] or "",
                f"{t['speedup']:.3f}" if t["speedup"] else "-",
                f"{t['reference_ms']:.3f}" if t["reference_ms"] else "-",
                _variants_cell(t["variants"]),
                f"{t['seconds']:.1f}",
            )
            for t in report["tasks"]
        ],
    )
    groups = report["benchmarks"] if len(report["benchmarks"]) > 1 else {}
    for name, s in [*groups.items(), ("all", report["summary"])]:
        console.print(f"[bold]{name}[/bold]: {_summary_line(s)}", highlight=False)
        for title, key in (("failed", "failures"), ("cannot run", "cannot_run")):
            for cause, ids in s[key].items():
                more = f" (+{len(ids) - 5} more)" if len(ids) > 5 else ""
                console.print(f"  {title}: {cause}: {len(ids)} ({', '.join(ids[:5])}{more})", highlight=False, markup=False)
        for task_id, why in s["degenerate"].items():
            console.print(f"  degenerate: {task_id}: {why}", highlight=False, markup=False)
    load = report["load"].get("before", {})
    console.print(
        f"backend {report['backend']}, {report['jobs']} job(s), {report['wall_s']:.0f} s wall, "
        f"load {load.get('load1', '-')} on {load.get('cpus', '-')} CPUs at start",
        highlight=False,
    )


def _variants_cell(variants: list[dict]) -> str:
    """`2/3` (passed of checked), with how many were dropped (the reference could not run them)."""
    if not variants:
        return "-"
    passed = sum(v["status"] == "passed" for v in variants)
    dropped = sum(v["status"] == "dropped" for v in variants)
    return f"{passed}/{len(variants) - dropped}" + (f" ({dropped} dropped)" if dropped else "")


def _summary_line(s: dict) -> str:
    sp = s["self_speedup"]
    spread = (
        f"median self-speedup {sp['median']:.3f} (IQR {sp['q1']:.3f}-{sp['q3']:.3f}, 10th percentile {sp['p10']:.3f}, "
        f"{sp['under_0_9']} under 0.9)"
        if sp.get("median")
        else "no self-speedup"
    )
    slowest = f"slowest {s['slowest']['id']} {s['slowest']['seconds']:.1f} s" if s["slowest"] else ""
    pct = f"{s['correct_pct']:.1f}%" if s["correct_pct"] is not None else "-"
    degenerate = f"; {len(s['degenerate'])} degenerate" if s.get("degenerate") else ""
    return f"{s['tasks']} tasks, {s['runnable']} runnable, {s['correct']} correct ({pct}){degenerate}; {spread}; {slowest}"
