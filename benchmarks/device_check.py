"""Is SAGE's device path true on this GPU? One stage at a time, each a table
and a JSON file, each with the goals it checks.

    python -m benchmarks.device_check STAGE [--kernelbench PATH] [--out DIR]

`scripts/device-check` runs every stage under its own time limit (a GPU host
is often at hand only for minutes) and prints the summary. Stages:

- `tests`: the project's GPU tests (`pytest -m gpu`).
- `timing`: for a handful of KernelBench level-1 references (a checkout's
  `KernelBench/level1`, else bundled tasks), SAGE's reference median beside
  `triton.testing.do_bench` and KernelBench's CUDA-event timing (L2 flushed),
  both measured here, in one process, on the same seeded inputs. Goal:
  every SAGE median within +-3% of do_bench's.
- `fused`: a fused Triton tanh-GELU (`benchmarks/device/`) against the eager
  reference: SAGE's speedup beside do_bench's ratio. Goal: within +-5%.
- `hostile`: GPU candidates that cheat (work on a side stream, patched
  event timer, cached outputs, a mutated input) and SAGE's verdicts.
- `profile`: this GPU's calibrated limits, then where the time goes for the
  fused Triton GELU (goal: memory-bound, at most 1.1x the measured
  bandwidth, fewer kernels than the eager reference, a kernel of its own)
  and for a cuBLAS matmul evaluated as its own candidate (goal:
  compute-bound, at most 1.1x the measured matmul peak, no kernel of its own).
- `wall`: one evaluation of the fused GELU, start to end, SAGE beside
  KernelBench's evaluator (with a checkout). Goal: at most 1.5x.
- `level1` (asked for by name, with a checkout): all of KernelBench level 1
  at full size through `sage suite check --jobs N`. Goals: at most 6
  minutes, >= 99% correct, median self-speedup 0.98-1.02.

SAGE must be installed in this interpreter (`pip install .`: the sandboxed
children import it without PYTHONPATH). Run from the repository root. With
no GPU (`torch.cuda.is_available()` False) a stage says so and fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import re
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
DEVICE = ROOT / "benchmarks" / "device"
KB_TIMING = (
    "1_Square_matrix_multiplication_.py",
    "63_conv_standard_2D__square_input__square_kernel.py",
    "95_CrossEntropyLoss.py",
    "10_3D_tensor_matrix_multiplication.py",
    "6_Matmul_with_large_K_dimension_.py",
    "40_LayerNorm.py",
)
BUNDLED_TIMING = ("matmul", "softmax", "layer_norm", "cross_entropy")
TIMING_GOAL = 0.03  # a SAGE reference median within 3% of do_bench's
FUSED_GOAL = 0.05  # the fused kernel's speedup within 5% of do_bench's ratio
KB_TRIALS = 100  # KernelBench's cuda_event method: 100 timed trials after 5 warm-ups, the first discarded
KB_WARMUP = 5
L2_FLUSH_BYTES = 256 << 20  # what KernelBench writes to thrash the L2 (H200: 60 MB of L2)
HOSTILE_EXPECTED = {"side_stream": "counted", "patches_event_timer": "rejected", "caches_output": "rejected", "mutates_input": "rejected"}


# ----------------------------------------------------------------- SAGE side


SMALL_CASE = {"rows": 256, "cols": 256}  # --small: the fused task's size for a smoke run on a CPU


def sage_config(args: argparse.Namespace, tmp: Path):
    from sage_engine.config import Config

    changes: dict[str, Any] = dict(timing_budget_s=0.1, timing_min_reps=4, timing_warmup=1) if args.small else {}
    return Config(db_path=tmp / "memory.db", cache_dir=tmp / "cache", backend="cuda", correctness_trials=2, eval_timeout_s=300.0, **changes)


def own_candidate(source: str) -> str:
    """The reference renamed to ModelNew: a candidate that is the reference."""
    return re.sub(r"\bModel\b", "ModelNew", source)


def evaluate(harness: Any, task: Any, source: str, trials: int = 2) -> tuple[Any, float]:
    start = time.monotonic()
    result = harness.evaluate(task, source, backend="cuda", trials=trials)
    return result, time.monotonic() - start


# ------------------------------------------------------------ in this process


def task_module(task: Any, case: dict[str, Any]) -> types.ModuleType:
    """The task's reference module with the timed case's sizes applied."""
    import torch

    module = types.ModuleType(f"_check_{task.id}")
    exec(compile(task.reference_source, str(task.reference_path or task.id), "exec"), module.__dict__)
    for key, value in case.items():
        module.__dict__[key] = getattr(torch, value) if isinstance(value, str) and hasattr(torch, value) else value
    return module


def model_and_inputs(task: Any, case: dict[str, Any], candidate: str | None = None) -> tuple[Any, list[Any]]:
    """The reference's Model (or `candidate`'s ModelNew) and inputs, built as
    SAGE's reference process builds them: seeded, then moved to the GPU."""
    import torch

    module = task_module(task, case)
    torch.manual_seed(task.seed)
    init = module.get_init_inputs()
    cls = module.Model
    if candidate is not None:
        namespace: dict[str, Any] = {"__name__": "candidate"}
        exec(compile(candidate, "candidate.py", "exec"), namespace)
        cls = namespace["ModelNew"]
    torch.manual_seed(task.seed)
    model = cls(*init)
    if isinstance(model, torch.nn.Module):
        model = model.to("cuda")
    torch.manual_seed(task.seed)
    inputs = [v.to("cuda") if isinstance(v, torch.Tensor) else v for v in module.get_inputs()]
    return model, inputs


