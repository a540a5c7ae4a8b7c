"""The harness end to end: real children, real torch, real compilers."""

from __future__ import annotations

import statistics
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from sage_engine.config import BACKENDS
from sage_engine.errors import BackendUnavailable, InvalidInput
from sage_engine.evaluation.backends.base import list_backends
from sage_engine.evaluation.host.tasks import load_task

from tests.evaluation.support import FIXTURE_TASKS, as_own_candidate, fast_config, fixture_task

EXAMPLES = sorted(FIXTURE_TASKS.glob("*/solutions/*.py"))


def _example_id(path: Path) -> str:
    return f"{path.parent.parent.name}/{path.stem}"


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=pytest.mark.slow) if "cpp" in p.stem else p for p in EXAMPLES],
    ids=_example_id,
)
def test_every_fixture_example_is_correct(harness, path: Path):
    task = fixture_task(path.parent.parent.name)
    backend = "triton" if path.stem.startswith("triton_") else "cpu"
    result = harness.evaluate(task, path.read_text(), backend=backend)
    assert result.status == "correct", (result.message, result.diagnostics, result.stdout_tail[-2000:])
    declared = [c for c in result.cases if not c.variant]
    assert result.correct and len(declared) == len(task.cases) * harness.config.correctness_trials
    assert all(v.status != "failed" for v in result.variants), result.variants
    assert result.reference_timing is not None and result.candidate_timing is not None
    if backend == "cpu":
        assert result.timing_representative and result.speedup and result.speedup > 0
    else:
        assert not result.timing_representative and result.speedup is None


def test_reference_as_its_own_candidate_runs_at_speedup_one(harness):
    speedups = []
    for name in ("relu", "row_softmax", "matmul"):
        task = replace(fixture_task(name), forbid=())
        result = harness.evaluate(task, as_own_candidate(task))
        assert result.status == "correct", result.message
        speedups.append(result.speedup)
    assert 0.9 <= statistics.median(speedups) <= 1.1, speedups


def test_result_carries_identity_hardware_and_versions(harness):
    task = fixture_task("relu")
    source = task.examples["cpu_clamp"].read_text()
    result = harness.evaluate(task, source)
    assert len(result.candidate_hash) == 16 and result.backend == "cpu" and result.task == "relu"
    assert result.hardware.startswith(("x86_64-", "aarch64-"))
    assert {"python", "torch"} <= set(result.versions)
    assert result.duration_s > 0 and result.phases["correctness"] > 0
    assert result.compile_info.timed_case == {"batch_size": 64, "dim": 8192}  # the largest case


def test_syntax_error_is_a_compile_error_at_its_line(harness):
    result = harness.evaluate(fixture_task("relu"), "import torch\n\nclass ModelNew(:\n    pass\n")
    assert result.status == "compile_error"
    assert (result.diagnostics[0].category, result.diagnostics[0].line) == ("syntax", 3)


def test_exception_in_forward_is_a_runtime_error_at_the_candidate_line(harness):
    source = (
        "import torch\nimport torch.nn as nn\n\n\ndef helper(x):\n    return x.view(-1, 7)\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return helper(x)\n"
    )
    result = harness.evaluate(fixture_task("relu"), source)
    assert result.status == "runtime_error"
    diag = result.diagnostics[0]
    assert diag.line == 6 and "RuntimeError" in diag.message and "helper" in diag.message


def test_exception_in_the_constructor_is_a_runtime_error(harness):
    source = (
        "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        raise ValueError('bad init')\n"
    )
    result = harness.evaluate(fixture_task("relu"), source)
    assert result.status == "runtime_error" and result.diagnostics[0].line == 6


def test_missing_import_is_a_compile_error_at_the_import_line(harness):
    result = harness.evaluate(fixture_task("relu"), "import torch\nimport not_a_real_module\n")
    assert result.status == "compile_error"
    assert (result.diagnostics[0].category, result.diagnostics[0].line) == ("import", 2)


def test_module_without_modelnew_is_a_compile_error(harness):
    result = harness.evaluate(fixture_task("relu"), "import torch\nclass Model2:\n    pass\n")
    assert result.status == "compile_error" and result.diagnostics[0].category == "interface"


def test_wrong_shape_is_incorrect_and_says_why(harness):
    source = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x.clamp(min=0).t()\n"
    result = harness.evaluate(fixture_task("relu"), source)
    assert result.status == "incorrect" and "shape" in result.mismatch


