"""Block-sparse attention: each query block sees its neighbouring key blocks (a local window)
and the first key block (a global sink). The reference expands the block layout into a
dense mask and runs dense masked attention."""

import math

import torch
import torch.nn as nn

batch_size = 1
heads = 4
seq_len = 512
head_dim = 64
block_size = 64
window = 1
dtype = torch.float32


def block_layout(num_blocks: int, window: int) -> torch.Tensor:
    idx = torch.arange(num_blocks)
    local = (idx.unsqueeze(1) - idx.unsqueeze(0)).abs() <= window
    local[:, 0] = True
    return local


class Model(nn.Module):
    allowed: torch.Tensor  # a buffer (registered in __init__), which nn.Module's attribute type does not say

    def __init__(self, seq_len: int, block_size: int, window: int):
        super().__init__()
        if seq_len % block_size:
            raise ValueError(f"seq_len {seq_len} must be a multiple of block_size {block_size}")
        layout = block_layout(seq_len // block_size, window)
        dense = layout.repeat_interleave(block_size, 0).repeat_interleave(block_size, 1)
        self.register_buffer("allowed", dense)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~self.allowed, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def get_inputs():
    shape = (batch_size, heads, seq_len, head_dim)
    return [torch.randn(shape, dtype=dtype) for _ in range(3)]


def get_init_inputs():
    return [seq_len, block_size, window]
