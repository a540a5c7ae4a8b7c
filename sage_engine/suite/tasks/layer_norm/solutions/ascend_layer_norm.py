"""LayerNorm over the last axis for Ascend (Triton-Ascend).

One program per vector core strides over rows. Pass 1 accumulates sum and sum
of squares lane-wise in fp32 over UB-sized blocks (Welford would be safer for
huge means; inputs here are centred), pass 2 normalises and applies the affine
weight and bias. The row is never held whole, so widths beyond the UB work.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

VECTOR_CORES = 40  # Ascend910B3
BLOCK = 2048


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, rows, cols, eps, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for r in range(pid, rows, tl.num_programs(0)):
        base = r * cols
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        acc2 = tl.zeros([BLOCK], dtype=tl.float32)
        for c in range(0, cols, BLOCK):
            offs = c + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + base + offs, mask=offs < cols, other=0.0).to(tl.float32)
            acc += x
            acc2 += x * x
        mean = tl.sum(acc, axis=0) / cols
        var = tl.maximum(tl.sum(acc2, axis=0) / cols - mean * mean, 0.0)
        rstd = 1.0 / tl.sqrt(var + eps)
        for c in range(0, cols, BLOCK):
            offs = c + tl.arange(0, BLOCK)
            mask = offs < cols
            x = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            y = (x - mean) * rstd * w + b
            tl.store(y_ptr + base + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.bias = nn.Parameter(0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        w = self.weight.to(x.dtype).contiguous()
        b = self.bias.to(x.dtype).contiguous()
        layer_norm_kernel[(min(VECTOR_CORES, rows),)](x, w, b, y, rows, cols, self.eps, BLOCK=BLOCK)
        return y
