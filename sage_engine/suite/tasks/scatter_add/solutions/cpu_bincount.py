"""Scatter-add as a weighted histogram: each (index, column) pair becomes one flat bin,
bincount sums src into the bins, and the result is added to base."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, base: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        out_rows, cols = base.shape
        flat = index * cols + torch.arange(index.shape[1]).unsqueeze(0)
        sums = torch.bincount(flat.reshape(-1), weights=src.reshape(-1), minlength=out_rows * cols)
        return base + sums.view(out_rows, cols).to(base.dtype)
