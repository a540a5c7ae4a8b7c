"""Replaces torch functions through the module's namespace dict: a slower
relu for the reference and an allclose that always agrees.

task: relu
expect: rejected
"""

import time

import torch
import torch.nn as nn

_NAME = "re" + "lu"
_fast = vars(torch)[_NAME]


def _slow(x):
    time.sleep(0.01)
    return _fast(x)


vars(torch)[_NAME] = _slow
vars(torch)["allclose"] = lambda *args, **kwargs: True


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp(x, min=0.0)
