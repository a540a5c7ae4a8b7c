"""Batched matrix multiplication of two 3-D tensors."""

import torch
import torch.nn as nn

batch_size = 16
M = 128
K = 256
N = 128
dtype = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(batch_size, M, K, dtype=dtype), torch.randn(batch_size, K, N, dtype=dtype)]


def get_init_inputs():
    return []
