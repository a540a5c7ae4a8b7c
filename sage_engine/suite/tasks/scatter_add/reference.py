"""Scatter-add along dimension 0: out = base; out[index[i, j], j] += src[i, j]."""

import torch
import torch.nn as nn

out_rows = 1024
num_rows = 4096
dim = 256
dtype = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, base: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return torch.scatter_add(base, 0, index, src)


def get_inputs():
    base = torch.randn(out_rows, dim, dtype=dtype)
    index = torch.randint(0, out_rows, (num_rows, dim))
    src = torch.randn(num_rows, dim, dtype=dtype)
    return [base, index, src]


def get_init_inputs():
    return []
