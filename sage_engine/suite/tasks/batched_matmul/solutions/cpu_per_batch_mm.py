"""Batched matmul as one 2-D GEMM per batch entry, written straight into the output slice."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty(a.shape[0], a.shape[1], b.shape[2], dtype=a.dtype)
        for i in range(a.shape[0]):
            torch.mm(a[i], b[i], out=out[i])
        return out
