"""LayerNorm from its definition: mean, centred variance, rsqrt, scale and shift in float."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.bias = nn.Parameter(0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        centred = xf - xf.mean(dim=-1, keepdim=True)
        var = centred.square().mean(dim=-1, keepdim=True)
        y = centred.mul_(torch.rsqrt(var + self.eps))
        return torch.addcmul(self.bias, y, self.weight).to(x.dtype)
