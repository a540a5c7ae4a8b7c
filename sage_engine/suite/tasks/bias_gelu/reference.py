"""Bias add followed by exact GELU, as after a linear layer."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 256
dim = 4096
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x + self.bias.to(x.dtype))


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=dtype)]


def get_init_inputs():
    return [dim]
