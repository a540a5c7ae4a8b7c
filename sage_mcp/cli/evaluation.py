"""`sage bench`, `sage backends ...`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sage_mcp.cli.common import State, console, emit, err_console, handle_errors, json_option, pass_state, table
from sage_mcp.cli.profile import render_limits, render_profile

if TYPE_CHECKING:
    from sage_engine.models import EvalResult

# Which example solutions each backend runs (file-name prefix in solutions/).
SOLUTION_PREFIX = {"cpu": "cpu_", "triton": "triton_", "ascend-compile": "ascend_", "npu": "ascend_", "cuda": "triton_"}


def _fmt_speedup(r) -> str:
    if r.speedup is None:
        return "-" if r.timing_representative else "n/a (not representative)"
    if r.speedup_trusted is False:
        return f"{r.speedup:.2f}x (unverified)"
    return f"{r.speedup:.2f}x" + (" (suspicious)" if r.suspicious_speedup else "")


def render_result(r: EvalResult) -> None:
    colour = "green" if r.status == "correct" else "red"
    console.print(
        f"[{colour}]{r.status}[/{colour}] · task {r.task} · {r.backend} on {r.hardware} · "
        f"speedup {_fmt_speedup(r)} · {r.duration_s:.1f}s · attempt {r.attempt_id} · seed {r.seed}"
    )
    for v in r.variants:
        where = f" at {v.at}" if v.at else ""
        console.print(f"  variant {v.name}: {v.status}{where}" + (f" ({v.reason})" if v.reason else ""), highlight=False, markup=False)
    if r.message:
        console.print(r.message, highlight=False, markup=False)
    if r.reference_timing and r.candidate_timing:
        console.print(
            f"reference {r.reference_timing.median_ms:.3f} ms (IQR {r.reference_timing.iqr_ms:.3f}), "
            f"candidate {r.candidate_timing.median_ms:.3f} ms (IQR {r.candidate_timing.iqr_ms:.3f}), "
            f"{r.candidate_timing.reps} reps"
        )
    if r.speedup_note:
        console.print(r.speedup_note, highlight=False, markup=False)
    if r.mismatch:
        console.print(f"mismatch: {r.mismatch}", highlight=False, markup=False)
    for d in r.diagnostics:
        where = f"line {d.line}: " if d.line else ""
        console.print(f"  {d.severity} [{d.category}] {where}{d.message}", highlight=False, markup=False)
    for key, value in r.compile_info.model_dump(mode="json").items():
        console.print(f"  {key}: {value}", highlight=False, markup=False)
    if r.profile is not None:
        console.print(f"where the time goes: {r.profile.summary}", highlight=False, markup=False)


def render_with_profile(r: EvalResult) -> None:
    render_result(r)
    render_profile(r)


@click.command()
@click.argument("candidate", type=click.Path(exists=True, dir_okay=False))
@click.option("--task", "task", required=True, help="Bundled task id, task directory, or reference .py file.")
@click.option("--backend", "bench_backend", help="cpu (default), triton, ascend-compile, npu, cuda.")
@click.option("--trials", type=int, help="Seeded correctness trials per case.")
@click.option("--episode", "episode_id", type=int, help="Record the attempt in this episode.")
@click.option(
    "--profile",
    "show_profile",
    is_flag=True,
    help="Print where the time goes: kernels per side, bytes, FLOPs, shares of the measured limits.",
)
@click.option("--ncu", is_flag=True, help="Add Nsight Compute metrics per kernel (cuda with ncu on PATH; slow).")
@click.option(
    "--plot",
    "plot",
    type=click.Path(dir_okay=False),
    help="Write the result's roofline to FILE.svg, or FILE.png (drawn by headless Chromium); implies --profile.",
)
@click.option(
    "--seed",
    type=click.IntRange(0, 2**31 - 1),
    help="The inputs' seed (every result records its own): reproduces a run. Default: a new one each run.",
)
@json_option
@pass_state
@handle_errors
def bench(state: State, candidate, task, bench_backend, trials, episode_id, show_profile, ncu, plot, seed) -> None:
    """Compile, check and time CANDIDATE (a file defining ModelNew) against a task."""
    state.chose(candidate, task)
    if plot and Path(plot).suffix.lower() not in (".svg", ".png"):
        raise click.BadParameter("write the roofline as FILE.svg or FILE.png", param_hint="--plot")
    show_profile = show_profile or bool(plot)
    if show_profile or ncu:
        state.changes.update(profile=True, **({"profile_ncu": True} if ncu else {}))
    if seed is not None:
        state.changes["eval_seed"] = seed
    with _progress() as bar:
        job = bar.add_task("evaluating", total=None)

        def progress(done: float, total: float | None, message: str) -> None:
            bar.update(job, completed=done, total=total, description=message[:60])

        result = state.engine.evaluate(
            str(Path(candidate).resolve()), task, backend=bench_backend, trials=trials, episode_id=episode_id, progress=progress
        )
    emit(state, result, render_with_profile if show_profile or ncu else render_result)
    if plot:
        # Drawn even without a profile: the chart says why it is empty.
        written = state.engine.write_roofline(result, plot)
        err_console.print(f"roofline: {written}", highlight=False, markup=False)
    if result.status != "correct":
        sys.exit(1)


@click.group()
def backends() -> None:
    """Evaluation backends: what is ready here and how to set the rest up."""


@backends.command("list")
@json_option
@pass_state
@handle_errors
def backends_list(state: State) -> None:
    """Every backend, whether it is ready here, how its candidates are confined, and how to make it ready;
    with `--executor ray`, also the cluster's hosts and their free NPU/GPU/CPU slots."""
    rows = state.engine.backends()
    confinement = state.engine.confinement()
    hosts = state.engine.evaluation_hosts() if state.engine.config.executor == "ray" else None

    def render(value):
        table(
            None,
            ["backend", "ready", "hardware", "confinement", "reason / setup"],
            [
                (
                    b.name,
                    "yes" if b.ready else "no",
                    b.hardware or "-",
                    confinement.mode,
                    b.reason if b.ready else f"{b.reason} — {b.setup}",
                )
                for b in rows
            ],
        )
        console.print(f"confinement: {confinement.describe()}", highlight=False, markup=False)
        if hosts is not None:
            table(
                "evaluation hosts (Ray)",
                ["host", "alive", "NPU free/total", "GPU free/total", "CPU free/total"],
                [(h.host, "yes" if h.alive else "no", *(_slots(h, r) for r in ("NPU", "GPU", "CPU"))) for h in hosts],
            )

    emit(state, rows if hosts is None else {"backends": rows, "hosts": hosts}, render)


