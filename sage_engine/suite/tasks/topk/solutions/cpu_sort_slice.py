"""Top-k by a full descending sort of each row, keeping the first k entries."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k: int):
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor):
        values, indices = torch.sort(x, dim=-1, descending=True)
        return values[..., : self.k].contiguous(), indices[..., : self.k].contiguous()