def test_reference_that_mutates_an_input_is_checked_on_that_input(harness):
    reference = (
        "import torch\nimport torch.nn as nn\n\nn = 1000\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        x.mul_(2.0)\n        return x.sum()\n\n"
        "def get_inputs():\n    return [torch.randn(n)]\n\ndef get_init_inputs():\n    return []\n"
    )
    task = load_task(reference)
    same = reference.replace("class Model(", "class ModelNew(")
    assert harness.evaluate(task, same).status == "correct"
    skips_update = same.replace("x.mul_(2.0)\n        return x.sum()", "return (x * 2.0).sum()")
    result = harness.evaluate(task, skips_update)
    assert result.status == "incorrect" and result.mismatch.startswith("output 1")


def assert_own_candidate_is_correct(harness, reference: str):
    task = load_task(reference)
    result = harness.evaluate(task, as_own_candidate(task))
    assert result.status == "correct", result.message
    return result


@pytest.mark.parametrize(
    "args,forward,inputs",
    [
        pytest.param("x", "return x.mul_(2.0)", "[torch.randn(n)]", id="returns-its-updated-input"),
        pytest.param(
            "xs", "return torch.cat([g.mul_(2.0) for g in xs])", "[[torch.randn(n), torch.randn(n)]]", id="updates-tensors-inside-a-list"
        ),
        # As NPUKernelBench's tril draws its `diagonal` with the tensor.
        pytest.param("x, k", "return x + k", "[torch.randn(n), int(torch.randint(0, 10**6, (1,)))]", id="a-number-drawn-with-the-inputs"),
        pytest.param(
            "xs", "return xs[0] + xs[1]", "[[torch.randn(n), int(torch.randint(0, 10**6, (1,)))]]", id="a-number-drawn-inside-a-list"
        ),
    ],
)
def test_the_reference_as_its_own_candidate_passes_the_fresh_input_check(harness, args, forward, inputs):
    """Timing calls it many times on the same inputs, then once on fresh ones:
    the check must see the first call on the fresh values, numbers included,
    even when forward updates its inputs in place."""
    reference = (
        f"import torch\nimport torch.nn as nn\n\nn = 1000\n\nclass Model(nn.Module):\n"
        f"    def forward(self, {args}):\n        {forward}\n\n"
        f"def get_inputs():\n    return {inputs}\n\ndef get_init_inputs():\n    return []\n"
    )
    result = assert_own_candidate_is_correct(harness, reference)
    checks = result.compile_info.checks
    assert checks.fresh_inputs_checked >= 1
    # A call drawn from inside each timed batch was judged too, or it says why not (updated in place, inside a list).
    assert checks.spot_checks + checks.spot_skipped >= 1


SPARSE_REFERENCE = (
    "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
    "    def forward(self, s):\n        s = s.coalesce()\n        return [s.indices().t(), s.values()]\n\n\n"
    # Ten sparse dimensions: as a dense tensor, 10**10 elements.
    "def get_inputs():\n    indices = torch.randint(0, 10, (10, 64))\n"
    "    return [torch.sparse_coo_tensor(indices, torch.randn(64, 3), [10] * 10 + [3])]\n\n\n"
    "def get_init_inputs():\n    return []\n"
)


def test_sparse_inputs_are_checked_for_changes_without_being_made_dense(harness):
    # As NPUKernelBench's coalesce_sparse.
    task = load_task(SPARSE_REFERENCE)
    assert_own_candidate_is_correct(harness, SPARSE_REFERENCE)
    scales_input = (
        "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, s):\n        c = s.coalesce()\n        out = [c.indices().t(), c.values().clone()]\n"
        "        s._values().mul_(2.0)\n        return out\n"
    )
    result = harness.evaluate(task, scales_input)
    assert result.status == "rejected" and "modifies input 0 in place" in result.message, result.message


def test_random_constructor_arguments_match_on_both_sides_in_every_case(harness):
    """get_init_inputs drawing from torch and numpy, after a case whose inputs drew numbers too."""
    reference = (
        "import numpy as np\nimport torch\nimport torch.nn as nn\n\nn = 64\n"
        'SAGE_TASK = {"cases": [{"n": 64}, {"n": 128}]}\n\n'
        "class Model(nn.Module):\n    def __init__(self, gamma, beta):\n        super().__init__()\n"
        "        self.gamma, self.beta = gamma, beta\n\n"
        "    def forward(self, x):\n        return x * self.gamma + self.beta\n\n"
        "def get_inputs():\n    return [torch.randn(n)]\n\n"
        "def get_init_inputs():\n    return [torch.rand(n), torch.tensor(np.random.rand(n), dtype=torch.float32)]\n"
    )
    assert_own_candidate_is_correct(harness, reference)


def test_inputs_that_require_grad_still_do_on_the_candidate_side(harness):
    reference = (
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x, dy):\n"
        "        with torch.enable_grad():\n            y = torch.tanh(x)\n"
        "            return torch.autograd.grad(y, x, grad_outputs=dy)[0]\n\n"
        "def get_inputs():\n    return [torch.randn(256, requires_grad=True), torch.randn(256)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    assert_own_candidate_is_correct(harness, reference)


