"""Sum of squares per row, one rsqrt per row, then a single broadcast multiply."""

import torch
import torch.nn as nn

_EPS = 1e-12


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sumsq = torch.linalg.vecdot(x, x, dim=1).unsqueeze(1)
        # max(norm, eps) == sqrt(max(sumsq, eps^2)), so one rsqrt covers the clamp.
        return x * torch.rsqrt(sumsq.clamp_min(_EPS * _EPS))
