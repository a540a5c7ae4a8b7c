"""Warm evaluations per minute of this checkout against another one (an
earlier commit in a `git worktree`), side by side in one run: rounds
alternate which tree goes first, so a machine that gets busier slows both.

    python benchmarks/harness_ab.py --against ../sage-before [--rounds 3] [--tasks 6] [--budget 0.2]

Each tree is measured in a process of its own, importing that tree's
`sage_engine` (its evaluation children too, through the package they are
started from): the warm, confined pool of `benchmarks/harness.py`, its
start-up not counted, every candidate the task's reference renamed to
ModelNew. Prints each round and the ratios of the medians (this / other):
evaluations per minute, the harness's own overhead per evaluation (the
wall outside the model calls, far less sensitive to a noisy machine than
the timing phase, whose length follows the noise), and the reference's
timed median per task (the median over tasks of this / other: what a change
to the timing loop costs what it measures).
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

MEASURE = r"""
import json, re, sys, tempfile, time
from dataclasses import replace
from pathlib import Path
sys.path.insert(0, ".")
from sage_engine.config import Config
from sage_engine.evaluation.harness import Harness
try:
    from sage_engine.evaluation.host.tasks import list_suite
except ImportError:  # a tree from before the evaluation's folders were its layers
    from sage_engine.evaluation.tasks import list_suite

n_tasks, budget, extra = int(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3])
work = [(replace(t, forbid=()), re.sub(r"\bModel\b", "ModelNew", t.reference_source)) for t in list_suite()[:n_tasks]]
with tempfile.TemporaryDirectory() as tmp:
    fields = {k: v for k, v in extra.items() if k in Config.__dataclass_fields__}  # what this tree's Config has
    config = Config(cache_dir=Path(tmp), db_path=Path(tmp) / "bench.db", timing_budget_s=budget, eval_timeout_s=600.0,
                    **fields)
    with Harness(config) as harness:
        harness.evaluate(*work[0])  # starts the pool: not counted, as a server pays it once
        if hasattr(harness.pool, "ready_pids"):
            harness.pool.ready_pids(config.eval_workers, timeout=%(wait)s)
        else:  # a tree from before it: the spare's process exists, imported or not
            deadline = time.monotonic() + %(wait)s
            while len(harness.pool.worker_pids()) < config.eval_workers and time.monotonic() < deadline:
                time.sleep(0.1)
        walls, overheads, medians = [], [], {}
        for task, source in work:
            start = time.perf_counter()
            result = harness.evaluate(task, source)
            walls.append(time.perf_counter() - start)
            overheads.append(walls[-1] - result.phases.get("model_calls", 0.0))
            if result.status != "correct":
                raise SystemExit(f"{task.id}: {result.status}: {result.message}")
            medians[task.id] = result.reference_timing.median_ms
print(json.dumps({"per_min": 60.0 * len(walls) / sum(walls), "overhead_s": sum(overheads) / len(overheads),
                  "reference_ms": medians}))
""" % {"wait": SPARE_WAIT_S}


def measure(tree: Path, tasks: int, budget: float, settings: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", MEASURE, str(tasks), str(budget), json.dumps(settings)],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--budget", type=float, default=0.2, help="timing_budget_s per side")
    parser.add_argument(
        "--no-profile", action="store_true", help="Config.profile off where the tree has it: the harness alone, without the profile phase"
    )
    args = parser.parse_args()
    settings = {"profile": False} if args.no_profile else {}
    trees = {"this": ROOT, "other": Path(args.against).resolve()}
    per_min: dict[str, list[float]] = {name: [] for name in trees}
    overhead: dict[str, list[float]] = {name: [] for name in trees}
    reference: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    for round_ in range(args.rounds):
        order = list(trees.items()) if round_ % 2 == 0 else list(trees.items())[::-1]
        for name, tree in order:
            found = measure(tree, args.tasks, args.budget, settings)
            per_min[name].append(found["per_min"])
            overhead[name].append(found["overhead_s"])
            for task, ms in found.get("reference_ms", {}).items():
                reference[name].setdefault(task, []).append(ms)
        print(
            f"round {round_ + 1}: " + ", ".join(f"{n} {per_min[n][-1]:.1f}/min ({1000 * overhead[n][-1]:.0f} ms overhead)" for n in trees),
            flush=True,
        )
    this, other = (statistics.median(per_min[n]) for n in trees)
    cost_this, cost_other = (statistics.median(overhead[n]) for n in trees)
    print(
        f"warm evaluations per minute, median of {args.rounds} rounds: this {this:.1f}, other {other:.1f}; "
        f"ratio {this / other:.3f} ({100 * (this / other - 1):+.1f}%)"
    )
    print(
        f"mean harness overhead per evaluation (wall outside model calls), median of rounds: this "
        f"{1000 * cost_this:.0f} ms, other {1000 * cost_other:.0f} ms; ratio {cost_this / cost_other:.3f}"
    )
    mine, theirs = reference["this"], reference["other"]
    ratios = sorted(statistics.median(mine[t]) / statistics.median(theirs[t]) for t in mine if t in theirs)
    if ratios:
        print(
            f"reference median per task, this / other over {len(ratios)} tasks: median {statistics.median(ratios):.3f} "
            f"(range {ratios[0]:.3f}-{ratios[-1]:.3f})"
        )


if __name__ == "__main__":
    main()
