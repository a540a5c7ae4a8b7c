"""Replaces torch.matmul so the reference's call gets slower (and the
candidate looks fast).

task: matmul
expect: rejected
"""

import time

import torch
import torch.nn as nn

_real = torch.matmul


def _slow_matmul(a, b):
    time.sleep(0.01)
    return _real(a, b)


torch.matmul = _slow_matmul


class ModelNew(nn.Module):
    def forward(self, A, B):
        return torch.mm(A, B)
