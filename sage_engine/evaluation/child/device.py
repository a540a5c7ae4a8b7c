"""Child-side helpers of the device backends (`npu`, `cuda`).

Runs in the sandbox child on the device host, so it imports only the
standard library, torch (and torch_npu on an NPU host) and SAGE's pure
child-side modules.

- Timers (`npu_timer`, `cuda_timer`, chosen by name through
  `timing.get_timer("...child.device:npu_timer")`): device events around each
  call, with a cache-sized buffer zeroed before every call so no run profits
  from the previous run's cache (192 MB on Ascend as triton-ascend's
  benchmark does, 256 MB on NVIDIA as KernelBench and Triton do).
- `device_name`: the hardware string results carry (from the reference process);
- `probe`: the runner behind `status()`: starts the device and runs one op in
  a process with exactly an evaluation's limits and sandbox;
- `npu_profile_us`: on an NPU, device-only time per call from the torch_npu
  profiler (sum of kernel time, no host or launch overhead), asked of each
  process after timing; `npu_op_profile`: the same statistics per op type,
  for the profile of where the time goes.
"""

from __future__ import annotations

import csv
import glob
import os
import shutil
import tempfile
from typing import Any, Callable

from sage_engine.evaluation.common import diagnostics, timing
from sage_engine.evaluation.protocol import KernelTime, Request, SideKernels
from sage_engine.evaluation.protocol.profile import MAX_KERNELS

NPU_FLUSH_MB = 192
CUDA_FLUSH_MB = 256
PROFILE_WARMUP = 3
PROFILE_ACTIVE = 20


def npu_timer() -> timing.Timer:
    return timing.event_timer("npu", NPU_FLUSH_MB)


def cuda_timer() -> timing.Timer:
    return timing.event_timer("cuda", CUDA_FLUSH_MB)


def device_name(device: str) -> str | None:
    import torch

    mod = getattr(torch, device, None)
    if mod is None or not hasattr(mod, "get_device_name"):
        return None
    return str(mod.get_device_name(0))


def probe(request: Request, emit: Any) -> dict[str, Any]:
    """Whether an evaluation can start the device: `{"available", "name"}`,
    or `{"available": False, "error"}` with what the runtime said. Runs as
    an evaluation's candidate process (same limits, same sandbox)."""
    import warnings

    import torch

    device = request.device
    mod = getattr(torch, device, None)
    if mod is None:
        return {"available": False, "error": f"this torch has no torch.{device} module"}
    with warnings.catch_warnings(record=True) as caught:
        # torch.cuda.is_available() reports a failed driver start as a warning and False.
        warnings.simplefilter("always")
        try:
            available = bool(mod.is_available()) and mod.device_count() > 0
            if available:
                x = torch.ones(4).to(device)
                float((x + x).sum())  # a context, an allocation and a kernel: what every evaluation needs
        except Exception as exc:  # noqa: BLE001 - the reason is the answer
            return {"available": False, "error": f"device start-up failed: {diagnostics.exception_text(exc)}"}
    if not available:
        said = "; ".join(str(w.message).strip() for w in caught)
        return {"available": False, "error": f"torch.{device}.is_available() is False" + (f": {said}" if said else "")}
    return {"available": True, "name": device_name(device)}


# --------------------------------------------------------------- NPU profiler


def op_statistic_rows(trace_dir: str) -> list[tuple[str, float, float]] | None:
    """(op type, count, total device µs) per row of the profiler's op_statistic CSV.

    CANN's msprof writes `op_statistic*.csv` with one row per op type and the
    columns `OP Type`, `Core Type`, `Count`, `Total Time(us)`, `Avg Time(us)`...
    """
    files = glob.glob(os.path.join(trace_dir, "**", "op_statistic*.csv"), recursive=True)
    if not files:
        return None
    rows = []
    with open(sorted(files)[0], newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            count, value = row.get("Count"), row.get("Total Time(us)")
            if value in (None, ""):
                avg = row.get("Avg Time(us)")
                if count in (None, "") or avg in (None, ""):
                    continue
                value = float(count) * float(avg)
            rows.append((str(row.get("OP Type") or "?"), float(count or 0), float(value)))
    return rows


def op_statistic_us(trace_dir: str) -> float | None:
    """Total device time (µs) over every op in the profiler's op_statistic CSV."""
    rows = op_statistic_rows(trace_dir)
    return None if rows is None else sum(total for _, _, total in rows)


def npu_profile_us(fn: Callable[[], Any], *, warmup: int = PROFILE_WARMUP, active: int = PROFILE_ACTIVE) -> float | None:
    """Mean device-only time of one call (µs), from the torch_npu profiler."""
    rows = _npu_op_rows(fn, warmup, active)
    return None if rows is None else sum(total for _, _, total in rows) / active


def npu_op_profile(fn: Callable[[], Any], calls: int) -> SideKernels:
    """Each op type's launches and device time per call (the `profile-kernels` reply on an NPU)."""
    import time

    start = time.perf_counter()
    rows = _npu_op_rows(fn, 1, calls)
    wall = time.perf_counter() - start
    if rows is None:
        return SideKernels(source="npu-ops", calls=calls, note="the torch_npu profiler wrote no op_statistic file")
    rows.sort(key=lambda r: -r[2])
    return SideKernels(
        source="npu-ops",
        calls=calls,
        kernels=[KernelTime(name, count / calls, total / calls) for name, count, total in rows[:MAX_KERNELS]],
        launches=sum(r[1] for r in rows) / calls,
        kernel_us=sum(r[2] for r in rows) / calls,
        wall_us=wall * 1e6 / (2 + calls),
    )


def _npu_op_rows(fn: Callable[[], Any], warmup: int, active: int) -> list[tuple[str, float, float]] | None:
    import torch
    import torch_npu

    trace_dir = tempfile.mkdtemp(prefix="sage-npu-prof-", dir=os.getcwd())
    try:
        prof_api = torch_npu.profiler
        with prof_api.profile(
            activities=[prof_api.ProfilerActivity.NPU],
            schedule=prof_api.schedule(wait=0, warmup=warmup, active=active, repeat=1, skip_first=1),
            on_trace_ready=prof_api.tensorboard_trace_handler(trace_dir),
            record_shapes=False,
            profile_memory=False,
            with_stack=False,
        ) as prof:
            for _ in range(1 + warmup + active):
                fn()
                prof.step()
                # torch_npu adds `torch.npu` when it loads; torch's own types have no such module.
                torch.npu.synchronize()  # type: ignore[attr-defined]
        return op_statistic_rows(trace_dir)
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)
