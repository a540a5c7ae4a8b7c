"""Evaluation throughput: the warm worker pool against a cold interpreter per
evaluation, on the same candidates, plus the harness's own overhead.

    python benchmarks/harness.py [--tasks 6] [--rounds 2] [--budget 0.2]

Candidates are each task's reference renamed to ModelNew (always correct,
always available). Overhead per evaluation = wall time of `Harness.evaluate`
minus the time spent inside reference and candidate calls (correctness,
warm-ups and timing), as the child measures it.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sage_engine.config import Config  # noqa: E402
from sage_engine.evaluation.harness import Harness  # noqa: E402
from sage_engine.evaluation.tasks import Task, list_suite, load_task  # noqa: E402

FIXTURES = ROOT / "tests" / "evaluation" / "fixtures" / "tasks"


def candidates(n: int) -> list[tuple[Task, str]]:
    tasks = list_suite()[:n] or [load_task(str(p)) for p in sorted(FIXTURES.iterdir())]
    return [(replace(t, forbid=()), re.sub(r"\bModel\b", "ModelNew", t.reference_source)) for t in tasks]


def run(warm: bool, work: list[tuple[Task, str]], rounds: int, budget: float, cache: Path) -> dict[str, float]:
    config = Config(cache_dir=cache, db_path=cache / "bench.db", warm_pool=warm, timing_budget_s=budget,
                    eval_timeout_s=600.0)
    walls, overheads, startup = [], [], 0.0
    with Harness(config) as harness:
        if warm:  # the pool starts once per server; charge it separately
            t0 = time.perf_counter()
            harness.evaluate(*work[0])
            startup = time.perf_counter() - t0
        start = time.perf_counter()
        for _ in range(rounds):
            for task, source in work:
                t0 = time.perf_counter()
                result = harness.evaluate(task, source)
                wall = time.perf_counter() - t0
                if result.status != "correct":
                    raise SystemExit(f"{task.id}: {result.status}: {result.message}")
                walls.append(wall)
                overheads.append(wall - result.phases.get("model_calls", 0.0))
        elapsed = time.perf_counter() - start
    return {
        "evals": len(walls),
        "per_min": 60.0 * len(walls) / elapsed,
        "wall_ms": 1000 * statistics.median(walls),
        "overhead_ms": 1000 * statistics.median(overheads),
        "startup_s": startup,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--budget", type=float, default=0.2, help="timing_budget_s per side")
    args = parser.parse_args()
    work = candidates(args.tasks)
    with tempfile.TemporaryDirectory() as tmp:
        warm = run(True, work, args.rounds, args.budget, Path(tmp))
        cold = run(False, work, args.rounds, args.budget, Path(tmp))
    print(f"{len(work)} tasks x {args.rounds} rounds, timing budget {args.budget} s per side")
    print(f"{'':28}{'warm pool':>12}{'cold':>12}{'ratio':>10}")
    rows = [("evaluations per minute", "per_min", "{:.1f}"), ("median wall per eval (ms)", "wall_ms", "{:.0f}"),
            ("median overhead per eval (ms)", "overhead_ms", "{:.0f}")]
    for label, key, fmt in rows:
        ratio = warm[key] / cold[key] if cold[key] else float("nan")
        print(f"{label:28}{fmt.format(warm[key]):>12}{fmt.format(cold[key]):>12}{ratio:>9.2f}x")
    print(f"warm pool start-up (first evaluation, not counted): {warm['startup_s']:.2f} s")


if __name__ == "__main__":
    main()
