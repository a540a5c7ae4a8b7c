"""Average pooling as a sum of kernel_size strided views of the input, one per window tap."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, s = self.kernel_size, self.stride
        out_len = (x.shape[-1] - k) // s + 1
        span = s * (out_len - 1) + 1
        total = x[..., 0:span:s].clone()
        for tap in range(1, k):
            total += x[..., tap : tap + span : s]
        return total.mul_(1.0 / k)
