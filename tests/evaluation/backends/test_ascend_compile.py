"""The ascend-compile backend: triton-ascend interpreter for correctness, the
real Ascend front end (triton.compile + bishengir-compile) for each kernel.

Every `ascend_*.py` example in the suite must pass both; every
`ascend_broken_<category>_*.py` must come back as compile_error with that
category. Tests marked `ascend` skip when the virtualenv is not set up.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sage_engine.errors import BackendUnavailable, InvalidInput
from sage_engine.evaluation.harness import Harness
from sage_engine.evaluation.backends import venv
from sage_engine.evaluation.backends.ascend_compile import AscendCompileBackend
from sage_engine.evaluation.backends.ascend_diagnostics import CATEGORIES
from sage_engine.evaluation.host.tasks import load_task

from backend_support import SUITE, ascend_config

EXAMPLES = sorted(p for p in SUITE.glob("*/solutions/ascend_*.py") if not p.name.startswith("ascend_broken_"))
BROKEN = sorted(SUITE.glob("*/solutions/ascend_broken_*.py"))


def example_id(path: Path) -> str:
    return f"{path.parent.parent.name}/{path.stem}"


def broken_category(path: Path) -> str:
    rest = path.stem[len("ascend_broken_") :]
    return next(c for c in CATEGORIES if rest.startswith(c + "_"))


def evaluate(backend, task, source: str):
    return backend.evaluate(task, source, trials=1)


# ------------------------------------------------------------- no env needed


def test_suite_has_ascend_examples_for_at_least_twelve_tasks():
    tasks = {p.parent.parent.name for p in EXAMPLES}
    assert len(tasks) >= 12, sorted(tasks)
    for needed in ("softmax", "layer_norm", "rms_norm", "matmul", "causal_flash_attention", "block_sparse_attention", "sum_dim", "gelu"):
        assert needed in tasks


def test_every_broken_variant_names_a_known_category():
    categories = {broken_category(p) for p in BROKEN}
    assert {"ub_overflow", "cc_overflow", "grid_too_large"} <= categories


def test_backend_without_its_env_is_unavailable_and_says_how_to_set_it_up(tmp_path):
    config = ascend_config(tmp_path, cache_dir=tmp_path / "empty-cache")
    backend = AscendCompileBackend(config)
    status = backend.status()
    assert not status.ready
    assert "sage backends setup ascend-compile" in status.setup
    assert status.hardware == "Ascend910B3" and not status.timing_representative
    task = load_task(SUITE / "gelu")
    # The harness, the one way in, checks the backend before anything runs.
    with Harness(config) as harness, pytest.raises(BackendUnavailable, match="sage backends setup ascend-compile"):
        harness.evaluate(task, (SUITE / "gelu" / "solutions" / "ascend_gelu.py").read_text(), backend="ascend-compile", trials=1)


def test_env_whose_imports_fail_is_reported_broken(tmp_path):
    # A stand-in env: the right marker and layout, but an interpreter whose imports fail.
    config = ascend_config(tmp_path, cache_dir=tmp_path / "cache")
    env = venv.env_dir("ascend-compile", config)
    (env / "bin").mkdir(parents=True)
    python = env / "bin" / "python"
    python.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'triton'\" >&2\nexit 1\n")
    python.chmod(0o755)
    compiler = env / "lib" / "python3.11" / "site-packages" / "ascendnpuir" / "bin" / "bishengir-compile"
    compiler.parent.mkdir(parents=True)
    compiler.write_text("")
    marker = {"packages": list(venv.RECIPES["ascend-compile"].packages)}
    (env / venv.MARKER).write_text(json.dumps(marker))
    status = AscendCompileBackend(config).status()
    assert not status.ready
    assert "broken" in status.reason and "No module named 'triton'" in status.reason
    assert "--force" in status.reason


# ------------------------------------------------------------------ with env


@pytest.mark.ascend
def test_ready_backend_reports_the_chip(ascend_backend):
    status = ascend_backend.status()
    assert status.ready and status.hardware == "Ascend910B3"


@pytest.mark.ascend
@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=example_id)
def test_triton_ascend_example_passes_correctness_and_the_front_end(ascend_backend, path):
    task = load_task(path.parent.parent)
    result = evaluate(ascend_backend, task, path.read_text())
    assert result.status == "correct", (result.message, result.diagnostics, result.stdout_tail[-2000:])
    assert result.hardware == "Ascend910B3" and result.backend == "ascend-compile"
    assert result.compile_info.front_end == "passed"
    assert result.compile_info.chip == "Ascend910B3"
    assert result.compile_info.note == "front end passed; no NPU binary without CANN"
    kernels = result.compile_info.kernels
    assert kernels and all(k.front_end == "passed" for k in kernels)
    assert result.speedup is None and not result.timing_representative
    assert result.versions["triton_ascend"] == "3.2.0"


@pytest.mark.ascend
@pytest.mark.slow
@pytest.mark.parametrize("path", BROKEN, ids=example_id)
def test_broken_variant_is_a_compile_error_of_its_category(ascend_backend, path):
    category = broken_category(path)
    task = load_task(path.parent.parent)
    result = evaluate(ascend_backend, task, path.read_text())
    assert result.status == "compile_error", (result.message, result.diagnostics, result.stdout_tail[-2000:])
    assert result.compile_info.category == category
    assert result.compile_info.tags == [category, "Ascend910B3"]
    diag = result.diagnostics[0]
    assert diag.category == category and diag.kernel and diag.line
    source_line = path.read_text().splitlines()[diag.line - 1]
    assert "def " in source_line or "[" in source_line  # the kernel's def, or the launch
    if category in ("ub_overflow", "cc_overflow"):
        assert "overflow, requires" in diag.message and "bits" in diag.message


FP64_TASK = """
import torch
import torch.nn as nn

