"""python -m benchmarks.learning [--seeds N] [--episodes N] [--out DIR] [--quick] [--docs DIR]"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from benchmarks.learning.bench import run_all
from benchmarks.learning.config import SimConfig
from benchmarks.learning.report import write
from benchmarks.learning.runner import strategy_names

OUT = Path(__file__).parent / "out"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.learning", description=__doc__)
    ap.add_argument("--seeds", type=int, default=10, help="number of seeds (0..N-1); intervals need >= 2 (default 10)")
    ap.add_argument("--episodes", type=int, default=None, help="training episodes per family (default 40; 20 with --quick)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"output directory (default {OUT})")
    ap.add_argument("--quick", action="store_true", help="half-length streams for a smoke run")
    ap.add_argument("--workers", type=int, default=None, help="processes (default: one per CPU)")
    ap.add_argument("--strategies", nargs="+", choices=strategy_names(), default=None, help="subset of strategies")
    ap.add_argument("--docs", type=Path, default=None, help="also copy results.md and the PNGs into this directory")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error("--seeds must be >= 1")
    sim = SimConfig().quick() if args.quick else SimConfig()
    if args.episodes is not None:
        if args.episodes < 2:
            ap.error("--episodes must be >= 2")
        sim = sim.replace(episodes_per_family=args.episodes, forget_window=min(sim.forget_window, args.episodes))
    started = time.perf_counter()
    results = run_all(sim, range(args.seeds), args.strategies, args.workers, progress=True)
    paths = write(results, args.out)
    if args.docs:
        args.docs.mkdir(parents=True, exist_ok=True)
        for p in paths:
            if p.suffix in (".md", ".png"):
                shutil.copy2(p, args.docs / p.name)
    print((args.out / "results.md").read_text(encoding="utf-8"))
    print(f"wrote {', '.join(str(p) for p in paths)} in {time.perf_counter() - started:.0f} s "
          f"({results['workers']} processes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
