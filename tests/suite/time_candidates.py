"""Times each task's reference and its cpu_* candidates on one thread at the default sizes.

Not a test: run `python tests/suite/time_candidates.py [task ...]` (add
`--reference-only` to calibrate sizes, `--wall` to time wall-clock instead of
process CPU time). Set TORCH_EXTENSIONS_DIR to reuse built C++ candidates.

CPU time is the default because with one thread it measures the work done,
which stays meaningful on a machine shared with other jobs; wall-clock does not.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite_check as sc  # noqa: E402

REPS = 60
WARMUP = 3


CLOCK = time.process_time


def _once_ms(fn) -> float:
    start = CLOCK()
    fn()
    return (CLOCK() - start) * 1e3


def _median_ms(*fns) -> list[float]:
    """Median time of each function; calls alternate so machine drift hits all of them alike."""
    for fn in fns:
        for _ in range(WARMUP):
            fn()
    samples = [[] for _ in fns]
    for _ in range(REPS):
        for fn, out in zip(fns, samples):
            out.append(_once_ms(fn))
    return [statistics.median(s) for s in samples]


def _model(cls, init_inputs, seed):
    torch.manual_seed(seed)
    return cls(*init_inputs).eval()


def main(argv: list[str]) -> int:
    global CLOCK
    torch.set_num_threads(1)
    if "--wall" in argv:
        CLOCK = time.perf_counter
    reference_only = "--reference-only" in argv
    ids = [a for a in argv if not a.startswith("--")] or sc.task_ids()
    print(f"{'task':28} {'candidate':28} {'ref ms':>8} {'cand ms':>8} {'speedup':>8}")
    for task_id in ids:
        seed = sc.task_meta(task_id).get("seed", sc.DEFAULT_SEED)
        ref, init_inputs, inputs = sc.build_case(task_id, {}, seed)
        reference = _model(ref.Model, init_inputs, seed)
        with torch.no_grad():
            (ref_ms,) = _median_ms(lambda: reference(*inputs))
            paths = [] if reference_only else sc.solutions(task_id, "cpu_")
            if not paths:
                print(f"{task_id:28} {'-':28} {ref_ms:8.3f}")
            for path in paths:
                candidate = _model(sc.load_module(path).ModelNew, init_inputs, seed)
                ref_ms, cand_ms = _median_ms(lambda: reference(*inputs), lambda: candidate(*inputs))
                print(f"{task_id:28} {path.stem:28} {ref_ms:8.3f} {cand_ms:8.3f} {ref_ms / cand_ms:8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
