"""Nsight Compute metrics of the candidate's kernels (cuda, on request).

`run` is a runner routine: in the evaluation's sandbox it starts `ncu` on a
fresh interpreter running `python -m sage_engine.evaluation.child.ncu`
(`main` below), which builds the candidate on the timed case's inputs,
calls it once to warm up, then once more inside the NVTX range ncu is told
to profile. ncu replays each kernel of that range to read its counters:
seconds per kernel, so it never runs during timing and only when asked.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from typing import Any

from sage_engine.evaluation.protocol import Request

RANGE = "sage-candidate"
METRICS = (
    "gpu__time_duration.sum",  # the kernel's device time (ns)
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",  # memory bandwidth used, % of the device's peak
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",  # compute used, % of peak
    "sm__warps_active.avg.pct_of_peak_sustained_active",  # achieved occupancy
    "launch__registers_per_thread",
)
LAUNCH_COUNT = 50  # kernels profiled at most: each is replayed once per counter pass
MAX_ROWS = 12
TIMEOUT_SHARE = 0.8  # of the request's time: what is left reports why ncu stopped


def run(request: Request, emit: Any) -> dict[str, Any]:
    """`{"kernels": [{"kernel", metric: value...}]}`, or `{"error": what ncu said}`."""
    spec = os.path.join(os.getcwd(), "ncu-request.json")
    with open(spec, "w", encoding="utf-8") as fh:
        json.dump(request.to_dict(), fh)
    command = [
        request.runner_args["ncu"],
        "--csv",
        "--page",
        "raw",
        "--metrics",
        ",".join(METRICS),
        "--target-processes",
        "all",
        "--nvtx",
        "--nvtx-include",
        f"{RANGE}/",
        "--launch-count",
        str(LAUNCH_COUNT),
        sys.executable,
        "-m",
        "sage_engine.evaluation.child.ncu",
        spec,
    ]
    emit.progress(0, 1, "profiling the candidate's kernels with Nsight Compute")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=request.timeout_s * TIMEOUT_SHARE, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"ncu did not finish within {request.timeout_s * TIMEOUT_SHARE:.0f} s"}
    rows = parse_csv(done.stdout)
    if done.returncode != 0 or not rows:
        said = [line for line in (done.stdout + "\n" + done.stderr).splitlines() if line.strip()]
        return {"error": f"ncu exited with {done.returncode}: " + " | ".join(said[-3:])[:400]}
    return {"kernels": rows[:MAX_ROWS]}


def parse_csv(text: str) -> list[dict[str, Any]]:
    """ncu's raw page: a header row, a units row, then one row per kernel launch."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    table = list(csv.reader(lines))
    if len(table) < 3 or "Kernel Name" not in table[0]:
        return []
    header = table[0]
    out = []
    for row in table[2:]:
        record = dict(zip(header, row))
        entry: dict[str, Any] = {"kernel": record.get("Kernel Name", "?")[:200]}
        for metric in METRICS:
            value = record.get(metric, "").replace(",", "")
            try:
                entry[metric] = float(value)
            except ValueError:
                continue
        out.append(entry)
    return out


def main(spec_path: str) -> None:
    """Under ncu: the candidate on the timed case's inputs, the second call inside the profiled range."""
    import torch

    from sage_engine.evaluation.child.side import TaskSide

    with open(spec_path, encoding="utf-8") as fh:
        request = Request.from_dict(json.load(fh))
    case = int(request.runner_args.get("case", 0))
    side = TaskSide(request)
    module = side.load_reference(request.task.cases[case])
    side.reseed(request.task.seed)
    init = side.task_call("get_init_inputs()", module.get_init_inputs)
    path = os.path.join(os.getcwd(), "candidate.py")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(request.candidate_source)
    spec = importlib.util.spec_from_file_location("candidate", path)
    if spec is None or spec.loader is None:  # a .py path always has a spec and a loader
        raise ImportError(f"cannot load {path}")
    candidate = importlib.util.module_from_spec(spec)
    sys.modules["candidate"] = candidate
    spec.loader.exec_module(candidate)
    side.reseed(request.task.seed)
    model = candidate.ModelNew(*init)
    if isinstance(model, torch.nn.Module):
        model = model.to(side.device)
    values = side.inputs(module, request.task.seed)
    with torch.no_grad():
        model(*values)
        torch.cuda.synchronize()
        with torch.cuda.nvtx.range(RANGE):
            model(*values)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1])
