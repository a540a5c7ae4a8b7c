"""Argmax in two reductions: the row maximum, then the smallest column where the row
equals it (first occurrence, as torch defines argmax)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        hit = x == x.amax(dim=1, keepdim=True)
        columns = torch.arange(n).expand_as(x)
        return torch.where(hit, columns, n).amin(dim=1)
