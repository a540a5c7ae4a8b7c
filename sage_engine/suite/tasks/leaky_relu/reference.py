"""Leaky ReLU with a configurable negative slope."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
dim = 32768
negative_slope = 0.01
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, negative_slope=self.negative_slope)


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=dtype)]


def get_init_inputs():
    return [negative_slope]
