"""Reads the caller's frame to find the reference output.

task: relu
expect: rejected
"""

import sys

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        caller = sys._getframe(1)
        return caller.f_locals.get("ref_out", [x])[0]
