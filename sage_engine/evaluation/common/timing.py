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
import math
import statistics
import time
from typing import Any, Callable

from sage_engine.evaluation.protocol.reports import TimingStats

# timer(call, n, before): runs call(0) .. call(n - 1) and returns seconds per
# call; `before(i)`, when given, runs ahead of call(i) outside the timed interval.
Timer = Callable[..., float]
Before = Callable[[int], Any]
_perf = time.perf_counter  # taken before any candidate code runs in the process that times
host_clock = _perf
# A very slow candidate (an interpreter) still stops after this many budgets,
# with at least three repetitions.
HARD_CAP_BUDGETS = 5.0
Z_95 = 1.96  # two-sided 95% for the order-statistic interval of a median
# Device calls shorter than this are timed several to an event pair: a
# pair's resolution (about half a microsecond) and the gap before the first
# launch would otherwise be a large share of each time.
PAIR_MIN_S = 50e-6
# Work still running on the device once the last end event completed (a
# kernel left on a side stream) is counted when it is more than this share of
# the sample, or this long: below both it is noise of the host's clock.
LEFTOVER_SHARE = 0.05
LEFTOVER_FLOOR_S = 50e-6


def perf_counter_timer(clock: Callable[[], float] = _perf) -> Timer:
    """A host-clock timer holding `clock` itself: taken when the timer is made
    (before the candidate loads), so rebinding this module's names from the
    candidate's process changes nothing the timer reads."""

    def timer(call: Callable[[int], Any], n: int, before: Before | None = None) -> float:
        if before is None:
            start = clock()
            for i in range(n):
                call(i)
            return (clock() - start) / n
        total = 0.0
        for i in range(n):
            before(i)
            start = clock()
            call(i)
            total += clock() - start
        return total / n

    return timer


class DeviceTimer:
    """Device time of calls on a `torch.cuda` / `torch.npu` style module,
    as KernelBench and `triton.testing.do_bench` measure it: events recorded
    on the current stream around each call, no host synchronisation between
    a start and its end record, so neither a host round trip nor the end
    event's launch is in the time.

    With `flush_mb`, a buffer that size is zeroed before every event pair, so
    each starts with a cold cache (256 MB covers an H100/H200 L2, 192 MB an
    Ascend 910B's). Calls under `PAIR_MIN_S` go several to a pair.

    With `before` (the inputs changed ahead of every call), each call has a
    pair of its own, as KernelBench and do_bench time them.

    Work a call leaves on another stream is not between its events. Once the
    last end event completed the device is synchronised and that wait timed
    on the host: if it held more than noise, the timer times every call from
    then on with the device synchronised before its end event (every stream
    counted; a host round trip again in each time) and says so in
    `leftover_seen`.

    The module's functions are taken when the timer is made, before any
    candidate code runs in the process: a candidate that replaces
    `torch.cuda.Event` or its methods later does not reach them.
    """

    def __init__(self, mod: Any, flush: Any = None, *, clock: Callable[[], float] = _perf):
        self.event = mod.Event
        self.record, self.elapsed_ms, self.wait = mod.Event.record, mod.Event.elapsed_time, mod.Event.synchronize
        self.device_sync = mod.synchronize
        self.flush = flush
        self.clock = clock
        self.all_streams = False
        self.leftover_seen = 0  # samples that left work running on other streams
        self.fastest = float("inf")  # per call, over every pair measured so far
        self.idle_sync_s = self._idle_sync()

    def _idle_sync(self) -> float:
        """What a device-wide synchronisation costs with nothing left to run."""
        # One event pair first: whatever the runtime sets up on first use is set up now.
        start, end = self.event(enable_timing=True), self.event(enable_timing=True)
        self.record(start)
        self.record(end)
        self.wait(end)
        self.elapsed_ms(start, end)
        times = []
        for _ in range(5):
            start = self.clock()
            self.device_sync()
            times.append(self.clock() - start)
        return statistics.median(times)

    @property
    def per_pair(self) -> int:
        return max(1, math.ceil(PAIR_MIN_S / self.fastest)) if self.fastest < PAIR_MIN_S else 1

    def __call__(self, call: Callable[[int], Any], n: int, before: Before | None = None) -> float:
        if self.all_streams:
            return self._all_streams(call, n, before)
        k = self.per_pair if before is None else 1
        pairs = []
        for first in range(0, n, k):
            m = min(k, n - first)
            if before is not None:
                before(first)
            if self.flush is not None:
                self.flush.zero_()
            start, end = self.event(enable_timing=True), self.event(enable_timing=True)
            self.record(start)
            for i in range(first, first + m):
                call(i)
            self.record(end)
            pairs.append((start, end, m))
        self.wait(pairs[-1][1])
        times = [(self.elapsed_ms(start, end) / 1000.0, m) for start, end, m in pairs]
        total = sum(t for t, _ in times)
        sync_start = self.clock()
        self.device_sync()
        left = self.clock() - sync_start - self.idle_sync_s
        if left > max(LEFTOVER_FLOOR_S, LEFTOVER_SHARE * total):
            self.leftover_seen += 1
            self.all_streams = True
            return self._all_streams(call, n, before)
        self.fastest = min(self.fastest, *(t / m for t, m in times))
        return total / n

    def _all_streams(self, call: Callable[[int], Any], n: int, before: Before | None = None) -> float:
        """Every call with the whole device synchronised before its end event."""
        total = 0.0
        for i in range(n):
            if before is not None:
                before(i)
            if self.flush is not None:
                self.flush.zero_()
            start, end = self.event(enable_timing=True), self.event(enable_timing=True)
            self.record(start)
            call(i)
            self.device_sync()
            self.record(end)
            self.wait(end)
            total += self.elapsed_ms(start, end) / 1000.0
        return total / n


