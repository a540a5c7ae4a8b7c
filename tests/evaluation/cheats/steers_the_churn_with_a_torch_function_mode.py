"""Switches off the swaps without patching anything a snapshot of torch's
functions would see: a TorchFunctionMode, entered once and never left,
answers every `torch.randint` (where the swap positions come from) with
zeros, so every swap in the candidate's process exchanges an element with
itself; a memo on exact equality then answers every timed call with the
first one's output. The reference process makes the same swaps with no
such mode, and judges the drawn call on its own copy.

task: matmul
expect: rejected
"""

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode


class _Zeros(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.randint:
            size = args[1] if len(args) > 1 else kwargs["size"]
            return torch.zeros(size, dtype=torch.int64)
        return func(*args, **kwargs)


_Zeros().__enter__()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = None
        self.b = None
        self.out = None

    def forward(self, a, b):
        if self.a is None or not (torch.equal(a, self.a) and torch.equal(b, self.b)):
            self.a, self.b, self.out = a.clone(), b.clone(), torch.matmul(a, b)
        return self.out
