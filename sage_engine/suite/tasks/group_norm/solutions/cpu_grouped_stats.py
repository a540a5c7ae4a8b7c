"""GroupNorm: per-(sample, group) mean and variance on a reshaped view, then the statistics
are folded with the affine weights into one per-(sample, channel) multiply-add."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, groups: int, channels: int, eps: float):
        super().__init__()
        self.groups = groups
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels))
        self.bias = nn.Parameter(0.1 * torch.randn(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c = x.shape[:2]
        grouped = x.reshape(n, self.groups, -1)
        mean = grouped.mean(dim=-1)
        var = (grouped - mean.unsqueeze(-1)).square().mean(dim=-1)
        inv = torch.rsqrt(var + self.eps)
        per_group = c // self.groups
        # (n, groups) -> (n, channels): each channel takes its group's statistics.
        scale = inv.repeat_interleave(per_group, dim=1) * self.weight
        shift = self.bias - mean.repeat_interleave(per_group, dim=1) * scale
        spatial = (1,) * (x.dim() - 2)
        return torch.addcmul(shift.view(n, c, *spatial), x, scale.view(n, c, *spatial))
