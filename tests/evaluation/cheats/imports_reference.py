"""Imports the reference module and delegates to it.

task: relu
expect: rejected
"""

import torch.nn as nn
from reference import Model


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Model()

    def forward(self, x):
        return self.inner(x)
