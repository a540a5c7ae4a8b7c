"""`--scale cpu`: benchmark sizes made for a CPU, with the originals recorded.

The benchmarks size their tasks for accelerators (KernelBench's softmax is
4096 x 393216 floats, 6 GiB); a CPU check needs each reference call in the
tens of milliseconds. `scale_task` asks the sandbox child
(`probe.run_probe`) to choose the sizes, then writes them into the task:
KernelBench-style constants into reference.py, case sizes into task.json's
cases, sizes the model's constructor fixes (for tasks whose cases are rows)
into reference.py, and the original values into task.json's `origin.scaled`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sage_engine.evaluation.host.tasks import load_task
from sage_engine import sizes

PROBE_RUNNER = "sage_engine.suite.probe:run_probe"


@dataclass(frozen=True)
class CpuScale:
    # One reference call at CPU scale: a check makes about 6 calls per case
    # for correctness and 30 or more for timing, so 30 ms keeps a task of a
    # dozen cases well under a minute on one thread.
    target_ms: float = 30.0
    # One thread of a current x86 core: ~50 GFLOP/s in matmul/convolution
    # (large fp32 convolutions reach 100+ on AVX-512; fp16 and odd shapes are slower) ...
    flops_per_ms: float = 5e7
    # ... and ~1 GB/s through elementwise ops including allocation.
    bytes_per_ms: float = 1e6
    # Halvings per case: 2^60 is far beyond any benchmark's sizes.
    max_steps: int = 60
    # The probe's wall clock for one task (every case, meta runs and CPU proofs).
    timeout_s: float = 300.0


@dataclass
class ScaleReport:
    task: str
    scaled_cases: int = 0
    notes: list[str] = field(default_factory=list)
    error: str | None = None


def scale_task(task_dir: Path, backend: Any, settings: CpuScale = CpuScale()) -> ScaleReport:
    """Choose CPU sizes for the task in `task_dir` and write them into it."""
    task = load_task(task_dir)
    report = ScaleReport(task.id)
    request = dataclasses.replace(
        backend.build_request(task, "# sizing probe\n", 1),
        runner=PROBE_RUNNER,
        timeout_s=settings.timeout_s,
        timing=None,
        runner_args={"scale": {k: v for k, v in asdict(settings).items() if k != "timeout_s"}},
    )
    outcome = backend.pool.run(request, backend.launch_for(task), lambda event: None)
    result = outcome.runner_result or {}
    if "scale" not in result:
        why = (outcome.report.message if outcome.report else "") or outcome.killed or f"exit code {outcome.exit_code}"
        report.error = f"sizing failed: {why}"
        return report
    per_case = result["scale"]
    meta_path = task_dir / "task.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    origin = meta.setdefault("origin", {})
    scaled: dict[str, Any] = {}
    if not task.cases:
        changes = {tuple(k): new for k, _, new in per_case[0]["changes"]}
        if changes:
            reference = task_dir / "reference.py"
            reference.write_text(sizes.apply_module(reference.read_text(encoding="utf-8"), changes), encoding="utf-8")
            scaled["constants"] = {_label(k): [old, new] for k, old, new in per_case[0]["changes"]}
            report.scaled_cases = 1
    else:
        constructor = {tuple(k): new for k, _, new in result.get("constructor") or []}
        if constructor:
            reference = task_dir / "reference.py"
            reference.write_text(sizes.apply_init(reference.read_text(encoding="utf-8"), constructor), encoding="utf-8")
            scaled["constructor"] = {f"self.{k[1]}": [old, new] for k, old, new in result["constructor"]}
        cases = [dict(c) for c in meta.get("cases", [])]
        for index, (case, found) in enumerate(zip(cases, per_case)):
            changes = {tuple(k): new for k, _, new in found["changes"]}
            if not changes:
                continue
            new_case = sizes.apply_case(case, changes)
            scaled[str(index)] = {col: [case[col], new_case[col]] for col in case if case[col] != new_case[col]}
            cases[index] = new_case
            report.scaled_cases += 1
        meta["cases"] = cases
        defaults_from(task_dir, cases[0] if cases else {})
    kept = [n for found in per_case for n in found.get("notes", []) if n.startswith("sizes kept")]
    report.notes.extend(f"{n} ({kept.count(n)} case(s))" for n in dict.fromkeys(kept))
    origin["scale"] = "cpu"
    origin["scaled"] = scaled
    origin["cost_ms"] = [_cost_pair(found) for found in per_case]
    meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return report


def defaults_from(task_dir: Path, case: dict[str, Any]) -> None:
    """Keep reference.py's module-level defaults equal to the first case."""
    reference = task_dir / "reference.py"
    text = reference.read_text(encoding="utf-8")
    present = sizes.module_names(text)
    wanted = {k: v for k, v in case.items() if k in present}
    if wanted:
        reference.write_text(sizes.set_constants(text, wanted), encoding="utf-8")


def _label(key: list) -> str:
    name = key[1]
    return f"{name}[{key[2]}]" if len(key) > 2 else name


def _cost_pair(found: dict[str, Any]) -> dict[str, Any]:
    """Estimated ms at the benchmark's sizes and at the chosen ones (and the measured ms)."""
    original, final = found.get("original") or {}, found.get("final") or {}
    return {"original_estimate": original.get("estimate_ms"), "estimate": final.get("estimate_ms"), "measured": final.get("real_ms")}
