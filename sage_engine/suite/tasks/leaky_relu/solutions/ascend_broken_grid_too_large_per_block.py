"""Deliberately broken for the Ascend compile gate: a CUDA habit, one
program per 16 elements. The 64 x 32768 case launches 131072 programs; an
Ascend launch caps each grid dimension at 65535 (coreDim is a uint16), so the
gate reports grid_too_large. The fix is a grid of VECTOR_CORES programs that
loop over blocks."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 16


@triton.jit
def leaky_relu_kernel(x_ptr, y_ptr, n, slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.where(x >= 0.0, x, x * slope)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = float(negative_slope)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        leaky_relu_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, self.negative_slope, BLOCK=BLOCK)
        return y
