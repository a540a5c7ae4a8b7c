"""Evaluation throughput: the warm worker pool against a cold interpreter per
evaluation, each confined by bubblewrap and with process limits only, side
by side in one run, plus the harness's own overhead.

    python benchmarks/harness.py [--tasks 6] [--rounds 2] [--budget 0.2] [--ray]

Candidates are each task's reference renamed to ModelNew (always correct,
always available). The four set-ups take turns task by task (every other
round in reverse order), so a machine that gets busier during the run slows
all of them alike. Evaluations per
minute = evaluations / the time spent inside `Harness.evaluate`; overhead
per evaluation = that wall time minus the time inside reference and
candidate calls (correctness, warm-ups and timing), as the children measure
it. The warm pool's start (one torch import per worker) is charged once,
separately, as a server pays it once.

`--ray` then compares, in the same run, the local warm pool with the Ray
executor on a local cluster with two worker slots (`ray.init(num_cpus=2)` on
this machine): one evaluation at a time (Ray's overhead per evaluation: the
task submission, moving request and result, the host-side harness), and two
at a time (throughput scaling with workers). Each Ray worker process keeps
its own warm pool, started by its first evaluation (not counted).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sage_engine.config import Config  # noqa: E402
from sage_engine.evaluation.harness import Harness  # noqa: E402
from sage_engine.evaluation.host.tasks import Task, list_suite, load_task  # noqa: E402
from sage_engine.models import EvalResult  # noqa: E402

FIXTURES = ROOT / "tests" / "evaluation" / "fixtures" / "tasks"
SPARE_WAIT_S = 120.0
# (label, warm pool, confinement setting)
SETUPS = (("warm bwrap", True, "auto"), ("warm limits", True, "off"), ("cold bwrap", False, "auto"), ("cold limits", False, "off"))


def candidates(n: int) -> list[tuple[Task, str]]:
    tasks = list_suite()[:n] or [load_task(str(p)) for p in sorted(FIXTURES.iterdir())]
    return [(replace(t, forbid=()), re.sub(r"\bModel\b", "ModelNew", t.reference_source)) for t in tasks]


def evaluate_correct(harness: Harness, task: Task, source: str, label: str = "") -> tuple[EvalResult, float]:
    """One evaluation and its wall (seconds); a result that is not `correct` ends the benchmark."""
    t0 = time.perf_counter()
    result = harness.evaluate(task, source)
    wall = time.perf_counter() - t0
    if result.status != "correct":
        raise SystemExit(f"{label}{task.id}: {result.status}: {result.message}")
    return result, wall


def open_harness(warm: bool, confinement: str, budget: float, cache: Path, first: tuple[Task, str]):
    config = Config(
        cache_dir=cache,
        db_path=cache / "bench.db",
        warm_pool=warm,
        timing_budget_s=budget,
        eval_timeout_s=600.0,
        sandbox_confinement=confinement,
    )
    harness = Harness(config)
    startup = 0.0
    if warm:
        t0 = time.perf_counter()
        harness.evaluate(*first)
        startup = time.perf_counter() - t0
        # The spare worker imports torch in the background: let it finish before measuring.
        harness.pool.ready_pids(config.eval_workers, timeout=SPARE_WAIT_S)
    return harness, startup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--budget", type=float, default=0.2, help="timing_budget_s per side")
    parser.add_argument("--ray", action="store_true", help="also compare the Ray executor with the local warm pool")
    parser.add_argument("--only-ray", action="store_true", help="only the Ray comparison")
    args = parser.parse_args()
    if args.only_ray:
        with tempfile.TemporaryDirectory() as tmp:
            ray_comparison(candidates(args.tasks), args.budget, Path(tmp), args.rounds)
        return
    work = candidates(args.tasks)
    walls: dict[str, list[float]] = {label: [] for label, _, _ in SETUPS}
    overheads: dict[str, list[float]] = {label: [] for label, _, _ in SETUPS}
    startup: dict[str, float] = {}
    modes: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        harnesses = {}
        try:
            for label, warm, confinement in SETUPS:
                harnesses[label], startup[label] = open_harness(warm, confinement, args.budget, Path(tmp), work[0])
                modes[label] = harnesses[label].confinement.mode
            for round_ in range(args.rounds):
                for task, source in work:
                    # Every other round in reverse order: no set-up always runs right after another.
                    order = list(harnesses.items())
                    for label, harness in order if round_ % 2 == 0 else order[::-1]:
                        result, wall = evaluate_correct(harness, task, source, f"{label} ")
                        walls[label].append(wall)
                        overheads[label].append(wall - result.phases.get("model_calls", 0.0))
        finally:
            for harness in harnesses.values():
                harness.close()
    stats = {
        label: {
            "per_min": 60.0 * len(w) / sum(w),
            "wall_ms": 1000 * statistics.median(w),
            "overhead_ms": 1000 * statistics.median(overheads[label]),
        }
        for label, w in walls.items()
    }
    print(
        f"{len(work)} tasks x {args.rounds} rounds, timing budget {args.budget} s per side; "
        f"confinement: {', '.join(f'{k} = {v}' for k, v in modes.items())}"
    )
    print(f"{'':32}" + "".join(f"{label:>13}" for label in stats))
    for name, key, fmt in (
        ("evaluations per minute", "per_min", "{:.1f}"),
        ("median wall per eval (ms)", "wall_ms", "{:.0f}"),
        ("median overhead per eval (ms)", "overhead_ms", "{:.0f}"),
    ):
        print(f"{name:32}" + "".join(f"{fmt.format(s[key]):>13}" for s in stats.values()))
    pm = {label: s["per_min"] for label, s in stats.items()}
    print(f"warm pool vs cold, confined:     {pm['warm bwrap'] / pm['cold bwrap']:.2f}x evaluations per minute")
    print(f"warm pool vs cold, limits only:  {pm['warm limits'] / pm['cold limits']:.2f}x")
    print(f"cost of confinement, warm pool:  {100 * (1 - pm['warm bwrap'] / pm['warm limits']):+.1f}% evaluations per minute")
    print(f"cost of confinement, cold:       {100 * (1 - pm['cold bwrap'] / pm['cold limits']):+.1f}%")
    print(
        "warm pool start-up (first evaluation, not counted): "
        + ", ".join(f"{label} {startup[label]:.2f} s" for label in stats if startup[label])
    )
    if args.ray:
        with tempfile.TemporaryDirectory() as tmp:
            ray_comparison(work, args.budget, Path(tmp), args.rounds)


def ray_comparison(work: list[tuple[Task, str]], budget: float, tmp: Path, rounds: int) -> None:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, namespace="sage", log_to_driver=False)
    try:
        config = Config(
            cache_dir=tmp / "ray",
            db_path=tmp / "ray.db",
            timing_budget_s=budget,
            eval_timeout_s=600.0,
            executor="ray",
            ray_address=ray.get_runtime_context().gcs_address,
        )
        local = Harness(config.replace(executor="local"))
        remote = Harness(config)

        def through_ray(task: Task, source: str):
            return remote.evaluate(task, source, backend="cpu")

        with ThreadPoolExecutor(2) as both:  # warm both Ray workers' pools, and the local one
            list(both.map(lambda ts: through_ray(*ts), [work[0], work[0]]))
        local.evaluate(*work[0])
        walls: dict[str, list[float]] = {"local": [], "ray": []}
        overheads: dict[str, list[float]] = {"local": [], "ray": []}
        for round_ in range(rounds):
            for task, source in work:
                arms = [("local", lambda: local.evaluate(task, source)), ("ray", lambda: through_ray(task, source))]
                for label, run in arms if round_ % 2 == 0 else arms[::-1]:
                    t0 = time.perf_counter()
                    result = run()
                    wall = time.perf_counter() - t0
                    if result.status != "correct":
                        raise SystemExit(f"{label} {task.id}: {result.status}: {result.message}")
                    walls[label].append(wall)
                    overheads[label].append(wall - result.phases.get("model_calls", 0.0))
        jobs = [ts for _ in range(rounds) for ts in work]
        t0 = time.perf_counter()
        for ts in jobs:
            through_ray(*ts)
        one_at_a_time = time.perf_counter() - t0
        t0 = time.perf_counter()
        with ThreadPoolExecutor(2) as both:
            results = list(both.map(lambda ts: through_ray(*ts), jobs))
        two_at_a_time = time.perf_counter() - t0
        if any(r.status != "correct" for r in results):
            raise SystemExit("a concurrent Ray evaluation was not correct")
        local.close()
    finally:
        ray.shutdown()
    per_min = {k: 60.0 * len(w) / sum(w) for k, w in walls.items()}
    wall_ms = {k: 1000 * statistics.median(w) for k, w in walls.items()}
    print(f"\nRay executor (local cluster, 2 worker slots) vs the local warm pool, {len(work)} tasks x {rounds} rounds:")
    print(f"{'':32}{'local':>13}{'ray':>13}")
    print(f"{'evaluations per minute':32}{per_min['local']:>13.1f}{per_min['ray']:>13.1f}")
    print(f"{'median wall per eval (ms)':32}{wall_ms['local']:>13.0f}{wall_ms['ray']:>13.0f}")
    print(f"{'median overhead per eval (ms)':32}" + "".join(f"{1000 * statistics.median(overheads[k]):>13.0f}" for k in ("local", "ray")))
    # Paired: the same task in the same round through both, so the tasks' own spread cancels.
    extra = 1000 * statistics.median(r - lo for r, lo in zip(walls["ray"], walls["local"]))
    print(
        f"Ray's cost per evaluation:       {extra:+.0f} ms (median of paired differences) = "
        f"{100 * extra / wall_ms['local']:+.1f}% of a local evaluation's median"
    )
    print(
        f"Ray, 2 at a time vs 1 at a time: {one_at_a_time / two_at_a_time:.2f}x evaluations per minute "
        f"({len(jobs)} evaluations: {one_at_a_time:.1f} s vs {two_at_a_time:.1f} s)"
    )


if __name__ == "__main__":
    main()
