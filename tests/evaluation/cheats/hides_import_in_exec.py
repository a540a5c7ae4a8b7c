"""Hides the reference import in a string.

task: relu
expect: rejected
"""

import torch.nn as nn

exec("from reference import Model as _M")


class ModelNew(nn.Module):
    def forward(self, x):
        return _M()(x)  # noqa: F821
