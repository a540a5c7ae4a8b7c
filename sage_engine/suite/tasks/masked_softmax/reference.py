"""Softmax over the last dimension where masked-out positions get zero probability.

Each row keeps a random-length prefix (at least one position), as with padded
sequences of different lengths.
"""

import torch
import torch.nn as nn

batch_size = 256
dim = 4096
dtype = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x.masked_fill(~mask, float("-inf")), dim=-1)


def get_inputs():
    x = torch.randn(batch_size, dim, dtype=dtype) * 3.0
    lengths = torch.randint(1, dim + 1, (batch_size, 1))
    mask = torch.arange(dim).unsqueeze(0) < lengths
    return [x, mask]


def get_init_inputs():
    return []