n = 3000


class Model(nn.Module):
    def forward(self, x):
        return torch.exp(x)


def get_inputs():
    return [torch.randn(n, dtype=torch.float64)]


def get_init_inputs():
    return []
"""

KERNEL_TEMPLATE = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def exp_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for b in range(pid, tl.cdiv(n, BLOCK), tl.num_programs(0)):
        offs = b * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(y_ptr + offs, {expr}, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        exp_kernel[(40,)](x, y, x.numel(), BLOCK=1024)
        return y
"""


@pytest.mark.ascend
def test_fp64_kernel_is_unsupported_op_at_the_offending_line(ascend_backend):
    # The interpreter runs it in float64; the Ascend front end already rejects
    # the masked fp64 load (its zero fill is a cast to fp64).
    source = KERNEL_TEMPLATE.format(expr="tl.exp(x)")
    result = evaluate(ascend_backend, load_task(FP64_TASK), source)
    assert result.status == "compile_error"
    diag = result.diagnostics[0]
    assert diag.category == "unsupported_op" and diag.kernel == "exp_kernel"
    assert "x = tl.load(" in source.splitlines()[diag.line - 1]
    assert "fp64" in diag.message and "unsupported on Ascend" in diag.message


@pytest.mark.ascend
def test_wrong_kernel_is_incorrect_even_though_the_front_end_passes(ascend_backend):
    task = load_task(FP64_TASK.replace("torch.float64", "torch.float32"))
    result = evaluate(ascend_backend, task, KERNEL_TEMPLATE.format(expr="tl.exp(x) + 1.0"))
    assert result.status == "incorrect"
    assert result.compile_info.front_end == "passed"
    assert result.mismatch


@pytest.mark.ascend
def test_candidate_that_launches_no_kernel_is_checked_but_warned(ascend_backend):
    task = load_task(FP64_TASK.replace("torch.float64", "torch.float32"))
    source = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.exp(x)\n"
    result = evaluate(ascend_backend, task, source)
    assert result.status == "correct"
    assert result.compile_info.front_end == "not_run"
    assert [d.category for d in result.diagnostics] == ["no_kernel"]


@pytest.mark.ascend
def test_chip_comes_from_config_and_unknown_chips_are_refused(ascend_env, tmp_path):
    path = SUITE / "silu" / "solutions" / "ascend_broken_ub_overflow_single_pass.py"
    backend = AscendCompileBackend(ascend_env.replace(chip="Ascend910B4"))
    try:
        result = evaluate(backend, load_task(SUITE / "silu"), path.read_text())
    finally:
        backend.close()
    assert result.hardware == "Ascend910B4"
    assert result.compile_info.tags == ["ub_overflow", "Ascend910B4"]
    unknown = AscendCompileBackend(ascend_env.replace(chip="Ascend999"))
    with pytest.raises(InvalidInput, match="Ascend910B3"):
        evaluate(unknown, load_task(SUITE / "silu"), path.read_text())
