"""Exact (erf) GELU applied elementwise."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
dim = 16384
dtype = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=dtype)]


def get_init_inputs():
    return []
