"""Depthwise 3x3 convolution (one filter per channel) with bias, stride 1, "same" padding."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8
channels = 64
height = 56
width = 56
kernel_size = 3
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels, 1, kernel_size, kernel_size) / kernel_size)
        self.bias = nn.Parameter(torch.randn(channels) * 0.1)
        self.padding = kernel_size // 2
        self.channels = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight, self.bias, padding=self.padding, groups=self.channels)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width, dtype=dtype)]


def get_init_inputs():
    return [channels, kernel_size]
