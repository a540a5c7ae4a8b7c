"""Computes the product once and returns it again whenever a strided sample
of its inputs' values repeats: a timing loop that calls it on the same
values would read it as 50x faster.

task: matmul
expect: rejected
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, a, b):
        key = (tuple(a.shape), tuple(b.shape), a.reshape(-1)[::997].sum().item(), b.reshape(-1)[::997].sum().item())
        if key not in self.memo:
            self.memo[key] = torch.matmul(a, b)
        return self.memo[key]
