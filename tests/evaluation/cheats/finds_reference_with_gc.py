"""Digs the reference model out of the garbage collector.

task: relu
expect: rejected
"""

import gc

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        for obj in gc.get_objects():
            if type(obj).__name__ == "Model":
                return obj(x)
        return x
