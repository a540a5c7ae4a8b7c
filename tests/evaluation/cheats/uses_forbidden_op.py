"""Calls the very op the task asks to implement.

task: row_softmax
expect: rejected
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)
