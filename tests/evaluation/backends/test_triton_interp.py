"""The `triton` backend runs the Triton people write: autotune, bf16, bounds, versions.

Real sandboxed children and upstream Triton's real interpreter; each kernel
below is checked against its own PyTorch reference task.
"""

from __future__ import annotations

import pytest

from sage_engine.evaluation.backends.triton_interp import TritonInterpreterBackend, installed_triton
from sage_engine.evaluation.host.tasks import load_task

from tests.evaluation.support import fast_config

pytest.importorskip("triton")

VECTOR_ADD_TASK = """
import torch
import torch.nn as nn

n = 1000
dtype = torch.float32


class Model(nn.Module):
    def forward(self, x, y):
        return x + y


def get_inputs():
    return [torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype)]


def get_init_inputs():
    return []
"""

KERNEL_HEAD = """
import torch
import torch.nn as nn
import triton
import triton.language as tl
"""

AUTOTUNED_ADD = (
    KERNEL_HEAD
    + """

@triton.autotune(
    configs=[triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 512})],
    key=["n"],
)
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
        return out
"""
)

# Right for BLOCK 8 (it divides 1000), wrong for 256 and 512: the loop
# drops what is left past the last whole block.
AUTOTUNED_WRONG_CONFIG = (
    KERNEL_HEAD
    + """

@triton.autotune(
    configs=[triton.Config({"BLOCK": 8}), triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 512})],
    key=["n"],
)
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # One program walks the vector in whole blocks: a BLOCK that does not divide n leaves a tail behind.
    for start in range(0, n // BLOCK * BLOCK, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.zeros_like(x)
        add_kernel[(1,)](x, y, out, x.numel())
        return out
"""
)

UNMASKED_LOADS = (
    KERNEL_HEAD
    + """

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(out_ptr + offs, x + y, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
        return out
"""
)

# Masks joined with Python's `and`, as triton-ascend's tutorials write them:
# compiled, it is an elementwise logical_and; run as plain Python it would
# keep only the right mask and read past the tensor's end.
# Masked by the blocks it launched, not by the tensor's length: right at
# 1024 elements (four whole blocks), past the end at any other length.
MASKED_BY_ITS_BLOCKS = (
    KERNEL_HEAD
    + """

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < BLOCK * tl.num_programs(0)
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, BLOCK=256)
        return out
"""
)

MASKS_JOINED_WITH_AND = (
    KERNEL_HEAD
    + """

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_range = offs < n
    mask = in_range and offs >= 0
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=(offs >= 0) and in_range)
    tl.store(out_ptr + offs, x + y, mask=in_range or False)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
        return out
"""
)

CAUGHT_AND_HIDDEN = UNMASKED_LOADS.replace(
    """        add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
        return out""",
    """        try:
            add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
        except Exception:
            return x + y
        return out""",
)

BF16_MATMUL_TASK = """
import torch
import torch.nn as nn

M = 64
K = 64
N = 64


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, N, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
"""

BF16_MATMUL = (
    KERNEL_HEAD
    + """

@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        rk = k + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def forward(self, a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), dtype=torch.bfloat16)
        matmul_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BM=32, BN=32, BK=32)
        return c
"""
)

BF16_ELEMENTWISE = (
    KERNEL_HEAD
    + """

@triton.jit
def fused(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * y + x - y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        fused[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
        return out
"""
)

BLOCK_POINTER_COPY = (
    KERNEL_HEAD
    + """

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    start = tl.program_id(0) * BLOCK
    xb = tl.make_block_ptr(x_ptr, shape=(n,), strides=(1,), offsets=(start,), block_shape=(BLOCK,), order=(0,))
    yb = tl.make_block_ptr(y_ptr, shape=(n,), strides=(1,), offsets=(start,), block_shape=(BLOCK,), order=(0,))
    ob = tl.make_block_ptr(out_ptr, shape=(n,), strides=(1,), offsets=(start,), block_shape=(BLOCK,), order=(0,))
    s = tl.load(xb, boundary_check=(0,)) + tl.load(yb, boundary_check=(0,))
    tl.store(ob, s, boundary_check=(0,))


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
        return out
"""
)


GELU_TASK = VECTOR_ADD_TASK.replace("return x + y", "return torch.nn.functional.gelu(x, approximate='tanh') + y")

LIBDEVICE_GELU = (
    KERNEL_HEAD
    + """
from triton.language.extra import libdevice


@triton.jit
def gelu_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    inner = 0.7978845608028654 * (x + 0.044715 * libdevice.pow(x, 3.0))
    tl.store(out_ptr + offs, 0.5 * x * (1.0 + libdevice.tanh(inner)) + tl.load(y_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        gelu_add[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
        return out
"""
)


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    b = TritonInterpreterBackend(fast_config(tmp_path_factory.mktemp("triton-cache"), correctness_trials=3))
    yield b
    b.close()


