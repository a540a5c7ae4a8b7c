"""1-D convolution with bias ("same" padding, stride 1)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8
in_channels = 64
out_channels = 128
length = 512
kernel_size = 3
padding = 1
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, padding: int):
        super().__init__()
        fan_in = in_channels * kernel_size
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, kernel_size) / fan_in**0.5)
        self.bias = nn.Parameter(torch.randn(out_channels) * 0.1)
        self.padding = padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x, self.weight, self.bias, padding=self.padding)


def get_inputs():
    return [torch.randn(batch_size, in_channels, length, dtype=dtype)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding]
