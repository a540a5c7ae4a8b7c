"""Pairwise (tree) reduction: halve the reduced dimension until one slice is left.

Half inputs are summed in float so the log2(n) intermediate roundings do not add up.
"""

import torch
import torch.nn as nn


def tree_sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    n = x.shape[dim]
    while n > 1:
        half = n // 2
        total = x.narrow(dim, 0, half) + x.narrow(dim, half, half)
        if n % 2:
            total.narrow(dim, 0, 1).add_(x.narrow(dim, n - 1, 1))
        x, n = total, half
    return x.squeeze(dim)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tree_sum(x.float(), self.dim).to(x.dtype)
