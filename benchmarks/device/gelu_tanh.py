"""Tanh-approximated GELU (the GPT-2 form) over an 8192 x 8192 float32
matrix: one memory-bound elementwise pass that eager PyTorch runs as six
kernels. The device check's fused-kernel task."""

import math

import torch
import torch.nn as nn

SAGE_TASK = {"name": "GELU, tanh form, 8192 x 8192", "operator": "gelu", "family": "activation", "level": 1}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


rows = 8192
cols = 8192


def get_inputs():
    return [torch.rand(rows, cols)]


def get_init_inputs():
    return []
