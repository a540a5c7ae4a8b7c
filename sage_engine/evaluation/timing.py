"""Timing reference and candidate fairly.

`measure_alternating` runs in the worker: each side is a callable that runs
one sample in its own process (same thread count) and returns its seconds.
After warm-ups they alternate in rounds (ABBA order, so neither side always
runs second, right after the other warmed the caches) until both have at
least `min_reps` and either both medians are known to `precision` or the
time budget is spent, or `max_reps` is reached. Medians and IQR, never a
single time: shared machines are noisy.

A timer is chosen by name: `perf_counter` (the worker's clock around each
command, the default), or for device backends `cuda-event`, `npu-event`, or
`"package.module:factory"` where `factory()` returns a timer; those run in
the child, around a batch of calls and a sync of every stream.
"""

from __future__ import annotations

import gc
import importlib
import statistics
import time
from typing import Any, Callable

Timer = Callable[[Callable[[], Any]], float]  # runs fn once, returns seconds
# A very slow candidate (an interpreter) still stops after this many budgets,
# with at least three repetitions.
HARD_CAP_BUDGETS = 5.0
Z_95 = 1.96  # two-sided 95% for the order-statistic interval of a median


def perf_counter_timer(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def event_timer(device: str, flush_mb: int = 0) -> Timer:
    """Device-event timing for `torch.cuda` / `torch.npu` style modules.
    With `flush_mb`, a buffer that size is zeroed before every run so each
    one starts with a cold cache (256 MB covers an H100/H200 L2, 192 MB an
    Ascend 910B's)."""
    import torch

    mod = getattr(torch, device)
    # Allocated on the host and moved: the same call works on every device module.
    flush = torch.empty(flush_mb << 20, dtype=torch.int8).to(device) if flush_mb else None

    def timer(fn: Callable[[], Any]) -> float:
        if flush is not None:
            flush.zero_()
        start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
        start.record()
        fn()
        # Every stream, not just the current one: work left on a side stream
        # counts, since the end event is recorded only once it is done.
        mod.synchronize()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0

    return timer


TIMERS: dict[str, Callable[[], Timer]] = {
    "perf_counter": lambda: perf_counter_timer,
    "cuda-event": lambda: event_timer("cuda"),
    "npu-event": lambda: event_timer("npu"),
}


def get_timer(name: str) -> Timer:
    if name in TIMERS:
        return TIMERS[name]()
    if ":" in name:
        module, _, attr = name.partition(":")
        return getattr(importlib.import_module(module), attr)()
    raise ValueError(f"unknown timer {name!r}; known: {', '.join(TIMERS)} or 'module:factory'")


def stats(samples_s: list[float]) -> dict[str, float | int]:
    """TimingStats fields (milliseconds) from raw samples in seconds."""
    if not samples_s:
        raise ValueError("no timing samples")
    ms = sorted(s * 1000.0 for s in samples_s)
    if len(ms) >= 4:
        q = statistics.quantiles(ms, n=4, method="inclusive")
        iqr = q[2] - q[0]
    else:
        iqr = ms[-1] - ms[0]
    return {
        "median_ms": statistics.median(ms),
        "iqr_ms": iqr,
        "mean_ms": statistics.fmean(ms),
        "min_ms": ms[0],
        "reps": len(ms),
    }


def median_interval(samples: list[float]) -> tuple[float, float]:
    """Distribution-free ~95% interval of the median: order statistics
    k and n-1-k with k = floor((n - 1.96 sqrt(n)) / 2)."""
    ordered = sorted(samples)
    n = len(ordered)
    k = max(0, int((n - Z_95 * n ** 0.5) // 2))
    return ordered[k], ordered[n - 1 - k]


def known_to(samples: list[float], precision: float) -> bool:
    """Whether the median's interval lies within +-precision of it."""
    if precision <= 0 or len(samples) < 2:
        return False
    lo, hi = median_interval(samples)
    mid = statistics.median(samples)
    return mid > 0 and (hi - lo) / 2 <= precision * mid


def measure_alternating(
    reference: Callable[[], float],
    candidate: Callable[[], float],
    *,
    warmup: int = 3,
    min_reps: int = 10,
    max_reps: int = 200,
    budget_s: float = 2.0,
    precision: float = 0.0,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[list[float], list[float]]:
    """Samples (seconds) for reference and candidate; each callable runs one
    sample and returns its time. `budget_s` is per side: the loop stops once
    both sides together used twice that, or earlier once `precision` > 0 and
    both medians are known to within it."""
    for _ in range(warmup):
        reference()
        candidate()
    ref_s: list[float] = []
    cand_s: list[float] = []
    gc.collect()
    gc_was_enabled = gc.isenabled()
    # A collection in the middle of one side's sample would be charged to it.
    gc.disable()
    try:
        start = clock()
        rounds = 0
        while True:
            if rounds % 2 == 0:
                ref_s.append(reference())
                cand_s.append(candidate())
            else:
                cand_s.append(candidate())
                ref_s.append(reference())
            rounds += 1
            elapsed = clock() - start
            if rounds >= max_reps:
                break
            if rounds >= min_reps and (elapsed >= 2 * budget_s or known_to(ref_s, precision) and known_to(cand_s, precision)):
                break
            if rounds >= 3 and elapsed >= 2 * budget_s * HARD_CAP_BUDGETS:
                break
    finally:
        if gc_was_enabled:
            gc.enable()
    return ref_s, cand_s


def speedup(reference_median_ms: float, candidate_median_ms: float) -> float | None:
    if candidate_median_ms <= 0:
        return None
    return reference_median_ms / candidate_median_ms
