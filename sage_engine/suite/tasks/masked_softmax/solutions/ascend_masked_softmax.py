"""Masked row softmax for Ascend (Triton-Ascend): masked positions become
-inf, then an online max/sum pass over UB-sized blocks and a normalising
pass; one program per vector core striding over rows. The bool mask is read
as int8 and compared as fp32 (integer compares run as scalar code)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

VECTOR_CORES = 40  # Ascend910B3
BLOCK = 2048


@triton.jit
def masked_softmax_kernel(x_ptr, m_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for r in range(pid, rows, tl.num_programs(0)):
        base = r * cols
        run_max = tl.full([BLOCK], -1.0e30, dtype=tl.float32)
        run_sum = tl.zeros([BLOCK], dtype=tl.float32)
        for c in range(0, cols, BLOCK):
            offs = c + tl.arange(0, BLOCK)
            inb = offs < cols
            x = tl.load(x_ptr + base + offs, mask=inb, other=0.0).to(tl.float32)
            keep = tl.load(m_ptr + base + offs, mask=inb, other=0).to(tl.float32)
            x = tl.where(keep > 0.5, x, float("-inf"))
            m_new = tl.maximum(run_max, x)
            run_sum = run_sum * tl.exp(run_max - m_new) + tl.exp(x - m_new)
            run_max = m_new
        row_max = tl.max(run_max, axis=0)
        inv = 1.0 / tl.sum(run_sum * tl.exp(run_max - row_max), axis=0)
        for c in range(0, cols, BLOCK):
            offs = c + tl.arange(0, BLOCK)
            inb = offs < cols
            x = tl.load(x_ptr + base + offs, mask=inb, other=0.0).to(tl.float32)
            keep = tl.load(m_ptr + base + offs, mask=inb, other=0).to(tl.float32)
            y = tl.where(keep > 0.5, tl.exp(x - row_max) * inv, 0.0)
            tl.store(y_ptr + base + offs, y.to(y_ptr.dtype.element_ty), mask=inb)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        keep = mask.contiguous().view(torch.int8)
        rows, cols = x.shape
        y = torch.empty_like(x)
        masked_softmax_kernel[(min(VECTOR_CORES, rows),)](x, keep, y, rows, cols, BLOCK=BLOCK)
        return y
