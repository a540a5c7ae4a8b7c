"""Softmax over the last dimension of a 2-D tensor."""

import torch
import torch.nn as nn

batch_size = 512
dim = 4096
dtype = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=dtype) * 3.0]


def get_init_inputs():
    return []
