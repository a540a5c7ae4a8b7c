"""SiLU as a Triton kernel: a persistent grid of programs strides over the flat tensor."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _silu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for start in range(pid * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = x / (1.0 + tl.exp(-x))
        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    BLOCK = 8192
    NUM_PROGRAMS = 8

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        grid = (min(self.NUM_PROGRAMS, triton.cdiv(n, self.BLOCK)),)
        _silu_kernel[grid](x, y, n, BLOCK=self.BLOCK)
        return y
