"""Adam step as one Triton kernel over flat blocks: loads the four inputs once, stores the
three outputs once. Bias corrections are folded on the host into two scalars."""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _adam_kernel(
    p_ptr, g_ptr, m_ptr, v_ptr, po_ptr, mo_ptr, vo_ptr, n, beta1, beta2, weight_decay, eps, step_size, inv_sqrt_bc2, BLOCK: tl.constexpr
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    p = tl.load(p_ptr + offs, mask=mask, other=0.0)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0) + weight_decay * p
    m = tl.load(m_ptr + offs, mask=mask, other=0.0) * beta1 + g * (1.0 - beta1)
    v = tl.load(v_ptr + offs, mask=mask, other=0.0) * beta2 + g * g * (1.0 - beta2)
    tl.store(mo_ptr + offs, m, mask=mask)
    tl.store(vo_ptr + offs, v, mask=mask)
    tl.store(po_ptr + offs, p - step_size * m / (tl.sqrt(v) * inv_sqrt_bc2 + eps), mask=mask)


class ModelNew(nn.Module):
    BLOCK = 16384

    def __init__(self, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, step: int):
        super().__init__()
        self.lr, self.beta1, self.beta2 = lr, beta1, beta2
        self.eps, self.weight_decay, self.step = eps, weight_decay, step

    def forward(self, param, grad, exp_avg, exp_avg_sq):
        tensors = [t.contiguous() for t in (param, grad, exp_avg, exp_avg_sq)]
        outs = [torch.empty_like(t) for t in tensors[:1] + tensors[2:]]
        n = param.numel()
        step_size = self.lr / (1.0 - self.beta1**self.step)
        inv_sqrt_bc2 = 1.0 / math.sqrt(1.0 - self.beta2**self.step)
        _adam_kernel[(triton.cdiv(n, self.BLOCK),)](
            *tensors,
            *outs,
            n,
            self.beta1,
            self.beta2,
            self.weight_decay,
            self.eps,
            step_size,
            inv_sqrt_bc2,
            BLOCK=self.BLOCK,
        )
        return tuple(outs)
