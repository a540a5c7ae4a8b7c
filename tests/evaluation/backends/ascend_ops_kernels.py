"""Triton-Ascend extension kernels, each run by the triton-ascend interpreter
with SAGE's interpretation and compared with plain PyTorch.

Run under the ascend-compile virtualenv's Python (test_ascend_interp.py does):
prints one JSON object, op name -> "ok" or what went wrong.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

if "--plain" not in sys.argv:  # without SAGE's interpretation: what the interpreter does on its own
    from sage_engine.evaluation.child.fidelity import ascend_ops, bf16

    ascend_ops.install(interpreter)
    bf16.install(interpreter)


@triton.jit
def gather_kernel(src_ptr, idx_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr):
    rows = tl.arange(0, R)[:, None]
    cols = tl.arange(0, C)[None, :]
    src = tl.load(src_ptr + rows * C + cols)
    idx = tl.load(idx_ptr + rows * C + cols)
    tl.store(out_ptr + rows * C + cols, tl.gather(src, idx, 1))


@triton.jit
def slice_kernel(x_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr):
    rows = tl.arange(0, R)[:, None]
    cols = tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + rows * C + cols)
    top = tl.extract_slice(x, (0, 0), (R // 2, C), (1, 1))
    bottom = tl.extract_slice(x, (R // 2, 0), (R // 2, C), (1, 1))
    swapped = tl.insert_slice(x, bottom, (0, 0), (R // 2, C), (1, 1))
    swapped = tl.insert_slice(swapped, top, (R // 2, 0), (R // 2, C), (1, 1))
    tl.store(out_ptr + rows * C + cols, swapped)


@triton.jit
def get_element_kernel(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr, tl.get_element(x, (3,)))


@triton.jit
def index_select_kernel(table_ptr, idx_ptr, out_ptr, ROWS: tl.constexpr, R: tl.constexpr, D: tl.constexpr):
    r = tl.arange(0, R)
    idx = tl.load(idx_ptr + r)[None, :]
    rows = tl.index_select(table_ptr, idx, ROWS, D, (0, 0, 0), (1, R, D))
    out = tl.reshape(rows, (R, D))
    tl.store(out_ptr + r[:, None] * D + tl.arange(0, D)[None, :], out)


@triton.jit
def hint_parallel_kernel(x_ptr, out_ptr, N: tl.constexpr):
    for s in tl.parallel(0, 2, bind_sub_block=True):
        offs = s * N + tl.arange(0, N)
        x = tl.load(x_ptr + offs)
        tl.compile_hint(x, "dot_pad_only_k")
        tl.store(out_ptr + offs, x * 2.0)


@triton.jit
def flip_sort_kernel(x_ptr, flip_ptr, sort_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(flip_ptr + tl.arange(0, N), tl.flip(x, 0))
    tl.store(sort_ptr + tl.arange(0, N), tl.sort(x, 0, False))


@triton.jit
def bf16_add_kernel(out_ptr, x_ptr, y_ptr, XS: tl.constexpr):
    idx = tl.arange(0, XS)
    tl.store(out_ptr + idx, tl.load(x_ptr + idx) + tl.load(y_ptr + idx))


def check(name: str, fn, results: dict) -> None:
    try:
        fn()
        results[name] = "ok"
    except BaseException as exc:  # noqa: BLE001 - reported, the test decides
        results[name] = "".join(traceback.format_exception_only(type(exc), exc)).strip()[-400:]


def same(got: torch.Tensor, want: torch.Tensor, **tol) -> None:
    torch.testing.assert_close(got, want, **tol)


def gather() -> None:
    src = torch.randn(4, 16)
    idx = torch.randint(0, 16, (4, 16), dtype=torch.int32)
    out = torch.empty_like(src)
    gather_kernel[(1,)](src, idx, out, 4, 16)
    same(out, torch.gather(src, 1, idx.long()))


def slices() -> None:
    x = torch.randn(8, 16)
    out = torch.empty_like(x)
    slice_kernel[(1,)](x, out, 8, 16)
    same(out, torch.cat([x[4:], x[:4]]))


def get_element() -> None:
    x = torch.randn(8)
    out = torch.empty(1)
    get_element_kernel[(1,)](x, out, 8)
    same(out, x[3:4])


def index_select() -> None:
    table = torch.randn(50, 8)
    idx = torch.randint(0, 50, (16,), dtype=torch.int32)
    out = torch.empty(16, 8)
    index_select_kernel[(1,)](table, idx, out, 50, 16, 8)
    same(out, torch.index_select(table, 0, idx.long()))


def hint_parallel() -> None:
    x = torch.randn(64)
    out = torch.empty_like(x)
    hint_parallel_kernel[(1,)](x, out, 32)
    same(out, x * 2)


def flip_sort() -> None:
    x = torch.randn(16)
    flipped, ordered = torch.empty_like(x), torch.empty_like(x)
    flip_sort_kernel[(1,)](x, flipped, ordered, 16)
    same(flipped, torch.flip(x, (0,)))
    same(ordered, torch.sort(x).values)


def bf16_add() -> None:
    x, y = torch.rand(1024, dtype=torch.bfloat16), torch.rand(1024, dtype=torch.bfloat16)
    out = torch.empty_like(x)
    bf16_add_kernel[1, 1, 1](out, x, y, XS=1024)
    same(out, x + y)


if __name__ == "__main__":
    torch.manual_seed(0)
    found: dict[str, str] = {}
    for op, fn in (
        ("gather", gather),
        ("extract_slice/insert_slice", slices),
        ("get_element", get_element),
        ("index_select", index_select),
        ("compile_hint/parallel", hint_parallel),
        ("flip/sort", flip_sort),
        ("bf16 add", bf16_add),
    ):
        check(op, fn, found)
    print(json.dumps(found))
