"""RMSNorm over the last axis for Ascend (Triton-Ascend): one program per
vector core strides over rows; the mean square accumulates lane-wise in fp32
over UB-sized blocks, then a second pass scales by rsqrt and the weight."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

VECTOR_CORES = 40  # Ascend910B3
BLOCK = 2048


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, y_ptr, rows, cols, eps, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for r in range(pid, rows, tl.num_programs(0)):
        base = r * cols
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for c in range(0, cols, BLOCK):
            offs = c + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + base + offs, mask=offs < cols, other=0.0).to(tl.float32)
            acc += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / cols + eps)
        for c in range(0, cols, BLOCK):
            offs = c + tl.arange(0, BLOCK)
            mask = offs < cols
            x = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_ptr + base + offs, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        w = self.weight.to(x.dtype).contiguous()
        rms_norm_kernel[(min(VECTOR_CORES, rows),)](x, w, y, rows, cols, self.eps, BLOCK=BLOCK)
        return y
