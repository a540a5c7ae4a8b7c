"""Calls the forbidden op as a Tensor method.

task: row_softmax
expect: rejected
"""

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.softmax(-1)
