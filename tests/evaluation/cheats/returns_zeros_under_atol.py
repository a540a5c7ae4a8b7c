"""Returns zeros where every output is smaller than the absolute tolerance:
each of softmax's 393216 outputs a row is about 2.5e-6, under atol 1e-4.

task: long_softmax
expect: incorrect
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)
