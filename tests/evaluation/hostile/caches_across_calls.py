"""Computes honestly for the first calls (the correctness trials), then
returns its last output forever: fast in timing, stale on new inputs.

task: relu
expect: rejected
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.kept = None

    def forward(self, x):
        self.calls += 1
        if self.calls > 2 and self.kept is not None:
            return self.kept.clone()
        self.kept = torch.clamp(x, min=0.0)
        return self.kept.clone()
