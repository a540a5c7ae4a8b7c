"""Finds the reference class among nn.Module's subclasses.

task: row_softmax
expect: rejected
"""

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        ref = next(c for c in nn.Module.__subclasses__() if c.__name__ == "Model")
        return ref()(x)
