"""Do-nothing candidates against a suite: how many pass where they should not.

    python benchmarks/do_nothing.py TASKS_DIR [--against ../sage-before] [--tasks a,b] [--trials 2]

For every task of TASKS_DIR, two candidates that compute nothing a kernel
would (`suite.check.null_candidates`): zeros of the output's shape, and one
number everywhere (the mean of the reference's output for other inputs).
Each checkout is measured in a process of its own, importing its own
`sage_engine` (the harness of that tree judges); `--against` runs the same
candidates, built here, through another tree side by side. Prints per task
what each candidate got, then per tree: passes, the tasks marked degenerate
(this tree's results say a constant passes them), and false passes (a
do-nothing candidate passing a task not marked degenerate: the goal is 0).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MEASURE = r"""
import dataclasses, json, sys, tempfile
from pathlib import Path
sys.path.insert(0, ".")
from sage_engine.config import Config
from sage_engine.evaluation.harness import Harness
try:
    from sage_engine.evaluation.host.tasks import load_task
except ImportError:  # a tree from before the evaluation's folders were its layers
    from sage_engine.evaluation.tasks import load_task

jobs = json.loads(sys.stdin.read())
out = []
with tempfile.TemporaryDirectory() as tmp:
    config = Config(cache_dir=Path(tmp), db_path=Path(tmp) / "bench.db", timing_budget_s=0.1,
                    correctness_trials=int(sys.argv[1]), eval_timeout_s=600.0)
    with Harness(config) as harness:
        for job in jobs:
            task = dataclasses.replace(load_task(Path(job["task"])), forbid=())
            row = {"task": task.id, "kind": job["kind"]}
            try:
                result = harness.evaluate(task, job["source"])
                row.update(status=result.status, degenerate=getattr(result, "degenerate", None),
                           message=result.message[:160])
            except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                row.update(status="error", degenerate=None, message=str(exc)[:160])
            out.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
print(json.dumps(out))
"""


def jobs_for(folder: Path, only: set[str] | None) -> list[dict[str, str]]:
    from sage_engine.evaluation.host.tasks import list_suite
    from sage_engine.suite.check import null_candidates, self_candidate

    jobs = []
    for task in list_suite(folder):
        if only and task.id not in only:
            continue
        try:
            candidates = null_candidates(self_candidate(task))
        except (SyntaxError, ValueError):
            continue
        jobs += [{"task": str(task.reference_path.parent), "kind": kind, "source": source} for kind, source in candidates.items()]
    return jobs


def measure(tree: Path, jobs: list[dict[str, str]], trials: int) -> list[dict]:
    python = tree / ".venv" / "bin" / "python"
    proc = subprocess.run(
        [str(python if python.exists() else sys.executable), "-c", MEASURE, str(trials)],
        cwd=tree,
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summary(rows: list[dict]) -> dict[str, object]:
    passed = [r for r in rows if r["status"] == "correct"]
    degenerate = sorted({r["task"] for r in rows if r.get("degenerate")})
    false = sorted({r["task"] for r in passed if not r.get("degenerate")})
    return {"candidates": len(rows), "passes": len(passed), "degenerate": degenerate, "false_passes": false}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks_dir", type=Path)
    parser.add_argument("--against", type=Path, help="another checkout (its own .venv) judged side by side")
    parser.add_argument("--tasks", help="comma-separated task ids")
    parser.add_argument("--trials", type=int, default=2)
    args = parser.parse_args()
    only = set(args.tasks.split(",")) if args.tasks else None
    jobs = jobs_for(args.tasks_dir.resolve(), only)
    trees = {"this": ROOT} | ({"other": args.against.resolve()} if args.against else {})
    found = {name: measure(tree, jobs, args.trials) for name, tree in trees.items()}
    for i, job in enumerate(jobs):
        cells = "  ".join(
            f"{name}: {rows[i]['status']}{' (degenerate)' if rows[i].get('degenerate') else ''}" for name, rows in found.items()
        )
        print(f"{Path(job['task']).name:50s} {job['kind']:9s} {cells}")
    for name, rows in found.items():
        print(f"{name}: {json.dumps(summary(rows))}")


if __name__ == "__main__":
    main()
