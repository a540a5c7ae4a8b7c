"""Where an evaluation's time goes, phase by phase, for the bundled suite's
examples: every check on, the default timing budget, the warm pool.

    python benchmarks/phases.py [--tasks 12] [--rounds 2] [--budget 2.0] [--json out.json]

Each task's first `cpu_*` example solution is the candidate. Per task, the
median over rounds of each phase a result carries (`result.phases`: each
side's set-up, correctness, variants, the timing, the fresh-input
re-measurement, the profile), the wall of `Harness.evaluate` and the
harness's overhead (that wall less the time inside model calls, the
children's own measure). The warm pool's start and the host's calibration
are paid once (a server pays them once) and printed apart. Phases that
overlap (reference and candidate run side by side) are shown each; the
wall is what an agent waits for.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sage_engine.config import Config  # noqa: E402
from sage_engine.evaluation.harness import Harness  # noqa: E402
from benchmarks.harness import evaluate_correct  # noqa: E402
from benchmarks.profile import examples  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--budget", type=float, default=Config.timing_budget_s, help="timing_budget_s per side")
    parser.add_argument("--json", type=Path, help="also write the medians here")
    args = parser.parse_args()
    work = examples(args.tasks)
    rows: dict[str, dict[str, list[float]]] = {task.id: {} for task, _ in work}
    with tempfile.TemporaryDirectory(prefix="sage-phases-") as tmp:
        cache = Path(tmp)
        config = Config(cache_dir=cache, db_path=cache / "bench.db", timing_budget_s=args.budget)
        with Harness(config) as harness:
            t0 = time.perf_counter()
            harness.backend("cpu").calibration()
            calibration = time.perf_counter() - t0
            t0 = time.perf_counter()
            harness.evaluate(*work[0])
            harness.pool.ready_pids(config.eval_workers, timeout=120.0)
            start = time.perf_counter() - t0
            for r in range(args.rounds):
                for task, source in work if r % 2 == 0 else work[::-1]:
                    result, wall = evaluate_correct(harness, task, source)
                    row = rows[task.id]
                    for name, seconds in {**result.phases, "wall": wall}.items():
                        row.setdefault(name, []).append(seconds)
                    row.setdefault("overhead", []).append(wall - result.phases.get("model_calls", 0.0))
    medians = {t: {k: statistics.median(v) for k, v in row.items()} for t, row in rows.items()}
    names = sorted({k for row in medians.values() for k in row} - {"wall", "overhead"})
    print(f"calibration {calibration:.1f} s and the pool's start {start:.1f} s, once per host (not counted below)")
    print("phase (seconds, median over rounds; per task, then the mean over tasks)")
    width = max(len(t) for t in medians)
    head = ["wall", "overhead", *names]
    print(f"{'task':<{width}} " + " ".join(f"{h[:12]:>12}" for h in head))
    for t, row in medians.items():
        print(f"{t:<{width}} " + " ".join(f"{row.get(h, 0.0):12.3f}" for h in head))
    mean = {h: statistics.fmean(row.get(h, 0.0) for row in medians.values()) for h in head}
    print(f"{'mean':<{width}} " + " ".join(f"{mean[h]:12.3f}" for h in head))
    print(f"evaluations a minute {60.0 / mean['wall']:.1f}; harness overhead {mean['overhead'] * 1000:.0f} ms an evaluation")
    if args.json:
        args.json.write_text(json.dumps({"tasks": medians, "mean": mean}, indent=1))


if __name__ == "__main__":
    main()
