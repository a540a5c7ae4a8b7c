"""GroupNorm over channel groups of an NCHW tensor with a per-channel affine transform."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
channels = 64
groups = 8
height = 32
width = 32
eps = 1e-5
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, groups: int, channels: int, eps: float):
        super().__init__()
        self.groups = groups
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels))
        self.bias = nn.Parameter(0.1 * torch.randn(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.group_norm(x, self.groups, self.weight, self.bias, self.eps)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width, dtype=dtype)]


def get_init_inputs():
    return [groups, channels, eps]
