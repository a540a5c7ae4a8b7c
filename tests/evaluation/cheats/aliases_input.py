"""Writes the result into the input and returns the input itself.

task: relu
expect: rejected
"""

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_(min=0.0)
