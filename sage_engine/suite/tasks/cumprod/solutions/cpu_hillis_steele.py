"""Hillis-Steele scan: log2(n) steps, each multiplying every element by the one `offset`
places before it, with the offset doubling. Works for any sign (no log/exp trick)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        n = x.shape[1]
        offset = 1
        while offset < n:
            shifted = y[:, : n - offset].clone()
            y[:, offset:] *= shifted
            offset *= 2
        return y
