"""What the profile costs an evaluation on the cpu backend: the same bundled
examples evaluated with the profile on and off, side by side in one run.

    python benchmarks/profile.py [--tasks 8] [--rounds 3] [--budget 2.0]

Each task's first `cpu_*` example solution is the candidate. The two
set-ups (two harnesses, each with its warm pool) take turns task by task,
in reverse order every other round, so a machine that gets busier slows
both alike. Reported per task: the fastest wall time of `Harness.evaluate`
off and on over the rounds (a busy machine only ever adds time), their
ratio, and the profile phase itself (its share of the evaluation with it
on: the cost measured directly, which other load hardly blurs); then the
ratio of the totals, the median ratio and the profile phase's share of all
time on. The host's calibration is measured once before (its seconds are
printed apart: a host pays it once). Goal: the profile adds at most 20%.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sage_engine.config import Config  # noqa: E402
from sage_engine.evaluation.harness import Harness  # noqa: E402
from sage_engine.evaluation.host.tasks import Task, list_suite  # noqa: E402

GOAL = 1.20


def examples(n: int) -> list[tuple[Task, str]]:
    found = []
    for task in list_suite():
        cpu = sorted(name for name in task.examples if name.startswith("cpu_"))
        if cpu:
            found.append((task, task.examples[cpu[0]].read_text()))
    return found[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=Config.timing_budget_s, help="timing_budget_s per side")
    args = parser.parse_args()
    work = examples(args.tasks)
    with tempfile.TemporaryDirectory(prefix="sage-profile-bench-") as tmp:
        cache = Path(tmp)
        base = Config(cache_dir=cache, db_path=cache / "bench.db", timing_budget_s=args.budget)
        harnesses = {"off": Harness(base.replace(profile=False)), "on": Harness(base)}
        try:
            t0 = time.perf_counter()
            limits = harnesses["on"].backend("cpu").calibration()
            print(f"calibration: {time.perf_counter() - t0:.1f} s, once per host ({limits.path})")
            for h in harnesses.values():
                h.evaluate(*work[0])  # each warm pool started, not counted
            walls: dict[str, dict[str, list[float]]] = {t.id: {"off": [], "on": [], "phase": []} for t, _ in work}
            for r in range(args.rounds):
                order = ("off", "on") if r % 2 == 0 else ("on", "off")
                for task, source in work if r % 2 == 0 else work[::-1]:
                    for setup in order:
                        result = harnesses[setup].evaluate(task, source)
                        if result.status != "correct":
                            raise SystemExit(f"{task.id}: {result.status}: {result.message}")
                        walls[task.id][setup].append(result.duration_s)
                        if setup == "on":
                            walls[task.id]["phase"].append(result.phases.get("profile", 0.0))
        finally:
            for h in harnesses.values():
                h.close()
    print(f"{'task':<22} {'off s':>7} {'on s':>7} {'ratio':>6} {'profile s':>10} {'share':>6}")
    ratios, total_off, total_on, total_phase, all_on = [], 0.0, 0.0, 0.0, 0.0
    for task_id, w in walls.items():
        off, on, phase = min(w["off"]), min(w["on"]), statistics.median(w["phase"])
        ratios.append(on / off)
        total_off, total_on = total_off + off, total_on + on
        total_phase, all_on = total_phase + sum(w["phase"]), all_on + sum(w["on"])
        print(f"{task_id:<22} {off:7.2f} {on:7.2f} {on / off:6.2f} {phase:10.3f} {phase / on:6.1%}")
    total = total_on / total_off
    print(
        f"profile on / off: total {total:.3f}, median per task {statistics.median(ratios):.3f}; the profile phase "
        f"is {total_phase / all_on:.1%} of the time with it on (goal: at most {GOAL - 1:.0%} added: "
        f"{'met' if total <= GOAL else 'not met'})"
    )


if __name__ == "__main__":
    main()
