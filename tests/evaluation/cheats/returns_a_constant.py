"""Returns one number everywhere: the mean of the output (1 / row length),
which is within atol of every element of a long row's softmax.

task: long_softmax
expect: incorrect
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.full_like(x, 1.0 / x.shape[-1])