def event_timer(device: str, flush_mb: int = 0) -> DeviceTimer:
    """A `DeviceTimer` on `torch.<device>` with a `flush_mb` cache-flush buffer."""
    import torch

    mod = getattr(torch, device)
    # Allocated on the host and moved: the same call works on every device module.
    flush = torch.empty(flush_mb << 20, dtype=torch.int8).to(device) if flush_mb else None
    return DeviceTimer(mod, flush)


TIMERS: dict[str, Callable[[], Timer]] = {
    "perf_counter": perf_counter_timer,
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


def stats(samples_s: list[float]) -> TimingStats:
    """One side's summary (milliseconds) from raw samples in seconds."""
    if not samples_s:
        raise ValueError("no timing samples")
    ms = sorted(s * 1000.0 for s in samples_s)
    if len(ms) >= 4:
        q = statistics.quantiles(ms, n=4, method="inclusive")
        iqr = q[2] - q[0]
    else:
        iqr = ms[-1] - ms[0]
    return TimingStats(median_ms=statistics.median(ms), iqr_ms=iqr, mean_ms=statistics.fmean(ms), min_ms=ms[0], reps=len(ms))


def median_interval(samples: list[float]) -> tuple[float, float]:
    """Distribution-free ~95% interval of the median: order statistics
    k and n-1-k with k = floor((n - 1.96 sqrt(n)) / 2)."""
    ordered = sorted(samples)
    n = len(ordered)
    k = max(0, int((n - Z_95 * n**0.5) // 2))
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
    between: Callable[[], None] | None = None,
) -> tuple[list[float], list[float]]:
    """Samples (seconds) for reference and candidate; each callable runs one
    sample and returns its time. `budget_s` is per side: the loop stops once
    both sides together used twice that, or earlier once `precision` > 0 and
    both medians are known to within it. `between` runs before each round,
    whichever side goes first (work between samples placed so that each
    side follows it as often as the other: what it does to the caches
    falls on both alike); its time is in the budget."""
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
            if between is not None:
                between()
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
