"""Sums each row in blocks of 128K values and drops the tail: right at the
declared row length (three blocks), wrong at any other.

task: long_softmax
expect: incorrect
"""

import torch
import torch.nn as nn

BLOCK = 131072


class ModelNew(nn.Module):
    def forward(self, x):
        whole = x.shape[-1] // BLOCK * BLOCK
        e = torch.exp(x - x.amax(dim=-1, keepdim=True))
        return e / e[..., :whole].sum(dim=-1, keepdim=True)
