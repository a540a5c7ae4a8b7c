"""Gather along dimension 1: out[i, j] = x[i, index[i, j]]."""

import torch
import torch.nn as nn

batch_size = 256
dim = 8192
num_indices = 4096
dtype = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return torch.gather(x, 1, index)


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=dtype), torch.randint(0, dim, (batch_size, num_indices))]


def get_init_inputs():
    return []