def test_suspiciously_large_speedup_is_flagged(harness):
    reference = (
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        y = x\n        for _ in range(200):\n            y = (y + 1.0) - 1.0\n        return y\n\n"
        "def get_inputs():\n    return [torch.randn(256, 256)]\n\ndef get_init_inputs():\n    return []\n"
    )
    candidate = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x.clone()\n"
    result = harness.evaluate(load_task(reference), candidate)
    assert result.status == "correct" and result.speedup > harness.config.suspicious_speedup, result.message
    assert result.suspicious_speedup and any(d.category == "timing" for d in result.diagnostics)


def test_progress_is_reported_from_static_checks_to_done(harness):
    seen: list[tuple[float, float | None, str]] = []
    task = fixture_task("row_softmax")
    harness.evaluate(task, task.examples["cpu_stable"].read_text(), progress=lambda p, t, m: seen.append((p, t, m)))
    messages = [m for _, _, m in seen]
    assert messages[0] == "running static checks" and messages[-1] == "done: correct"
    assert "checking case 2/2" in messages and "timing" in messages
    assert [p for p, _, _ in seen] == sorted(p for p, _, _ in seen) and seen[-1][0] == seen[-1][1]


def test_a_failing_progress_callback_does_not_fail_the_evaluation(harness):
    def broken(p, t, m):
        raise ConnectionError("client went away")

    task = fixture_task("relu")
    assert harness.evaluate(task, task.examples["cpu_clamp"].read_text(), progress=broken).status == "correct"


def test_concurrent_callers_are_served_one_at_a_time(harness):
    task = fixture_task("relu")
    source = task.examples["cpu_clamp"].read_text()
    results = []
    threads = [threading.Thread(target=lambda: results.append(harness.evaluate(task, source))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert [r.status for r in results] == ["correct", "correct"]


def test_caller_mistakes_raise_clear_errors(harness):
    task = fixture_task("relu")
    with pytest.raises(InvalidInput, match="empty"):
        harness.evaluate(task, "  ")
    with pytest.raises(InvalidInput, match="max_candidate_chars"):
        harness.evaluate(task, "#" * (harness.config.max_candidate_chars + 1))
    with pytest.raises(InvalidInput, match="trials"):
        harness.evaluate(task, "x = 1\n", trials=0)
    with pytest.raises(InvalidInput, match="unknown backend"):
        harness.evaluate(task, "x = 1\n", backend="tpu")


def test_backends_report_readiness_with_setup_hints(eval_cache):
    statuses = {s.name: s for s in list_backends(fast_config(eval_cache))}
    assert set(statuses) == set(BACKENDS)
    assert statuses["cpu"].ready and statuses["cpu"].timing_representative
    assert statuses["triton"].ready and not statuses["triton"].timing_representative
    for status in statuses.values():
        assert status.ready or status.setup, status


def test_an_unavailable_backend_raises_with_its_setup_hint(harness):
    status = harness.backend_status("cuda")
    if status.ready:
        pytest.skip("this machine has a CUDA GPU")
    with pytest.raises(BackendUnavailable, match="cuda"):
        harness.evaluate(fixture_task("relu"), "x = 1\n", backend="cuda")


@pytest.mark.slow
def test_cpp_candidate_builds_once_per_source(harness):
    task = fixture_task("relu")
    source = task.examples["cpu_cpp"].read_text()
    first = harness.evaluate(task, source)
    second = harness.evaluate(task, source)
    assert first.status == second.status == "correct", (first.message, second.message)
    assert second.phases["import"] < 5.0  # loaded from the per-source build dir, not rebuilt


CPP_WITH_ERROR = '''"""A C++ candidate whose helper does not compile."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SOURCE = r"""
static inline float twice(float v) {
    return v * undefined_scale;
}
#include <torch/extension.h>
torch::Tensor relu_forward(torch::Tensor x) {
    return x.clamp_min(twice(0.0f));
}
"""

# The error sits above the torch include and -Wfatal-errors stops at it, so
# the test does not pay for parsing torch's headers.
_ext = load_inline(name="sage_fixture_broken", cpp_sources=_SOURCE, functions=["relu_forward"],
                   no_implicit_headers=True, extra_cflags=["-Wfatal-errors"])


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.relu_forward(x)
'''


def test_cpp_compile_error_points_into_the_python_string(harness):
    line = next(i for i, text in enumerate(CPP_WITH_ERROR.splitlines(), 1) if "undefined_scale" in text)
    result = harness.evaluate(fixture_task("relu"), CPP_WITH_ERROR)
    assert result.status == "compile_error", result.message
    diag = result.diagnostics[0]
    assert diag.category == "cpp" and diag.line == line and "undefined_scale" in diag.message
