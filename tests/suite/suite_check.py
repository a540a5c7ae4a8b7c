"""Loads bundled suite tasks and checks candidates against references, without the harness.

Used by test_suite_tasks.py and by time_candidates.py; run as a script it
checks Triton candidates (the caller sets TRITON_INTERPRET=1 before Python
starts, since Triton reads it at import) and prints one JSON line per result.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from pathlib import Path
from types import ModuleType

import torch

TASKS_DIR = Path(__file__).resolve().parents[2] / "sage_engine" / "suite" / "tasks"
DEFAULT_SEED = 1024
DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}
DEFAULT_TOLERANCE = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 1e-2),
}
REQUIRED_KEYS = ("name", "operator", "family", "level", "description", "cases")

_module_ids = itertools.count()


def task_ids() -> list[str]:
    return sorted(p.name for p in TASKS_DIR.iterdir() if (p / "task.json").is_file())


def task_meta(task_id: str) -> dict:
    return json.loads((TASKS_DIR / task_id / "task.json").read_text())


def solutions(task_id: str, prefix: str) -> list[Path]:
    return sorted((TASKS_DIR / task_id / "solutions").glob(f"{prefix}*.py"))


def load_module(path: Path) -> ModuleType:
    """Import a file under a fresh name, so every load gets its own globals."""
    name = f"_suite_{path.parent.name}_{path.stem}_{next(_module_ids)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cases(meta: dict) -> list[dict]:
    return [dict(c) for c in meta.get("cases", [])] or [{}]


def case_values(case: dict) -> dict:
    return {k: DTYPES.get(v, v) if isinstance(v, str) else v for k, v in case.items()}


def build_case(task_id: str, case: dict, seed: int):
    """Reference module with the case applied, plus seeded init args and inputs."""
    ref = load_module(TASKS_DIR / task_id / "reference.py")
    for key, value in case_values(case).items():
        if not hasattr(ref, key):
            raise KeyError(f"{task_id}: case sets {key!r}, which reference.py does not define")
        setattr(ref, key, value)
    torch.manual_seed(seed)
    init_inputs = ref.get_init_inputs()
    torch.manual_seed(seed)
    inputs = ref.get_inputs()
    return ref, init_inputs, inputs


def run(model_cls, init_inputs, inputs, seed: int):
    torch.manual_seed(seed)
    model = model_cls(*init_inputs).eval()
    with torch.no_grad():
        return model(*inputs)


def as_tensors(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def tolerance(meta: dict, dtype: torch.dtype) -> tuple[float, float]:
    name = next((k for k, v in DTYPES.items() if v == dtype), str(dtype))
    override = meta.get("tolerance", {}).get(name)
    if override:
        return override["atol"], override["rtol"]
    return DEFAULT_TOLERANCE.get(dtype, (0.0, 0.0))


def compare(meta: dict, expected, actual) -> str | None:
    """None when actual matches expected under the task's tolerance, else what differs."""
    exp, act = as_tensors(expected), as_tensors(actual)
    if len(exp) != len(act):
        return f"{len(act)} outputs, expected {len(exp)}"
    for i, (e, a) in enumerate(zip(exp, act)):
        if not isinstance(a, torch.Tensor):
            return f"output {i} is {type(a).__name__}, expected a tensor"
        if a.shape != e.shape or a.dtype != e.dtype:
            return f"output {i}: {a.dtype}{tuple(a.shape)}, expected {e.dtype}{tuple(e.shape)}"
        if not e.is_floating_point():
            if not torch.equal(a, e):
                return f"output {i}: {int((a != e).sum())} integer elements differ"
            continue
        atol, rtol = tolerance(meta, e.dtype)
        ef, af = e.double(), a.double()
        if bool((torch.isfinite(ef) & ~torch.isfinite(af)).any()):
            return f"output {i}: non-finite values where the reference is finite"
        if not torch.allclose(af, ef, atol=atol, rtol=rtol, equal_nan=True):
            err = (af - ef).abs().nan_to_num(0.0)
            return f"output {i}: max abs error {float(err.max()):.3g} over atol={atol} rtol={rtol}"
    return None


def check_candidate(task_id: str, path: Path, only_smallest: bool = False) -> list[str]:
    """Run the candidate on every case (or the smallest); return one message per failure."""
    meta = task_meta(task_id)
    seed = meta.get("seed", DEFAULT_SEED)
    candidate = load_module(path).ModelNew
    rows = cases(meta)
    if only_smallest:
        rows = [min(rows, key=lambda c: input_elements(task_id, c, seed))]
    failures = []
    for case in rows:
        ref, init_inputs, inputs = build_case(task_id, case, seed)
        expected = run(ref.Model, init_inputs, inputs, seed)
        before = [t.clone() for t in inputs]
        actual = run(candidate, init_inputs, inputs, seed)
        if any(not torch.equal(b, t) for b, t in zip(before, inputs)):
            failures.append(f"{path.name} {case}: modified its inputs")
        problem = compare(meta, expected, actual)
        if problem:
            failures.append(f"{path.name} {case}: {problem}")
    return failures


def input_elements(task_id: str, case: dict, seed: int) -> int:
    _, _, inputs = build_case(task_id, case, seed)
    return sum(t.numel() for t in inputs if isinstance(t, torch.Tensor))


def main(argv: list[str]) -> int:
    all_cases = "--all-cases" in argv
    ids = [a for a in argv if not a.startswith("--")] or task_ids()
    for task_id in ids:
        for path in solutions(task_id, "triton_"):
            try:
                failures = check_candidate(task_id, path, only_smallest=not all_cases)
            except Exception as exc:  # a broken candidate is a result to report, not a crash
                failures = [f"{path.name}: {type(exc).__name__}: {exc}"]
            print(json.dumps({"task": task_id, "candidate": path.name, "failures": failures}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
