"""Gather along dim 1 as a flat gather: row i's indices are offset by i * row_length and
looked up in the flattened tensor with torch.take."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        offsets = torch.arange(x.shape[0]).unsqueeze(1) * x.shape[1]
        return torch.take(x, index + offsets)
