"""Makes the device's events report a tiny time, by names no static check
knows. SAGE's timer must not believe it."""

import math

import torch
import torch.nn as nn

_device = getattr(torch, "cu" + "da")


def _instant(start, end):
    return 1e-3


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        setattr(_device.Event, "elapsed" + "_time", _instant)
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
