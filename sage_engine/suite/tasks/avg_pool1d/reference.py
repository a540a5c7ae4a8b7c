"""1-D average pooling over the last dimension of an (N, C, L) tensor."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
channels = 64
length = 2048
kernel_size = 4
stride = 2
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool1d(x, self.kernel_size, self.stride)


def get_inputs():
    return [torch.randn(batch_size, channels, length, dtype=dtype)]


def get_init_inputs():
    return [kernel_size, stride]
