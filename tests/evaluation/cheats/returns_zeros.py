"""Returns zeros of the right shape and dtype: fast, and wrong.

task: row_softmax
expect: incorrect
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)
