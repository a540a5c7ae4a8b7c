"""Maximum of a 3-D tensor over its middle dimension (values only)."""

import torch
import torch.nn as nn

batch_size = 32
dim1 = 256
dim2 = 256
reduce_dim = 1
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max(x, dim=self.dim).values


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2, dtype=dtype)]


def get_init_inputs():
    return [reduce_dim]
