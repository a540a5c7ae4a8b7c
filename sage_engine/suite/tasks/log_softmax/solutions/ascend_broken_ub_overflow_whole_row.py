"""Deliberately broken for the Ascend compile gate: the GPU recipe of one
program per row with the whole row in one block. Correct in the interpreter,
but for the 32000-wide case the block is 32768 fp32 values (128 KiB), and the
row, its exponentials and the output, double-buffered, cannot fit in the
192 KiB Unified Buffer: bishengir-compile reports "ub overflow". (It also
launches one program per row instead of one per core.)"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def log_softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=float("-inf")).to(tl.float32)
    shifted = x - tl.max(x, axis=0)
    lse = tl.log(tl.sum(tl.exp(shifted), axis=0))
    tl.store(y_ptr + row * cols + offs, (shifted - lse).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        log_softmax_kernel[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
        return y
