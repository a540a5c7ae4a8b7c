"""Bias add + exact GELU fused for Ascend (Triton-Ascend).

One program per vector core walks rows; each row is processed in UB-sized
column blocks, so the bias block is loaded next to the activation block and
no integer modulo is needed to find a column (integer division and modulo
run as scalar code on the vector unit).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

VECTOR_CORES = 40  # Ascend910B3
BLOCK = 4096  # x, bias and y blocks in fp32, double-buffered: ~96 KiB of UB


@triton.jit
def bias_gelu_kernel(x_ptr, b_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for r in range(pid, rows, tl.num_programs(0)):
        row_x = x_ptr + r * cols
        row_y = y_ptr + r * cols
        for c in range(0, cols, BLOCK):
            offs = c + tl.arange(0, BLOCK)
            mask = offs < cols
            x = tl.load(row_x + offs, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            h = x + b
            y = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))
            tl.store(row_y + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        bias = self.bias.to(x.dtype).contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        bias_gelu_kernel[(min(VECTOR_CORES, rows),)](x, bias, y, rows, cols, BLOCK=BLOCK)
        return y
