"""Matmul with the second operand stored transposed: C = A @ B^T (B is N x K)."""

import torch
import torch.nn as nn

M = 512
K = 512
N = 512
dtype = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b.T)


def get_inputs():
    return [torch.randn(M, K, dtype=dtype), torch.randn(N, K, dtype=dtype)]


def get_init_inputs():
    return []
