"""What the interpreter checks cost: evaluation wall of every bundled Triton
example (`sage_engine/suite/tasks/*/solutions/triton_*.py`) on the `triton`
backend, this checkout against another one (an earlier commit in a `git
worktree`), side by side in one run; rounds alternate which tree goes first.

    python benchmarks/interp_cost.py --against /tmp/base [--rounds 3] [--trials 3]

Each tree runs in a process of its own importing that tree's `sage_engine`,
with a warm pool started before anything is timed. Prints each example's
median wall per tree and the median of the per-example ratios (this / other);
the goal for the interpreter checks (bf16, bounds, autotune) is at most 1.20.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MEASURE = r"""
import json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, ".")
from sage_engine.config import Config
from sage_engine.evaluation.harness import Harness
try:
    from sage_engine.evaluation.host.tasks import load_task
except ImportError:  # a tree from before the evaluation's folders were its layers
    from sage_engine.evaluation.tasks import load_task

trials, examples = int(sys.argv[1]), json.loads(sys.argv[2])
out = {}
with tempfile.TemporaryDirectory() as tmp:
    config = Config(cache_dir=Path(tmp), db_path=Path(tmp) / "bench.db", eval_timeout_s=600.0, profile=False)
    with Harness(config) as harness:
        first = examples[0]
        harness.evaluate(load_task(Path(first).parents[1]), Path(first).read_text(), backend="triton", trials=1)
        for path in examples:
            task = load_task(Path(path).parents[1])
            start = time.perf_counter()
            result = harness.evaluate(task, Path(path).read_text(), backend="triton", trials=trials)
            out[path] = {"wall_s": time.perf_counter() - start, "status": result.status,
                         "correctness_s": result.phases.get("correctness", 0.0)}
print(json.dumps(out))
"""


def examples() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "sage_engine" / "suite" / "tasks").glob("*/solutions/triton_*.py"))


def measure(tree: Path, trials: int, paths: list[str]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", MEASURE, str(trials), json.dumps([str(tree / p) for p in paths])],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: {proc.stderr[-3000:]}")
    raw = json.loads(proc.stdout.strip().splitlines()[-1])
    return {str(Path(k).relative_to(tree)): v for k, v in raw.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=3, help="correctness trials per evaluation")
    args = parser.parse_args()
    other = Path(args.against).resolve()
    paths = examples()
    walls: dict[str, dict[str, list[float]]] = {"this": {}, "other": {}}
    for r in range(args.rounds):
        order = [("this", ROOT), ("other", other)] if r % 2 == 0 else [("other", other), ("this", ROOT)]
        for name, tree in order:
            for path, row in measure(tree, args.trials, paths).items():
                walls[name].setdefault(path, []).append(row["wall_s"])
                # As it goes: a run on a busy machine may not reach its end.
                print(f"  round {r + 1} {name} {path}: {row['status']} {row['wall_s']:.2f} s", file=sys.stderr, flush=True)
        print(f"round {r + 1} done", file=sys.stderr, flush=True)
    ratios = []
    print(f"{'example':60s} {'this s':>8s} {'other s':>8s} {'ratio':>6s}")
    for path in paths:
        a, b = statistics.median(walls["this"][path]), statistics.median(walls["other"][path])
        ratios.append(a / b)
        print(f"{path:60s} {a:8.2f} {b:8.2f} {a / b:6.2f}")
    print(
        f"median ratio (this / other): {statistics.median(ratios):.3f}; total "
        f"{sum(statistics.median(v) for v in walls['this'].values()):.1f} s against "
        f"{sum(statistics.median(v) for v in walls['other'].values()):.1f} s"
    )


if __name__ == "__main__":
    main()
