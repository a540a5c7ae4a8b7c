"""Running every strategy on every seed of every world (in parallel across at
most a few processes) and collecting one results dictionary per world."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sys
import time
from typing import Any, Sequence

from benchmarks.learning import compare, metrics
from benchmarks.learning.config import SimConfig, engine_overrides
from benchmarks.learning.runner import run, strategies

MAX_WORKERS = 2  # the benchmark shares its machine; more processes only contend


def _job(args: tuple[str, SimConfig, str, int]) -> tuple[str, dict[str, Any]]:
    world, sim, strategy, seed = args
    return world, run(strategy, seed, sim)


def _signature(sim: SimConfig, name: str) -> tuple:
    """What a run depends on besides world and seed: two arms with the same
    engine settings and k would run identically."""
    arm = strategies(sim)[name]
    return arm.uses_memory, arm.k or sim.k, tuple(sorted(engine_overrides(arm.engine).items()))


def run_all(
    worlds: dict[str, SimConfig],
    seeds: Sequence[int],
    names: Sequence[str] | None = None,
    workers: int | None = None,
    progress: bool = False,
) -> dict[str, dict[str, Any]]:
    """{world: results} for every world, strategy and seed. Runs are
    deterministic, so arms that would run identically (same applied engine
    settings and k) run once and share the run; results say which."""
    jobs, aliases = [], {}
    for world, sim in worlds.items():
        first: dict[tuple, str] = {}
        for name in names or strategies(sim):
            key = _signature(sim, name)
            if key in first:
                aliases[(world, name)] = first[key]
                continue
            first[key] = name
            jobs += [(world, sim, name, seed) for seed in seeds]
    # Slow strategies (consolidation, wide contexts) first, so the pool drains evenly.
    jobs.sort(key=lambda j: (not strategies(j[1])[j[2]].uses_memory, "ugc" not in j[2], j[0], j[2], j[3]))
    workers = max(1, min(workers or os.cpu_count() or 1, MAX_WORKERS, len(jobs)))
    started = time.perf_counter()
    done: dict[str, list[dict[str, Any]]] = {w: [] for w in worlds}
    if workers == 1:
        for job in jobs:
            world, r = _job(job)
            done[world].append(r)
            _tick(progress, sum(map(len, done.values())), len(jobs), started)
    else:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            for world, r in pool.imap_unordered(_job, jobs):
                done[world].append(r)
                _tick(progress, sum(map(len, done.values())), len(jobs), started)
    wall = time.perf_counter() - started
    for (world, name), source in aliases.items():
        settings = engine_overrides(strategies(worlds[world])[name].engine)
        done[world] += [
            dict(r, strategy=name, same_run_as=source, engine_applied=settings, runtime_s=0.0, cpu_s=0.0)
            for r in done[world]
            if r["strategy"] == source
        ]
    out = {}
    for world, sim in worlds.items():
        out[world] = collect(done[world], sim, names, world)
        out[world].update(workers=workers, wall_s_all_worlds=wall)
    return out


def collect(runs: Sequence[dict[str, Any]], sim: SimConfig, names: Sequence[str] | None = None, world: str = "easy") -> dict[str, Any]:
    """Aggregate finished runs of one world (any order) into its results dictionary."""
    known = strategies(sim)
    present = {r["strategy"] for r in runs}
    names = [n for n in (names or known) if n in present]
    by_name = {n: sorted((r for r in runs if r["strategy"] == n), key=lambda r: r["seed"]) for n in names}
    results: dict[str, Any] = {
        "world": world,
        "config": dataclasses.asdict(sim),
        "seeds": sorted({r["seed"] for r in runs}),
        "cpu_s": sum(r["cpu_s"] for r in runs),
        "workers": 1,
        "metric_docs": {m: d for m, (d, _, _) in metrics.METRICS.items()},
        "strategies": {},
    }
    for n in names:
        agg = metrics.aggregate(by_name[n], sim)
        first = by_name[n][0]
        agg.update(doc=known[n].doc, engine_overrides=first["engine_applied"], k=known[n].k or sim.k, same_run_as=first.get("same_run_as"))
        results["strategies"][n] = agg
    results["paired"] = compare.paired_tests(results["strategies"])
    results["goals"] = compare.goals(results)
    return results


def _tick(progress: bool, done: int, total: int, started: float) -> None:
    if progress:
        print(
            f"\r{done}/{total} runs, {time.perf_counter() - started:.0f} s", end="" if done < total else "\n", file=sys.stderr, flush=True
        )
