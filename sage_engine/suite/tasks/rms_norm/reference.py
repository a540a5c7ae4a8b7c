"""RMSNorm over the last dimension with a learned scale (as in Llama)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 256
dim = 4096
eps = 1e-6
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight.to(x.dtype), self.eps)


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=dtype)]


def get_init_inputs():
    return [dim, eps]
