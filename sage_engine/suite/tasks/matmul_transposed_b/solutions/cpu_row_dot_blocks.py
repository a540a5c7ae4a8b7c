"""A @ B^T computed by output column blocks: each block is A times a contiguous slab of B's
rows, so B is read along K without being transposed in memory."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    BN = 128

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        n = b.shape[0]
        out = torch.empty(a.shape[0], n, dtype=a.dtype)
        for j in range(0, n, self.BN):
            torch.mm(a, b[j : j + self.BN].t(), out=out[:, j : j + self.BN])
        return out
