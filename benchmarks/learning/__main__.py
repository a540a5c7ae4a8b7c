"""python -m benchmarks.learning [--worlds W ...] [--sweep] [--seeds N] [--quick] [--out DIR] [--docs DIR]"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from benchmarks.learning.bench import MAX_WORKERS, run_all
from benchmarks.learning.config import WORLDS, SimConfig, sweep_worlds
from benchmarks.learning.report import write_all
from benchmarks.learning.runner import strategy_names

OUT = Path(__file__).parent / "out"


def main(argv: list[str] | None = None) -> int:
    sweep = sweep_worlds()
    ap = argparse.ArgumentParser(prog="python -m benchmarks.learning", description=__doc__)
    ap.add_argument(
        "--worlds", nargs="+", choices=list(WORLDS) + list(sweep), default=None, help=f"worlds to run (default: {' '.join(WORLDS)})"
    )
    ap.add_argument("--sweep", action="store_true", help=f"also run the report-noise sweep around the noisy world ({', '.join(sweep)})")
    ap.add_argument("--seeds", type=int, default=None, help="number of seeds (0..N-1); intervals need >= 2 (default 10; 2 with --quick)")
    ap.add_argument("--episodes", type=int, default=None, help="training episodes per family (default 40)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"output directory (default {OUT})")
    ap.add_argument("--quick", action="store_true", help="every world in the tiny CI configuration")
    ap.add_argument("--workers", type=int, default=None, help=f"processes (default and at most {MAX_WORKERS})")
    ap.add_argument("--strategies", nargs="+", choices=strategy_names(), default=None, help="subset of strategies")
    ap.add_argument("--docs", type=Path, default=None, help="also copy the tables and PNGs into this directory")
    args = ap.parse_args(argv)
    seeds = args.seeds if args.seeds is not None else (2 if args.quick else 10)
    if seeds < 1:
        ap.error("--seeds must be >= 1")
    if args.workers is not None and not 1 <= args.workers <= MAX_WORKERS:
        ap.error(f"--workers must lie in 1..{MAX_WORKERS}")
    if args.episodes is not None and args.episodes < 2:
        ap.error("--episodes must be >= 2")
    chosen = {**WORLDS, **sweep}
    names = list(args.worlds or WORLDS) + (list(sweep) if args.sweep else [])
    worlds = {n: _shape(chosen[n], args.quick, args.episodes) for n in dict.fromkeys(names)}
    started = time.perf_counter()
    results = run_all(worlds, range(seeds), args.strategies, args.workers, progress=True)
    wall = time.perf_counter() - started
    paths = write_all(results, args.out, wall)
    if args.docs:
        for p in paths:
            if p.suffix in (".md", ".png"):
                dest = args.docs / p.relative_to(args.out)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, dest)
    print((args.out / "summary.md").read_text(encoding="utf-8"))
    print(
        f"wrote {len(paths)} files under {args.out} in {wall:.0f} s ({next(iter(results.values()))['workers']} processes)", file=sys.stderr
    )
    return 0


def _shape(sim: SimConfig, quick: bool, episodes: int | None) -> SimConfig:
    if quick:
        sim = sim.tiny()
    if episodes is not None:
        sim = sim.replace(episodes_per_family=episodes, forget_window=min(sim.forget_window, episodes))
    return sim


if __name__ == "__main__":
    sys.exit(main())
