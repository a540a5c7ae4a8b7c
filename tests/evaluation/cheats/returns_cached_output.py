"""Computes the first answer once and returns it forever after: in a timing
loop this looks infinitely fast.

task: relu
expect: rejected
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = None

    def forward(self, x):
        if self.cache is None:
            self.cache = torch.clamp(x, min=0.0)
        return self.cache
