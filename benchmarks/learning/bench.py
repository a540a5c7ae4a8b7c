"""Running every strategy on every seed (in parallel across processes) and
collecting the results into one dictionary."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sys
import time
from typing import Any, Sequence

from benchmarks.learning import metrics, report
from benchmarks.learning.config import SimConfig
from benchmarks.learning.runner import run, strategies


def _job(args: tuple[str, int, SimConfig]) -> dict[str, Any]:
    strategy, seed, sim = args
    return run(strategy, seed, sim)


def run_all(sim: SimConfig, seeds: Sequence[int], names: Sequence[str] | None = None, workers: int | None = None,
            progress: bool = False) -> dict[str, Any]:
    known = strategies(sim)
    names = list(names or known)
    jobs = [(s, seed, sim) for s in names for seed in seeds]
    # Memory strategies first: they are the slow ones, so the pool drains evenly.
    jobs.sort(key=lambda j: not known[j[0]].uses_memory)
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    if workers == 1:
        for job in jobs:
            runs.append(_job(job))
            _tick(progress, len(runs), len(jobs), started)
    else:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            for r in pool.imap_unordered(_job, jobs):
                runs.append(r)
                _tick(progress, len(runs), len(jobs), started)
    results = collect(runs, sim, names)
    results.update(wall_s=time.perf_counter() - started, workers=workers)
    return results


def collect(runs: Sequence[dict[str, Any]], sim: SimConfig, names: Sequence[str] | None = None) -> dict[str, Any]:
    """Aggregate finished runs (any order) into the results dictionary."""
    known = strategies(sim)
    present = {r["strategy"] for r in runs}
    names = list(names or [n for n in known if n in present])
    by_name = {n: sorted((r for r in runs if r["strategy"] == n), key=lambda r: r["seed"]) for n in names}
    results: dict[str, Any] = {
        "config": dataclasses.asdict(sim),
        "seeds": sorted({r["seed"] for r in runs}),
        "wall_s": sum(r["runtime_s"] for r in runs),
        "cpu_s": sum(r["cpu_s"] for r in runs),
        "workers": 1,
        "metric_docs": {m: d for m, (d, _, _) in metrics.METRICS.items()},
        "strategies": {},
    }
    for n in names:
        agg = metrics.aggregate(by_name[n], sim)
        agg.update(doc=known[n].doc, engine_overrides=known[n].engine)
        results["strategies"][n] = agg
    results["paired"] = {
        f"{a} - {b}": {m: metrics.paired(results["strategies"][a]["per_seed"][m], results["strategies"][b]["per_seed"][m])
                       for m in report.PAIR_METRICS}
        for a, b in report.PAIRS if a in by_name and b in by_name
    }
    return results


def _tick(progress: bool, done: int, total: int, started: float) -> None:
    if progress:
        print(f"\r{done}/{total} runs, {time.perf_counter() - started:.0f} s", end="" if done < total else "\n",
              file=sys.stderr, flush=True)