def _slots(host, resource: str) -> str:
    total = host.total.get(resource, 0)
    return f"{host.free.get(resource, 0):g}/{total:g}" if total else "-"


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err_console, transient=True
    )


@backends.command("setup")
@click.argument("name", type=click.Choice(["ascend-compile", "npu", "cuda"]))
@click.option("--force", is_flag=True, help="Rebuild even if the environment exists.")
@pass_state
@handle_errors
def backends_setup(state: State, name, force) -> None:
    """Create the cached environment a backend needs (ascend-compile: its own virtualenv)."""
    path = state.engine.setup_backend(name, log=lambda msg: err_console.print(msg, highlight=False, markup=False), force=force)
    console.print(f"{name} is ready" + (f" ({path})" if path else ""))


@backends.command("calibrate")
@click.option("--backend", "calibrate_backend", help="cpu, npu or cuda (default: the configured backend).")
@click.option("--force", is_flag=True, help="Measure again even if this host's limits are cached.")
@json_option
@pass_state
@handle_errors
def backends_calibrate(state: State, calibrate_backend, force) -> None:
    """Measure this host's peak bandwidth, matmul FLOP/s per dtype and launch cost for a backend (once, then cached)."""
    with _progress() as bar:
        bar.add_task("measuring this host's limits" if force else "reading or measuring this host's limits", total=None)
        limits = state.engine.calibrate(calibrate_backend, force=force)
    emit(state, limits, render_limits)