def do_bench_ms(fn: Callable[[], Any]) -> float | None:
    """triton.testing.do_bench's median, or None where triton has no GPU driver."""
    try:
        from triton.testing import do_bench

        return float(do_bench(fn, return_mode="median"))
    except Exception as exc:  # noqa: BLE001 - reported, the other columns still stand
        print(f"do_bench unavailable: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


def kernelbench_events_ms(fn: Callable[[], Any]) -> float:
    """KernelBench's `cuda_event` timing: per trial, synchronise, thrash the
    L2 with a 256 MB fill, events around the call, synchronise; the median."""
    import statistics

    import torch

    for _ in range(KB_WARMUP):
        fn()
        torch.cuda.synchronize()
    # KernelBench allocates its 256 MB per trial; after the first the caching allocator hands the same block back.
    dummy = torch.empty(L2_FLUSH_BYTES // 8, dtype=torch.int64).to("cuda")
    times = []
    for trial in range(KB_TRIALS + 1):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dummy.fill_(42)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        if trial:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def in_process_ms(task: Any, case: dict[str, Any], candidate: str | None = None) -> dict[str, float | None]:
    """do_bench and KernelBench events for the reference (or `candidate`'s ModelNew) on the task's inputs."""
    import torch

    try:
        model, inputs = model_and_inputs(task, case, candidate)
        with torch.no_grad():
            fn = lambda: model(*inputs)  # noqa: E731
            return {"do_bench_ms": do_bench_ms(fn), "kernelbench_ms": kernelbench_events_ms(fn)}
    finally:
        model = inputs = fn = None  # the task's tensors go before the next one's
        gc.collect()
        torch.cuda.empty_cache()


# ------------------------------------------------------------------- stages


def stage_tests(args: argparse.Namespace) -> dict[str, Any]:
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-o", "addopts=", str(ROOT / "tests")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
    return {"rows": [{"line": line} for line in tail], "goals": [{"goal": "the GPU tests pass", "met": proc.returncode == 0}]}


def timing_tasks(args: argparse.Namespace) -> list[Any]:
    from sage_engine.evaluation.host.tasks import load_task

    if args.kernelbench:
        level1 = Path(args.kernelbench) / "KernelBench" / "level1"
        return [load_task(level1 / name) for name in KB_TIMING if (level1 / name).is_file()]
    return [load_task(name) for name in BUNDLED_TIMING]


def stage_timing(args: argparse.Namespace) -> dict[str, Any]:
    from sage_engine.evaluation.harness import Harness

    rows = []
    with tempfile.TemporaryDirectory(dir=args.scratch) as tmp, Harness(sage_config(args, Path(tmp))) as harness:
        for task in timing_tasks(args):
            # The reference calls the operator its task forbids a candidate: lifted for this one, as `sage suite check` does.
            result, wall = evaluate(harness, dataclasses.replace(task, forbid=()), own_candidate(task.reference_source), trials=1)
            row: dict[str, Any] = {"task": task.id, "status": result.status, "wall_s": round(wall, 1)}
            if result.status == "correct" and result.reference_timing is not None:
                case = result.compile_info.timed_case or {}
                row.update(sage_ms=result.reference_timing.median_ms, self_speedup=result.speedup, **in_process_ms(task, case))
                if row["do_bench_ms"]:
                    row["sage_over_do_bench"] = row["sage_ms"] / row["do_bench_ms"]
            else:
                row["message"] = result.message[:300]
            rows.append(row)
            print(json.dumps(row), flush=True)
    ratios = [r.get("sage_over_do_bench") for r in rows]
    met = bool(rows) and all(r is not None and abs(r - 1) <= TIMING_GOAL for r in ratios)
    return {"rows": rows, "goals": [{"goal": f"every SAGE reference median within +-{TIMING_GOAL:.0%} of do_bench's", "met": met}]}


def fused_task(args: argparse.Namespace) -> Any:
    import dataclasses

    from sage_engine.evaluation.host.tasks import load_task

    task = load_task(DEVICE / "gelu_tanh.py")
    return dataclasses.replace(task, cases=(SMALL_CASE,)) if args.small else task


def stage_fused(args: argparse.Namespace) -> dict[str, Any]:
    from sage_engine.evaluation.harness import Harness

    task, candidate = fused_task(args), (DEVICE / "gelu_tanh_triton.py").read_text()
    with tempfile.TemporaryDirectory(dir=args.scratch) as tmp, Harness(sage_config(args, Path(tmp))) as harness:
        result, wall = evaluate(harness, task, candidate)
    row: dict[str, Any] = {
        "task": task.id,
        "status": result.status,
        "wall_s": round(wall, 1),
        "sage_speedup": result.speedup,
        "message": result.message[:300],
    }
    if result.status == "correct":
        case = task.case_rows[0]
        reference, fused = in_process_ms(task, case), in_process_ms(task, case, candidate)
        row.update(
            reference_do_bench_ms=reference["do_bench_ms"],
            fused_do_bench_ms=fused["do_bench_ms"],
            reference_kernelbench_ms=reference["kernelbench_ms"],
            fused_kernelbench_ms=fused["kernelbench_ms"],
        )
        if reference["do_bench_ms"] and fused["do_bench_ms"]:
            row["do_bench_speedup"] = reference["do_bench_ms"] / fused["do_bench_ms"]
        row["kernelbench_speedup"] = reference["kernelbench_ms"] / fused["kernelbench_ms"]
    print(json.dumps(row), flush=True)
    ratio = (row["sage_speedup"] / row["do_bench_speedup"]) if row.get("do_bench_speedup") and row["sage_speedup"] else None
    return {
        "rows": [row],
        "goals": [
            {
                "goal": f"the fused kernel's speedup within +-{FUSED_GOAL:.0%} of do_bench's",
                "met": ratio is not None and abs(ratio - 1) <= FUSED_GOAL,
            }
        ],
    }


def verdict(result: Any) -> str:
    """What SAGE made of a cheating candidate, in one word."""
    if result.status in ("rejected", "incorrect"):
        return "rejected"
    if result.status == "correct":
        checks = result.compile_info.checks
        other_streams = (checks.other_streams if checks is not None else None) or []
        if "candidate" in other_streams and (result.speedup or 0) < 1.5:
            return "counted"
        return "believed"
    return result.status


def stage_hostile(args: argparse.Namespace) -> dict[str, Any]:
    from sage_engine.evaluation.harness import Harness

    task, rows = fused_task(args), []
    with tempfile.TemporaryDirectory(dir=args.scratch) as tmp, Harness(sage_config(args, Path(tmp))) as harness:
        for name, expected in HOSTILE_EXPECTED.items():
            result, wall = evaluate(harness, task, (DEVICE / "hostile" / f"{name}.py").read_text())
            row = {
                "candidate": name,
                "expected": expected,
                "verdict": verdict(result),
                "status": result.status,
                "speedup": result.speedup,
                "wall_s": round(wall, 1),
                "message": result.message[:300],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    return {
        "rows": rows,
        "goals": [
            {"goal": "every hostile GPU candidate gets its expected verdict", "met": all(r["verdict"] == r["expected"] for r in rows)}
        ],
    }


def kernelbench_evaluator(root: Path) -> Callable[..., Any]:
    """KernelBench's own `eval_kernel_against_ref`, from a checkout. Its
    package imports LLM clients at module level that the evaluator never
    calls: where they are not installed they are stood in for by empty modules."""
    sys.path.insert(0, str(root / "src"))
    for name in ("openai", "litellm", "dotenv"):
        try:
            __import__(name)
        except ImportError:
            module = types.ModuleType(name)
            module.load_dotenv = lambda *args, **kwargs: None  # what kernelbench reads of dotenv
            sys.modules[name] = module
    from kernelbench.eval import eval_kernel_against_ref

    return eval_kernel_against_ref


def stage_wall(args: argparse.Namespace) -> dict[str, Any]:
    """One evaluation of the fused GELU, start to end: SAGE (every check, two
    processes) beside KernelBench's evaluator (5 correctness trials, 100
    timed runs, in this process); each twice, the second one warm."""
    from sage_engine.evaluation.harness import Harness

    task, candidate = fused_task(args), (DEVICE / "gelu_tanh_triton.py").read_text()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=args.scratch) as tmp, Harness(sage_config(args, Path(tmp))) as harness:
        for run in ("first", "warm"):
            result, wall = evaluate(harness, task, candidate)
            rows.append(
                {
                    "evaluator": "sage",
                    "run": run,
                    "wall_s": round(wall, 2),
                    "status": result.status,
                    "speedup": result.speedup,
                    "phases": {k: round(v, 2) for k, v in result.phases.items()},
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    if args.kernelbench:
        evaluate_kb = kernelbench_evaluator(Path(args.kernelbench))
        for run in ("first", "warm"):
            start = time.monotonic()
            kb = evaluate_kb(
                task.reference_source, candidate, num_correct_trials=5, num_perf_trials=100, measure_performance=True, backend="triton"
            )
            rows.append(
                {
                    "evaluator": "kernelbench",
                    "run": run,
                    "wall_s": round(time.monotonic() - start, 2),
                    "status": "correct" if getattr(kb, "correctness", False) else "incorrect",
                    "speedup": None,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    walls = {(r["evaluator"], r["run"]): r["wall_s"] for r in rows}
    ratio = walls[("sage", "warm")] / walls[("kernelbench", "warm")] if ("kernelbench", "warm") in walls else None
    return {
        "rows": rows,
        "goals": [
            {
                "goal": "one warm SAGE evaluation within 1.5x KernelBench's evaluator wall",
                "met": ratio is not None and ratio <= 1.5,
                "ratio": ratio,
            }
        ],
    }


def stage_level1(args: argparse.Namespace) -> dict[str, Any]:
    """All of KernelBench level 1 at full size: imported, then `sage suite
    check` on the cuda backend with `--jobs` evaluations at once, each row
    written as it finishes."""
    import subprocess

    if not args.kernelbench:
        return {"rows": [], "goals": [{"goal": "level 1 checked (needs --kernelbench)", "met": False}]}
    suite, rows = Path(args.scratch) / "kb-level1", Path(args.out) / "level1-rows.jsonl"
    sage = [sys.executable, "-c", "from sage_mcp.cli import main; main()"]
    env = {**os.environ, "SAGE_DB": str(Path(args.scratch) / "memory.db"), "SAGE_CACHE_DIR": str(Path(args.scratch) / "cache")}
    start = time.monotonic()
    subprocess.run(
        [*sage, "suite", "import", str(Path(args.kernelbench) / "KernelBench" / "level1"), "--dest", str(suite), "--overwrite"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    imported = time.monotonic() - start
    rows.unlink(missing_ok=True)
    start = time.monotonic()
    subprocess.run(
        [*sage, "suite", "check", str(suite), "--backend", "cuda", "--jobs", str(args.jobs), "--rows", str(rows)],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    checked = time.monotonic() - start
    found = [json.loads(line) for line in rows.read_text().splitlines()] if rows.exists() else []
    from sage_engine.suite.check import TaskCheck, summarize

    summary = summarize([TaskCheck(**row) for row in found])
    median = (summary["self_speedup"] or {}).get("median")
    row = {
        "tasks": len(found),
        "import_s": round(imported, 1),
        "check_s": round(checked, 1),
        "correct_pct": summary["correct_pct"],
        "median_self_speedup": median,
    }
    print(json.dumps(row), flush=True)
    return {
        "rows": [row],
        "goals": [
            {"goal": "KernelBench level 1 checked in at most 6 minutes", "met": len(found) >= 100 and checked <= 360},
            {"goal": ">= 99% correct", "met": (summary["correct_pct"] or 0) >= 99.0},
            {"goal": "median self-speedup 0.98-1.02", "met": median is not None and 0.98 <= median <= 1.02},
        ],
    }


MATMUL_SMALL = {"n": 256}  # --small: the cuBLAS task's size for a smoke run


def profile_row(name: str, result: Any, wall: float) -> dict[str, Any]:
    row: dict[str, Any] = {
        "case": name,
        "status": result.status,
        "wall_s": round(wall, 1),
        "speedup": result.speedup,
        "message": result.message[:300],
    }
    p = result.profile
    if p is not None:
        row.update(
            source=p.source,
            bytes=p.bytes,
            flops=p.flops,
            bound=p.bound,
            bandwidth_share=p.candidate.bandwidth_share,
            compute_share=p.candidate.compute_share,
            reference_kernels=p.reference.launches,
            candidate_kernels=p.candidate.launches,
            own_kernels=p.own_kernels,
            impossible=p.impossible,
            top_kernel=next((k.name for k in p.candidate.kernels), None),
            summary=p.summary,
            notes=p.notes,
        )
    return row


def stage_profile(args: argparse.Namespace) -> dict[str, Any]:
    import dataclasses

    from sage_engine.evaluation.harness import Harness
    from sage_engine.evaluation.host.tasks import load_task

    matmul = load_task(DEVICE / "matmul_cublas.py")
    if args.small:
        matmul = dataclasses.replace(matmul, cases=(MATMUL_SMALL,))
    with tempfile.TemporaryDirectory(dir=args.scratch) as tmp, Harness(sage_config(args, Path(tmp))) as harness:
        start = time.monotonic()
        limits = harness.backend("cuda").calibration()
        best = max(limits.bandwidth, key=lambda b: b.bytes)
        rows: list[dict[str, Any]] = [
            {
                "case": "calibration",
                "status": "measured",
                "wall_s": round(time.monotonic() - start, 1),
                "gbps_largest": max(best.copy_gbps, best.read_gbps),
                "launch_us": limits.launch_us,
                **{f"{k}_tflops": v / 1e12 for k, v in limits.matmul_flops.items()},
            }
        ]
        print(json.dumps(rows[0]), flush=True)
        for name, task, source in (
            ("fused triton gelu", fused_task(args), (DEVICE / "gelu_tanh_triton.py").read_text()),
            ("cublas matmul", matmul, own_candidate(matmul.reference_source)),
        ):
            rows.append(profile_row(name, *evaluate(harness, task, source)))
            print(json.dumps(rows[-1]), flush=True)
    fused, cublas = rows[1], rows[2]
    return {
        "rows": rows,
        "goals": [
            {
                "goal": "the fused kernel is memory-bound at most 1.1x the measured bandwidth, launches fewer kernels "
                "than the reference and has a kernel of its own",
                "met": fused.get("bound") == "memory"
                and 0 < (fused.get("bandwidth_share") or 0) <= 1.1
                and fused["candidate_kernels"] < fused["reference_kernels"]
                and fused["own_kernels"] is True,
            },
            {
                "goal": "the cuBLAS matmul is compute-bound at most 1.1x the measured peak, with no kernel of its own",
                "met": cublas.get("bound") == "compute"
                and 0 < (cublas.get("compute_share") or 0) <= 1.1
                and cublas.get("own_kernels") is False,
            },
        ],
    }


STAGES: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "tests": stage_tests,
    "timing": stage_timing,
    "fused": stage_fused,
    "hostile": stage_hostile,
    "wall": stage_wall,
    "profile": stage_profile,
    "level1": stage_level1,
}


# ------------------------------------------------------------------ reports


def table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(no rows)"
    keys = list(dict.fromkeys(k for row in rows for k in row if k != "message"))
    cells = [[_cell(row.get(k)) for k in keys] for row in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    lines = [" | ".join(k.ljust(w) for k, w in zip(keys, widths)), "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(c.ljust(w) for c, w in zip(cell, widths)) for cell in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return "" if value is None else str(value)


def summary(out: Path) -> int:
    """Every stage's table and goals, from the JSON files the stages wrote; 0 when every goal was met."""
    ok = True
    for stage in STAGES:
        path = out / f"device-check-{stage}.json"
        if stage == "level1" and not path.is_file():
            continue  # asked for by name only
        if not path.is_file():
            print(f"\n## {stage}: no result (it did not finish in its time)")
            ok = False
            continue
        data = json.loads(path.read_text())
        print(f"\n## {stage} ({data.get('seconds', 0):.0f} s)\n{table(data['rows'])}")
        for goal in data["goals"]:
            ok = ok and goal["met"]
            print(f"goal: {goal['goal']}: {'met' if goal['met'] else 'NOT met'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="device_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=[*STAGES, "summary"])
    parser.add_argument("--kernelbench", help="a KernelBench checkout (its KernelBench/level1 references are timed)")
    parser.add_argument("--out", default=".", help="folder for device-check-STAGE.json")
    parser.add_argument(
        "--small",
        action="store_true",
        help="small inputs and a short timing budget: a smoke run of the check itself, "
        "e.g. through the test double on a CPU; it says nothing about a GPU",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(8, os.cpu_count() or 1),
        help="level1: evaluations at once (correctness overlaps, timing takes turns)",
    )
    parser.add_argument("--scratch", default=str(ROOT / "build" / "device-check"), help="where the check's memories and build caches go")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    Path(args.scratch).mkdir(parents=True, exist_ok=True)
    if args.stage == "summary":
        return summary(out)
    import torch

    if not torch.cuda.is_available():
        print("torch.cuda.is_available() is False: the device check needs a GPU", file=sys.stderr)
        return 2
    start = time.monotonic()
    data = STAGES[args.stage](args)
    data["seconds"] = time.monotonic() - start
    data["device"] = torch.cuda.get_device_name(0)
    (out / f"device-check-{args.stage}.json").write_text(json.dumps(data, indent=2, default=str))
    print(table(data["rows"]))
    return 0 if all(g["met"] for g in data["goals"]) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
