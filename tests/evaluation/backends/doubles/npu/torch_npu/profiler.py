"""TEST DOUBLE of torch_npu.profiler: times each step with perf_counter and,
when the schedule's active steps end, writes `op_statistic.csv` with CANN's
columns under `<dir>/double_ascend_pt/ASCEND_PROFILER_OUTPUT/`."""

from __future__ import annotations

import csv
import os
import time


class ProfilerActivity:
    CPU = "cpu"
    NPU = "npu"


def schedule(*, wait: int = 0, warmup: int = 0, active: int = 1, repeat: int = 1, skip_first: int = 0):
    return {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat, "skip_first": skip_first}


def tensorboard_trace_handler(dir_name: str):
    def handler(prof: "profile") -> None:
        out = os.path.join(dir_name, "double_ascend_pt", "ASCEND_PROFILER_OUTPUT")
        os.makedirs(out, exist_ok=True)
        times = prof.active_times_us
        with open(os.path.join(out, "op_statistic.csv"), "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(
                ["Device_id", "OP Type", "Core Type", "Count", "Total Time(us)", "Avg Time(us)", "Min Time(us)", "Max Time(us)", "Ratio(%)"]
            )
            total = sum(times)
            writer.writerow(
                [
                    0,
                    "DoubleForward",
                    "AI_VECTOR_CORE",
                    len(times),
                    f"{total:.3f}",
                    f"{total / max(1, len(times)):.3f}",
                    f"{min(times, default=0):.3f}",
                    f"{max(times, default=0):.3f}",
                    "100",
                ]
            )

    return handler


class profile:
    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None, **_kwargs):
        self.schedule = schedule or {"wait": 0, "warmup": 0, "active": 1, "repeat": 1, "skip_first": 0}
        self.on_trace_ready = on_trace_ready
        self.step_num = 0
        self.active_times_us: list[float] = []
        self._t = time.perf_counter()

    def __enter__(self):
        self._t = time.perf_counter()
        return self

    def step(self) -> None:
        s = self.schedule
        now = time.perf_counter()
        first_active = s["skip_first"] + s["wait"] + s["warmup"]
        if first_active <= self.step_num < first_active + s["active"]:
            self.active_times_us.append((now - self._t) * 1e6)
        self.step_num += 1
        self._t = time.perf_counter()

    def __exit__(self, *exc):
        if self.on_trace_ready is not None and exc[0] is None:
            self.on_trace_ready(self)
        return False
