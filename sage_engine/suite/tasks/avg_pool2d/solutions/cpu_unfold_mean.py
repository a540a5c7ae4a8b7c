"""Average pooling by viewing the zero-padded input as k x k windows (Tensor.unfold makes a
strided view, no copy) and averaging each window."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, s, p = self.kernel_size, self.stride, self.padding
        if p:
            x = F.pad(x, (p, p, p, p))
        windows = x.unfold(2, k, s).unfold(3, k, s)
        return windows.sum(dim=(-2, -1)).mul_(1.0 / (k * k))
