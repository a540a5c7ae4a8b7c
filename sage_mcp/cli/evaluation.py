"""`sage bench`, `sage suite ...`, `sage backends ...`."""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sage_mcp.cli.common import State, console, emit, err_console, handle_errors, json_option, pass_state, table

# Which example solutions each backend runs (file-name prefix in solutions/).
SOLUTION_PREFIX = {"cpu": "cpu_", "triton": "triton_", "ascend-compile": "ascend_", "npu": "ascend_", "cuda": "triton_"}


def _fmt_speedup(r) -> str:
    if r.speedup is None:
        return "-" if r.timing_representative else "n/a (not representative)"
    return f"{r.speedup:.2f}x" + (" (suspicious)" if r.suspicious_speedup else "")


def render_result(r) -> None:
    colour = "green" if r.status == "correct" else "red"
    console.print(f"[{colour}]{r.status}[/{colour}] · task {r.task} · {r.backend} on {r.hardware} · "
                  f"speedup {_fmt_speedup(r)} · {r.duration_s:.1f}s · attempt {r.attempt_id}")
    if r.message:
        console.print(r.message, highlight=False, markup=False)
    if r.reference_timing and r.candidate_timing:
        console.print(f"reference {r.reference_timing.median_ms:.3f} ms (IQR {r.reference_timing.iqr_ms:.3f}), "
                      f"candidate {r.candidate_timing.median_ms:.3f} ms (IQR {r.candidate_timing.iqr_ms:.3f}), "
                      f"{r.candidate_timing.reps} reps")
    if r.mismatch:
        console.print(f"mismatch: {r.mismatch}", highlight=False, markup=False)
    for d in r.diagnostics:
        where = f"line {d.line}: " if d.line else ""
        console.print(f"  {d.severity} [{d.category}] {where}{d.message}", highlight=False, markup=False)
    for key, value in (r.compile_info or {}).items():
        console.print(f"  {key}: {value}", highlight=False, markup=False)


@click.command()
@click.argument("candidate", type=click.Path(exists=True, dir_okay=False))
@click.option("--task", "task", required=True, help="Bundled task id, task directory, or reference .py file.")
@click.option("--backend", "bench_backend", help="cpu (default), triton, ascend-compile, npu, cuda.")
@click.option("--trials", type=int, help="Seeded correctness trials per case.")
@click.option("--episode", "episode_id", type=int, help="Record the attempt in this episode.")
@json_option
@pass_state
@handle_errors
def bench(state: State, candidate, task, bench_backend, trials, episode_id) -> None:
    """Compile, check and time CANDIDATE (a file defining ModelNew) against a task."""
    with _progress() as bar:
        job = bar.add_task("evaluating", total=None)

        def progress(done: float, total: float | None, message: str) -> None:
            bar.update(job, completed=done, total=total, description=message[:60])

        result = state.engine.evaluate(str(Path(candidate).resolve()), task, backend=bench_backend,
                                       trials=trials, episode_id=episode_id, progress=progress)
    emit(state, result, render_result)
    if result.status != "correct":
        sys.exit(1)


@click.group()
def suite() -> None:
    """The bundled operator suite."""


@suite.command("list")
@click.option("--level", type=int)
@click.option("--family")
@click.option("--dir", "suite_dir", type=click.Path(exists=True, file_okay=False), help="A folder of task directories (e.g. from `sage suite import`) instead of the bundled suite.")
@json_option
@pass_state
@handle_errors
def suite_list(state: State, level, family, suite_dir) -> None:
    """Every task with its family, level, cases and example solutions."""
    tasks = state.engine.list_tasks(level=level, family=family, suite_dir=suite_dir)
    emit(state, tasks, lambda ts: table(f"{len(ts)} tasks", ["id", "family", "level", "cases", "examples", "name"],
         [(t.id, t.family, t.level, t.cases, ", ".join(t.examples), t.name) for t in ts]))