def evaluate(backend, task_source: str, candidate: str):
    return backend.evaluate(load_task(task_source), candidate, trials=3)


def test_autotuned_kernel_with_three_configs_is_correct_and_every_config_was_checked(backend):
    result = evaluate(backend, VECTOR_ADD_TASK, AUTOTUNED_ADD)
    assert result.status == "correct", (result.message, result.diagnostics, result.stdout_tail[-2000:])
    checked = result.compile_info.autotune["add_kernel"]
    assert checked.configs == 3 and checked.checked == ["BLOCK=128", "BLOCK=256", "BLOCK=512"]


def test_autotune_config_that_drops_the_tail_is_caught_in_its_own_trial(backend):
    result = evaluate(backend, VECTOR_ADD_TASK, AUTOTUNED_WRONG_CONFIG)
    assert result.status == "incorrect", (result.message, result.diagnostics)
    assert "add_kernel ran config [BLOCK=256]" in result.message


def test_autotune_config_beyond_the_trials_is_compared_with_the_kept_one(backend):
    result = backend.evaluate(load_task(VECTOR_ADD_TASK), AUTOTUNED_WRONG_CONFIG, trials=1)
    assert result.status == "incorrect", (result.message, result.diagnostics)
    assert "config [BLOCK=256] gives different results from config [BLOCK=8]" in result.message


def test_bf16_dot_matmul_is_correct(backend):
    result = evaluate(backend, BF16_MATMUL_TASK, BF16_MATMUL)
    assert result.status == "correct", (result.message, result.diagnostics)
    assert result.max_abs_error is None or result.max_abs_error < 0.5


def test_bf16_elementwise_arithmetic_is_correct(backend):
    task = VECTOR_ADD_TASK.replace("x + y", "x * y + x - y").replace("dtype = torch.float32", "dtype = torch.bfloat16")
    result = evaluate(backend, task, BF16_ELEMENTWISE)
    assert result.status == "correct", (result.message, result.diagnostics)


def test_kernel_reading_past_its_tensor_is_caught_at_the_load_line(backend):
    result = evaluate(backend, VECTOR_ADD_TASK, UNMASKED_LOADS)
    assert result.status == "runtime_error", (result.status, result.message)
    line = UNMASKED_LOADS.splitlines().index("    x = tl.load(x_ptr + offs)") + 1
    assert f"out-of-bounds load at candidate.py line {line}: offsets up to 1023" in result.message
    assert "a tensor of 1000 elements" in result.message
    assert result.diagnostics[0].category == "out_of_bounds" and result.diagnostics[0].line == line


def test_a_kernel_reading_past_its_tensor_only_at_a_shape_variant_is_incorrect_there(backend):
    result = evaluate(backend, VECTOR_ADD_TASK.replace("n = 1000", "n = 1024"), MASKED_BY_ITS_BLOCKS)
    assert result.status == "incorrect", (result.status, result.message)
    assert result.message.startswith("correct at [1024] x [1024], fails at [513] x [513] (odd): a kernel that assumes its sizes")
    line = MASKED_BY_ITS_BLOCKS.splitlines().index("    x = tl.load(x_ptr + offs, mask=mask)") + 1
    assert f"out-of-bounds load at candidate.py line {line}: offsets up to 767" in result.message
    assert result.diagnostics[0].category == "out_of_bounds" and result.diagnostics[0].line == line
    assert [(v.name, v.status, v.at) for v in result.variants] == [("odd", "failed", "[513] x [513]")]


def test_masks_joined_with_and_are_elementwise_as_the_compiler_reads_them(backend):
    result = evaluate(backend, VECTOR_ADD_TASK, MASKS_JOINED_WITH_AND)
    assert result.status == "correct", (result.message, result.diagnostics)


def test_out_of_bounds_read_is_reported_even_when_the_candidate_catches_it(backend):
    result = evaluate(backend, VECTOR_ADD_TASK, CAUGHT_AND_HIDDEN)
    assert result.status == "runtime_error" and "out-of-bounds load" in result.message, result.message


def test_block_pointer_kernel_runs_on_the_triton_the_hosts_run(backend):
    assert installed_triton() == backend.config.triton_version, "the dev install must pin the hosts' Triton"
    result = evaluate(backend, VECTOR_ADD_TASK, BLOCK_POINTER_COPY)
    assert result.status == "correct", (result.message, result.diagnostics)
    assert result.versions["triton"] == backend.config.triton_version


def test_a_version_other_than_the_hosts_is_named_in_the_backend_status(tmp_path):
    b = TritonInterpreterBackend(fast_config(tmp_path, triton_version="3.6.0"))
    try:
        reason = b.status().reason
        assert f"Triton {installed_triton()} as installed here" in reason and "hosts run 3.6.0" in reason
    finally:
        b.close()


def test_libdevice_functions_are_interpreted(backend):
    result = evaluate(backend, GELU_TASK, LIBDEVICE_GELU)
    assert result.status == "correct", (result.message, result.diagnostics)
