"""Warm evaluations per minute of this checkout against another one (an
earlier commit in a `git worktree`), side by side in one run: rounds
alternate which tree goes first, so a machine that gets busier slows both.

    python benchmarks/harness_ab.py --against ../sage-before [--rounds 3] [--tasks 6] [--budget 0.2]

Each tree is measured in a process of its own, importing that tree's
`sage_engine` (its evaluation children too, through the package they are
started from): the warm, confined pool of `benchmarks/harness.py`, its
start-up not counted, every candidate the task's reference renamed to
ModelNew. Prints each round and the ratio of the medians (this / other).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPARE_WAIT_S = 120.0

MEASURE = r'''
import json, re, sys, tempfile, time
from dataclasses import replace
from pathlib import Path
sys.path.insert(0, ".")
from sage_engine.config import Config
from sage_engine.evaluation.harness import Harness
from sage_engine.evaluation.tasks import list_suite

n_tasks, budget = int(sys.argv[1]), float(sys.argv[2])
work = [(replace(t, forbid=()), re.sub(r"\bModel\b", "ModelNew", t.reference_source)) for t in list_suite()[:n_tasks]]
with tempfile.TemporaryDirectory() as tmp:
    config = Config(cache_dir=Path(tmp), db_path=Path(tmp) / "bench.db", timing_budget_s=budget, eval_timeout_s=600.0)
    with Harness(config) as harness:
        harness.evaluate(*work[0])  # starts the pool: not counted, as a server pays it once
        deadline = time.monotonic() + %(wait)s
        while len(harness.pool.worker_pids()) < config.eval_workers and time.monotonic() < deadline:
            time.sleep(0.1)
        walls = []
        for task, source in work:
            start = time.perf_counter()
            result = harness.evaluate(task, source)
            walls.append(time.perf_counter() - start)
            if result.status != "correct":
                raise SystemExit(f"{task.id}: {result.status}: {result.message}")
print(json.dumps({"per_min": 60.0 * len(walls) / sum(walls), "walls": walls}))
''' % {"wait": SPARE_WAIT_S}


def measure(tree: Path, tasks: int, budget: float) -> dict:
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(tasks), str(budget)], cwd=tree, capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--budget", type=float, default=0.2, help="timing_budget_s per side")
    args = parser.parse_args()
    trees = {"this": ROOT, "other": Path(args.against).resolve()}
    per_min: dict[str, list[float]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        order = list(trees.items()) if round_ % 2 == 0 else list(trees.items())[::-1]
        for name, tree in order:
            per_min[name].append(measure(tree, args.tasks, args.budget)["per_min"])
        print(f"round {round_ + 1}: " + ", ".join(f"{n} {per_min[n][-1]:.1f}/min" for n in trees), flush=True)
    this, other = (statistics.median(per_min[n]) for n in trees)
    print(f"warm evaluations per minute, median of {args.rounds} rounds: this {this:.1f}, other {other:.1f}; "
          f"ratio {this / other:.3f} ({100 * (this / other - 1):+.1f}%)")


if __name__ == "__main__":
    main()