@suite.command("show")
@click.argument("task_id")
@json_option
@pass_state
@handle_errors
def suite_show(state: State, task_id) -> None:
    """A task's description, cases and reference source."""
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
@click.option("--dir", "suite_dir", type=click.Path(exists=True, file_okay=False), help="A folder of task directories instead of the bundled suite.")
@json_option
@pass_state
@handle_errors
def suite_run(state: State, level, family, task_ids, run_backend, suite_dir) -> None:
    """Evaluate the suite's example solutions and print a summary table."""
    from sage_engine.evaluation.tasks import list_suite

    backend = run_backend or state.engine.config.backend
    prefix = SOLUTION_PREFIX.get(backend, "cpu_")
    tasks = list_suite(Path(suite_dir).resolve() if suite_dir else None, level=level, family=family)
    if task_ids:
        wanted = {t.strip() for t in task_ids.split(",") if t.strip()}
        unknown = wanted - {t.id for t in tasks}
        if unknown:
            raise click.BadParameter(f"unknown task ids {sorted(unknown)}; see `sage suite list`", param_hint="--tasks")
        tasks = [t for t in tasks if t.id in wanted]
    jobs = [(t, name, path) for t in tasks for name, path in sorted(t.examples.items())
            if name.startswith(prefix) and "broken" not in name]
    rows = []
    with _progress() as bar:
        job = bar.add_task("suite", total=len(jobs))
        for t, name, path in jobs:
            bar.update(job, description=f"{t.id}/{name}")
            r = state.engine.evaluate(str(path), str(t.reference_path.parent) if suite_dir else t.id, backend=backend)
            rows.append({"task": t.id, "solution": name, "status": r.status, "speedup": r.speedup,
                         "reference_ms": r.reference_timing.median_ms if r.reference_timing else None,
                         "candidate_ms": r.candidate_timing.median_ms if r.candidate_timing else None,
                         "front_end": (r.compile_info or {}).get("front_end"), "message": r.message})
            bar.advance(job)
    speedups = [r["speedup"] for r in rows if r["status"] == "correct" and r["speedup"]]
    summary = {
        "backend": backend,
        "evaluated": len(rows),
        "correct": sum(r["status"] == "correct" for r in rows),
        "geomean_speedup": math.exp(statistics.fmean(math.log(s) for s in speedups)) if speedups else None,
        "results": rows,
    }

    def render(s):
        table(None, ["task", "solution", "status", "speedup", "ref ms", "cand ms", "front end"],
              [(r["task"], r["solution"], r["status"], f"{r['speedup']:.2f}x" if r["speedup"] else "-",
                f"{r['reference_ms']:.3f}" if r["reference_ms"] else "-",
                f"{r['candidate_ms']:.3f}" if r["candidate_ms"] else "-", r["front_end"] or "") for r in s["results"]])
        gm = f"{s['geomean_speedup']:.2f}x" if s["geomean_speedup"] else "-"
        console.print(f"{s['correct']}/{s['evaluated']} correct on {s['backend']}; geometric-mean speedup {gm}")

    emit(state, summary, render)


@click.group()
def backends() -> None:
    """Evaluation backends: what is ready here and how to set the rest up."""


@backends.command("list")
@json_option
@pass_state
@handle_errors
def backends_list(state: State) -> None:
    """Every backend, whether it is ready here, how its candidates are confined, and how to make it ready."""
    rows = state.engine.backends()
    confinement = state.engine.confinement()

    def render(rs):
        table(None, ["backend", "ready", "hardware", "confinement", "reason / setup"],
              [(b.name, "yes" if b.ready else "no", b.hardware or "-", confinement.mode,
                b.reason if b.ready else f"{b.reason} — {b.setup}") for b in rs])
        console.print(f"confinement: {confinement.describe()}", highlight=False, markup=False)

    emit(state, rows, render)


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err_console, transient=True)


@suite.command("import")
@click.argument("path", type=click.Path(exists=True))
@click.option("--dest", default="sage-tasks", show_default=True, type=click.Path(file_okay=False), help="Folder to write task directories into.")
@click.option("--overwrite", is_flag=True, help="Replace task directories that already exist.")
@click.option("--max-cases", type=int, help="Keep at most N case rows per task.")
@json_option
@pass_state
@handle_errors
def suite_import(state: State, path, dest, overwrite, max_cases) -> None:
    """Convert NPUKernelBench task folders or MultiKernelBench files into SAGE tasks."""
    imported = state.engine.import_tasks(path, dest, overwrite=overwrite, max_cases=max_cases)
    rows = [{"id": t.id, "path": str(t.path), "layout": t.layout, "cases": t.cases, "notes": t.notes} for t in imported]
    emit(state, rows, lambda rs: (
        table(f"{len(rs)} tasks imported into {dest}", ["id", "layout", "cases", "notes"],
              [(r["id"], r["layout"], r["cases"], "; ".join(r["notes"])) for r in rs]),
        console.print(f"run them with: sage suite list --dir {dest}"),
    ))


@backends.command("setup")
@click.argument("name", type=click.Choice(["ascend-compile", "npu", "cuda"]))
@click.option("--force", is_flag=True, help="Rebuild even if the environment exists.")
@pass_state
@handle_errors
def backends_setup(state: State, name, force) -> None:
    """Create the cached environment a backend needs (ascend-compile: its own virtualenv)."""
    path = state.engine.setup_backend(name, log=lambda msg: err_console.print(msg, highlight=False, markup=False), force=force)
    console.print(f"{name} is ready" + (f" ({path})" if path else ""))
