"""BatchNorm2d in inference mode: per-channel running statistics, scale and shift."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
channels = 64
height = 56
width = 56
eps = 1e-5
dtype = torch.float32


class Model(nn.Module):
    # Buffers (registered in __init__): a tensor each, which nn.Module's attribute type does not say.
    running_mean: torch.Tensor
    running_var: torch.Tensor

    def __init__(self, channels: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels))
        self.bias = nn.Parameter(0.1 * torch.randn(channels))
        self.register_buffer("running_mean", 0.5 * torch.randn(channels))
        self.register_buffer("running_var", 0.5 + torch.rand(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # training=False pins inference semantics whatever mode the module is in.
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, training=False, eps=self.eps)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width, dtype=dtype)]


def get_init_inputs():
    return [channels, eps]
