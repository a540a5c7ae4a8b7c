"""Causal self-attention written the textbook way: full score matrix, -inf above the diagonal,
softmax, then the product with V."""

import math

import torch
import torch.nn as nn

batch_size = 2
heads = 8
seq_len = 256
head_dim = 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        seq = q.shape[-2]
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        future = torch.ones(seq, seq, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def get_inputs():
    shape = (batch_size, heads, seq_len, head_dim)
    return [torch.randn(shape, dtype=dtype) for _ in range(3)]


def get_init_inputs():
    return []
