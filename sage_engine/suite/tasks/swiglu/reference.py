"""SwiGLU gate: SiLU of the gate projection times the up projection."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 256
dim = 4096
dtype = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=dtype), torch.randn(batch_size, dim, dtype=dtype)]


def get_init_inputs():
    return []
