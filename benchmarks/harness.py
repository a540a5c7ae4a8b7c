"""Evaluation throughput: the warm worker pool against a cold interpreter per
evaluation, each confined by bubblewrap and with process limits only, side
by side in one run, plus the harness's own overhead.

    python benchmarks/harness.py [--tasks 6] [--rounds 2] [--budget 0.2]

Candidates are each task's reference renamed to ModelNew (always correct,
always available). The four set-ups take turns task by task (every other
round in reverse order), so a machine that gets busier during the run slows
all of them alike. Evaluations per
minute = evaluations / the time spent inside `Harness.evaluate`; overhead
per evaluation = that wall time minus the time inside reference and
candidate calls (correctness, warm-ups and timing), as the children measure
it. The warm pool's start (one torch import per worker) is charged once,
separately, as a server pays it once.
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
SPARE_WAIT_S = 120.0
# (label, warm pool, confinement setting)
SETUPS = (("warm bwrap", True, "auto"), ("warm limits", True, "off"),
          ("cold bwrap", False, "auto"), ("cold limits", False, "off"))


def candidates(n: int) -> list[tuple[Task, str]]:
    tasks = list_suite()[:n] or [load_task(str(p)) for p in sorted(FIXTURES.iterdir())]
    return [(replace(t, forbid=()), re.sub(r"\bModel\b", "ModelNew", t.reference_source)) for t in tasks]


def open_harness(warm: bool, confinement: str, budget: float, cache: Path, first: tuple[Task, str]):
    config = Config(cache_dir=cache, db_path=cache / "bench.db", warm_pool=warm, timing_budget_s=budget,
                    eval_timeout_s=600.0, sandbox_confinement=confinement)
    harness = Harness(config)
    startup = 0.0
    if warm:
        t0 = time.perf_counter()
        harness.evaluate(*first)
        startup = time.perf_counter() - t0
        # The spare worker imports torch in the background: let it finish before measuring.
        deadline = time.monotonic() + SPARE_WAIT_S
        while len(harness.pool.worker_pids()) < config.eval_workers and time.monotonic() < deadline:
            time.sleep(0.1)
    return harness, startup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--budget", type=float, default=0.2, help="timing_budget_s per side")
    args = parser.parse_args()
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
                    for label, harness in (order if round_ % 2 == 0 else order[::-1]):
                        t0 = time.perf_counter()
                        result = harness.evaluate(task, source)
                        wall = time.perf_counter() - t0
                        if result.status != "correct":
                            raise SystemExit(f"{label} {task.id}: {result.status}: {result.message}")
                        walls[label].append(wall)
                        overheads[label].append(wall - result.phases.get("model_calls", 0.0))
        finally:
            for harness in harnesses.values():
                harness.close()
    stats = {label: {"per_min": 60.0 * len(w) / sum(w), "wall_ms": 1000 * statistics.median(w),
                     "overhead_ms": 1000 * statistics.median(overheads[label])} for label, w in walls.items()}
    print(f"{len(work)} tasks x {args.rounds} rounds, timing budget {args.budget} s per side; "
          f"confinement: {', '.join(f'{k} = {v}' for k, v in modes.items())}")
    print(f"{'':32}" + "".join(f"{label:>13}" for label in stats))
    for name, key, fmt in (("evaluations per minute", "per_min", "{:.1f}"),
                           ("median wall per eval (ms)", "wall_ms", "{:.0f}"),
                           ("median overhead per eval (ms)", "overhead_ms", "{:.0f}")):
        print(f"{name:32}" + "".join(f"{fmt.format(s[key]):>13}" for s in stats.values()))
    pm = {label: s["per_min"] for label, s in stats.items()}
    print(f"warm pool vs cold, confined:     {pm['warm bwrap'] / pm['cold bwrap']:.2f}x evaluations per minute")
    print(f"warm pool vs cold, limits only:  {pm['warm limits'] / pm['cold limits']:.2f}x")
    print(f"cost of confinement, warm pool:  {100 * (1 - pm['warm bwrap'] / pm['warm limits']):+.1f}% evaluations per minute")
    print(f"cost of confinement, cold:       {100 * (1 - pm['cold bwrap'] / pm['cold limits']):+.1f}%")
    print("warm pool start-up (first evaluation, not counted): "
          + ", ".join(f"{label} {startup[label]:.2f} s" for label in stats if startup[label]))


if __name__ == "__main__":
    main()
