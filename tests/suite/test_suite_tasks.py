"""Checks every bundled suite task and its example candidates without the evaluation harness."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import suite_check as sc


TASK_IDS = sc.task_ids()
ALLOWED_KEYS = set(sc.REQUIRED_KEYS) | {"forbid", "tolerance", "seed"}
CPP_MARKER = "load_inline"


def _is_cpp(path: Path) -> bool:
    return CPP_MARKER in path.read_text()


def _candidates(prefix: str) -> list[tuple[str, Path]]:
    return [(t, p) for t in TASK_IDS for p in sc.solutions(t, prefix)]


def _python_candidate_params(prefix: str):
    """The candidates that need no build. The C++ ones are judged on every
    case through the harness (tests/evaluation/test_suite_solutions.py),
    whose build cache this check cannot share: a second build of each would
    cost a minute of CPU apiece."""
    return [pytest.param(task_id, path, id=f"{task_id}/{path.stem}") for task_id, path in _candidates(prefix) if not _is_cpp(path)]


def _signature(path: Path, class_name: str) -> dict[str, list[str]]:
    """Argument names of __init__ and forward, read from the source without importing it."""
    tree = ast.parse(path.read_text())
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    assert cls is not None, f"{path} defines no class {class_name}"
    methods = {n.name: n.args for n in cls.body if isinstance(n, ast.FunctionDef)}
    return {
        name: [a.arg for a in args.args] + ([f"*{args.vararg.arg}"] if args.vararg else [])
        for name, args in methods.items()
        if name in ("__init__", "forward")
    }


def test_suite_has_at_least_32_tasks_across_12_families_and_all_levels():
    metas = [sc.task_meta(t) for t in TASK_IDS]
    assert len(metas) >= 32
    assert len({m["family"] for m in metas}) >= 12
    assert {m["level"] for m in metas} == {1, 2, 3}


def test_suite_ships_triton_and_cpp_examples():
    assert len({t for t, _ in _candidates("triton_")}) >= 8
    assert sum(_is_cpp(p) for _, p in _candidates("cpu_")) >= 6


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_task_metadata_follows_the_task_format(task_id):
    meta = sc.task_meta(task_id)
    assert set(sc.REQUIRED_KEYS) <= meta.keys(), f"missing {set(sc.REQUIRED_KEYS) - meta.keys()}"
    assert meta.keys() <= ALLOWED_KEYS, f"unknown keys {meta.keys() - ALLOWED_KEYS}"
    for key in ("name", "operator", "family", "description"):
        assert isinstance(meta[key], str) and meta[key].strip(), f"{key} must be a non-empty string"
    assert meta["level"] in (1, 2, 3)
    assert isinstance(meta["cases"], list) and len(meta["cases"]) >= 2
    assert all(isinstance(c, dict) and c for c in meta["cases"])
    forbid = meta.get("forbid", [])
    assert isinstance(forbid, list) and all(isinstance(f, str) and f for f in forbid)
    for dtype_name, tol in meta.get("tolerance", {}).items():
        assert dtype_name in sc.DTYPES and set(tol) == {"atol", "rtol"}
    assert isinstance(meta.get("seed", sc.DEFAULT_SEED), int)
    assert sc.solutions(task_id, "cpu_"), "every task needs a cpu_ example candidate"


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_each_case_changes_what_the_reference_builds(task_id):
    # Cases only work if get_inputs/get_init_inputs read the module globals at call time.
    seen = set()
    for case in sc.cases(sc.task_meta(task_id)):
        for value in case.values():
            assert not isinstance(value, str) or value in sc.DTYPES, f"unknown dtype name {value!r}"
        _, init_inputs, inputs = sc.build_case(task_id, case, sc.DEFAULT_SEED)
        signature = (repr(init_inputs), tuple((tuple(t.shape), t.dtype) for t in inputs))
        assert signature not in seen, f"case {case} builds the same inputs as an earlier case"
        seen.add(signature)
        if "dtype" in case:
            assert sc.DTYPES[case["dtype"]] in {t.dtype for t in inputs}


@pytest.mark.parametrize(
    "task_id,path",
    [pytest.param(t, p, id=f"{t}/{p.stem}") for t, p in _candidates("cpu_") + _candidates("triton_")],
)
def test_candidate_keeps_the_reference_signature(task_id, path):
    assert _signature(path, "ModelNew") == _signature(sc.TASKS_DIR / task_id / "reference.py", "Model")


@pytest.mark.parametrize(
    "task_id,path",
    [pytest.param(t, p, id=f"{t}/{p.stem}") for t, p in _candidates("cpu_") + _candidates("triton_")],
)
def test_candidate_source_avoids_the_forbidden_calls(task_id, path):
    source = path.read_text()
    for name in sc.task_meta(task_id).get("forbid", []):
        assert not re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", source), f"{path.name} uses {name}"


@pytest.mark.parametrize("task_id,path", _python_candidate_params("cpu_"))
def test_cpu_candidate_matches_reference_on_every_case(task_id, path):
    assert sc.check_candidate(task_id, path) == []


@pytest.fixture(scope="session")
def triton_results():
    """Every Triton candidate on its task's smallest case, in one interpreter subprocess."""
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, str(Path(sc.__file__))],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = {}
    for line in proc.stdout.splitlines():
        row = json.loads(line)
        results[(row["task"], row["candidate"])] = row["failures"]
    return results


@pytest.mark.slow
@pytest.mark.parametrize("task_id,path", [pytest.param(t, p, id=f"{t}/{p.stem}") for t, p in _candidates("triton_")])
def test_triton_candidate_matches_reference_in_the_interpreter(task_id, path, triton_results):
    assert triton_results[(task_id, path.name)] == []


def test_checker_rejects_a_wrong_candidate(tmp_path):
    # Guards the checker itself: a candidate off by a small constant must be reported.
    wrong = tmp_path / "cpu_wrong.py"
    wrong.write_text(
        "import torch, torch.nn as nn\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "    def forward(self, x):\n"
        "        e = (x - x.amax(-1, keepdim=True)).exp()\n"
        "        return e / e.sum(-1, keepdim=True) + 1e-3\n"
    )
    failures = sc.check_candidate("softmax", wrong, only_smallest=True)
    assert len(failures) == 1 and "max abs error" in failures[0]


def test_checker_rejects_a_candidate_that_modifies_its_inputs(tmp_path):
    mutating = tmp_path / "cpu_mutating.py"
    mutating.write_text(
        "import torch, torch.nn as nn\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "    def forward(self, x):\n"
        "        return x.mul_(torch.sigmoid(x.clone()))\n"
    )
    failures = sc.check_candidate("silu", mutating, only_smallest=True)
    assert any("modified its inputs" in f for f in failures)


def test_integer_outputs_must_match_exactly():
    meta = sc.task_meta("argmax")
    assert sc.compare(meta, torch.tensor([1, 2]), torch.tensor([1, 3])) is not None
    assert sc.compare(meta, torch.tensor([1, 2]), torch.tensor([1, 2])) is None
