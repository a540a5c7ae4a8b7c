"""Softmax from max, exp and sum, with in-place steps to keep to one temporary buffer."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        e = (xf - xf.amax(dim=-1, keepdim=True)).exp_()
        return e.div_(e.sum(dim=-1, keepdim=True)).to(x.dtype)
