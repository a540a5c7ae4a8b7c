"""Scaled dot-product attention over (batch, heads, seq, head_dim) tensors, no mask."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 2
heads = 8
seq_len = 256
head_dim = 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


def get_inputs():
    shape = (batch_size, heads, seq_len, head_dim)
    return [torch.randn(shape, dtype=dtype) for _ in range(3)]


def get_init_inputs():
    return []
