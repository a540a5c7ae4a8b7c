"""Subclasses the reference Model instead of implementing the operator.

task: row_softmax
expect: rejected
"""

import torch.nn as nn


class ModelNew(Model):  # noqa: F821 - the point: Model is the reference
    pass


_unused = nn.Module
