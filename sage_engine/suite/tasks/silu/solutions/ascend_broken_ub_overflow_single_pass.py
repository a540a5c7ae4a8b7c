"""Deliberately broken for the Ascend compile gate: a GPU-style single pass
that loads 65536 fp32 elements per program. Correct in the interpreter, but
in + out double-buffered need 1 MiB of Unified Buffer where a core has
192 KiB, so bishengir-compile reports "ub overflow"."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 65536


@triton.jit
def silu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x / (1.0 + tl.exp(-x))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        silu_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK)
        return y
