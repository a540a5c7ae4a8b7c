"""The ascend-compile gate runs the Triton-Ascend people write: its language
extensions, `@libentry`, `@triton.autotune`, bf16, and the UB verdict per config.

Needs the ascend-compile virtualenv (`-m ascend`); the extension ops run in a
real subprocess under its interpreter and are compared with plain PyTorch.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from sage_engine.evaluation.backends import venv
from sage_engine.evaluation.host.tasks import load_task

pytestmark = pytest.mark.ascend

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
OPS = ("gather", "extract_slice/insert_slice", "get_element", "index_select", "compile_hint/parallel", "flip/sort", "bf16 add")


@pytest.fixture(scope="module")
def interpreted_ops(ascend_env) -> dict[str, str]:
    python = venv.env_python(venv.env_dir("ascend-compile", ascend_env))
    proc = subprocess.run(
        [str(python), str(HERE / "ascend_ops_kernels.py")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("op", OPS)
def test_ascend_extension_is_interpreted_as_pytorch_computes_it(interpreted_ops, op):
    assert interpreted_ops[op] == "ok", interpreted_ops[op]


MATMUL_TASK = """
import torch
import torch.nn as nn

M = 256
K = 256
N = 256


class Model(nn.Module):
    def forward(self, a, b):
        c = torch.matmul(a.float(), b.float())
        return (torch.where(c >= 0, c, 0.01 * c) + 1.0).to(torch.float16)


def get_inputs():
    return [torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)]


def get_init_inputs():
    return []

SAGE_TASK = {"name": "matmul_leaky", "operator": "matmul", "family": "matmul", "level": 1,
             "tolerance": {"float16": {"atol": 0.05, "rtol": 0.01}}}
"""

# The kernel of triton-ascend 3.2's tutorial 05 (matrix multiplication), its
# vector epilogue split over the two vector cores with tl.parallel.
MATMUL_KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

{decorators}
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    offs_am = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_bn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs_base = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs_base = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    msk_m = offs_am < M
    msk_n = offs_bn < N
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs_base + k * BLOCK_SIZE_K * stride_ak,
                    mask=msk_m[:, None] and (offs_k[None, :] < K - k * BLOCK_SIZE_K), other=0.0)
        b = tl.load(b_ptrs_base + k * BLOCK_SIZE_K * stride_bk,
                    mask=msk_n[None, :] and (offs_k[:, None] < K - k * BLOCK_SIZE_K), other=0.0)
        accumulator = tl.dot(a, b, accumulator)
    SUB_BLK_M: tl.constexpr = BLOCK_SIZE_M // 2
    for s in tl.parallel(0, 2, bind_sub_block=True):
        vec_sub_blk = tl.extract_slice(accumulator, (s * SUB_BLK_M, 0), (SUB_BLK_M, BLOCK_SIZE_N), (1, 1))
        vec_sub_blk = tl.where(vec_sub_blk >= 0, vec_sub_blk, 0.01 * vec_sub_blk) + 1.0
        c_sub_blk = vec_sub_blk.to(tl.float16)
        offs_cm = pid_m * BLOCK_SIZE_M + s * SUB_BLK_M + tl.arange(0, SUB_BLK_M)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        tl.store(c_ptrs, c_sub_blk, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


class ModelNew(nn.Module):
    def forward(self, a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), dtype=torch.float16)
        grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)
        matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                            c.stride(1){launch})
        return c
"""

AUTOTUNED = MATMUL_KERNEL.format(
    launch="",
    decorators="""@triton.autotune(
    configs=[triton.Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128}),
             triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64})],
    key=["M", "N", "K"],
)""",
)
FIXED_128 = MATMUL_KERNEL.format(decorators="", launch=", BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=128")

LIBENTRY_SOFTMAX = """
import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.runtime.libentry import libentry


@libentry()
@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](y, x, x.shape[0], x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
"""

SOFTMAX_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(16, 200)]


def get_init_inputs():
    return []
"""


def test_libentry_kernel_is_correct(ascend_backend):
    result = ascend_backend.evaluate(load_task(SOFTMAX_TASK), LIBENTRY_SOFTMAX, trials=1)
    assert result.status == "correct", (result.message, result.diagnostics)


VECTOR_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return x + y


def get_inputs():
    return [torch.randn(70000), torch.randn(70000)]


def get_init_inputs():
    return []
"""

AUTOTUNED_ADD = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(configs=[{configs}], key=["n"])
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
        return out
"""


def configs(*blocks: int) -> str:
    return ", ".join(f'triton.Config({{"BLOCK": {b}}})' for b in blocks)


@pytest.mark.slow
def test_tutorial_05_matmul_at_128_tiles_passes_the_front_end_as_the_device_specializes_it(ascend_backend):
    # A device launch makes the unit strides compile-time constants (Triton's
    # JIT specializes an int equal to 1); lowered with them as runtime values
    # this kernel overflows the UB (10486016 bits), which it does not on the device.
    result = ascend_backend.evaluate(load_task(MATMUL_TASK), FIXED_128, trials=1)
    assert result.status == "correct", (result.message, result.diagnostics)
    kernel = result.compile_info.kernels[0]
    assert kernel.front_end == "passed" and kernel.specialization["stride_bn"] == "1"


@pytest.mark.slow
def test_autotuned_tutorial_05_is_correct_with_every_config_checked(ascend_backend):
    result = ascend_backend.evaluate(load_task(MATMUL_TASK), AUTOTUNED, trials=1)
    assert result.status == "correct", (result.message, result.diagnostics)
    assert len(result.compile_info.autotune["matmul_kernel"].checked) == 2
    verdicts = {k.config: k.front_end for k in result.compile_info.kernels}
    assert set(verdicts.values()) == {"passed"} and len(verdicts) == 2


@pytest.mark.slow
def test_autotune_config_that_overflows_the_ub_is_named_and_left_to_the_autotuner(ascend_backend):
    result = ascend_backend.evaluate(load_task(VECTOR_TASK), AUTOTUNED_ADD.format(configs=configs(4096, 65536)), trials=1)
    assert result.status == "correct", (result.message, result.diagnostics)
    verdicts = {k.config: k.front_end for k in result.compile_info.kernels}
    assert verdicts == {"BLOCK=4096": "passed", "BLOCK=65536": "ub_overflow"}
    warning = next(d for d in result.diagnostics if d.severity == "warning")
    assert warning.category == "ub_overflow" and "config [BLOCK=65536]" in warning.message


@pytest.mark.slow
def test_autotuned_kernel_whose_every_config_overflows_is_a_compile_error(ascend_backend):
    result = ascend_backend.evaluate(load_task(VECTOR_TASK), AUTOTUNED_ADD.format(configs=configs(65536, 131072)), trials=1)
    assert result.status == "compile_error" and result.compile_info.category == "ub_overflow", result.message
