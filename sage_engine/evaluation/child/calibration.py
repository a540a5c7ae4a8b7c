"""The machine's measured limits: a runner routine (`measure`) that runs as an
evaluation's candidate process does (same sandbox, same limits, same thread
count), so the limits are what a candidate could reach there.

- Bandwidth at working sets from L1-sized to well past the last cache: the
  better of a copy (read and write: counted twice its size) and a sum (read
  only: CPUs that allocate a line before writing it move more bytes for a
  copy than it counts, so a reading kernel can beat a copy's rate).
- Matmul FLOP/s per dtype (float32, float16, bfloat16 where the device runs
  them), growing square sizes until one call is long enough to measure.
- What one smallest op costs back to back (a one-element add): the price of
  a launch, dispatch included, that no kernel avoids.

Each figure is the best of a few repetitions: noise from other work only
ever makes a repetition slower.
"""

from __future__ import annotations

from functools import partial

import math
import time
from typing import Any

# Working sets (bytes touched by one pass), four times apart so a cache's
# edge falls near one: 32 KiB fits any L1, 256 MiB is past any CPU's
# last-level cache; 1 GiB is past a GPU's L2 (tens of MB).
BANDWIDTH_SIZES = (1 << 15, 1 << 17, 1 << 19, 1 << 21, 1 << 23, 1 << 25, 1 << 27, 1 << 28)
DEVICE_BANDWIDTH_SIZES = BANDWIDTH_SIZES + (1 << 29, 1 << 30)
MATMUL_SIZES = (256, 512, 1024, 2048)
DEVICE_MATMUL_SIZES = MATMUL_SIZES + (4096, 8192)  # a GPU's tensor cores fill only at thousands
DTYPES = ("float32", "float16", "bfloat16")
REPETITIONS = 5
MATMUL_REPETITIONS = 3  # a matmul sample is long already (MATMUL_CALL_S)
SAMPLE_S = 0.01  # calls per repetition so one lasts this long: the clock's and the launch's cost vanish
MATMUL_CALL_S = 0.02  # a matmul size is large enough once one call takes this long


def measure(request: Any, emit: Any) -> dict[str, Any]:
    """`{"bandwidth": [{"bytes", "copy_gbps", "read_gbps"}...], "matmul_flops": {dtype: FLOP/s},
    "launch_us": µs, ...}`."""
    import torch

    start = time.perf_counter()
    device = torch.device(request.device)
    on_device = device.type != "cpu"
    emit.progress(0, 2, "measuring bandwidth")
    bandwidth = [measure_bandwidth(torch, device, size) for size in (DEVICE_BANDWIDTH_SIZES if on_device else BANDWIDTH_SIZES)]
    # The cost of one smallest op back to back: what a launch costs, whatever it does.
    one = torch.zeros(1, device=device)
    launch_us = 1e6 / best_rate(torch, device, lambda: one.add_(1), 1.0)
    emit.progress(1, 2, "measuring matmul FLOP/s")
    flops: dict[str, float] = {}
    notes: list[str] = []
    for name in DTYPES:
        try:
            flops[name] = measure_matmul(torch, device, getattr(torch, name), DEVICE_MATMUL_SIZES if on_device else MATMUL_SIZES)
        except (RuntimeError, TypeError) as exc:  # a dtype this device has no matmul for
            notes.append(f"{name}: {str(exc).splitlines()[0][:120]}")
    return {
        "bandwidth": bandwidth,
        "matmul_flops": flops,
        "launch_us": launch_us,
        "threads": torch.get_num_threads(),
        "seconds": time.perf_counter() - start,
        "notes": notes,
    }


def best_rate(torch: Any, device: Any, fn: Any, work: float, repetitions: int = REPETITIONS) -> float:
    """The best of REPETITIONS samples of `work` per second, each sample enough calls to last SAMPLE_S."""
    sync = getattr(torch, device.type).synchronize if device.type != "cpu" else (lambda: None)
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    calls = max(1, math.ceil(SAMPLE_S / max(time.perf_counter() - t0, 1e-9)))
    best = 0.0
    for _ in range(repetitions):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        best = max(best, work * calls / max(time.perf_counter() - t0, 1e-12))
    return best


def measure_bandwidth(torch: Any, device: Any, size: int) -> dict[str, float]:
    n = size // 4
    src = torch.ones(n // 2, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    copy = best_rate(torch, device, partial(dst.copy_, src), size) / 1e9
    del src, dst
    whole = torch.ones(n, dtype=torch.float32, device=device)
    read = best_rate(torch, device, lambda: whole.sum(), size) / 1e9
    return {"bytes": size, "copy_gbps": copy, "read_gbps": read}


def measure_matmul(torch: Any, device: Any, dtype: Any, sizes: tuple[int, ...]) -> float:
    best = 0.0
    for n in sizes:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        t0 = time.perf_counter()
        torch.matmul(a, b)
        if device.type != "cpu":
            getattr(torch, device.type).synchronize()
        first = time.perf_counter() - t0
        best = max(best, best_rate(torch, device, lambda: torch.matmul(a, b), 2.0 * n**3, MATMUL_REPETITIONS))
        if first >= MATMUL_CALL_S:
            break
    return best
