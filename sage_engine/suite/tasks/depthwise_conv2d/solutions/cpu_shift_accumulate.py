"""Direct depthwise convolution: for each of the k*k taps, a shifted view of the padded input
times that tap's per-channel weight, accumulated in place onto the bias."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels, 1, kernel_size, kernel_size) / kernel_size)
        self.bias = nn.Parameter(torch.randn(channels) * 0.1)
        self.padding = kernel_size // 2
        self.channels = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        k = self.weight.shape[-1]
        p = self.padding
        xp = F.pad(x, (p, p, p, p))
        out = self.bias.view(1, c, 1, 1).expand(n, c, h, w).clone()
        for i in range(k):
            for j in range(k):
                tap = self.weight[:, 0, i, j].view(1, c, 1, 1)
                out.addcmul_(xp[:, :, i : i + h, j : j + w], tap)
        return out
