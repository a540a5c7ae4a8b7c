"""`relabels_its_inputs`, with the harness's own identity check in the
candidate's process switched off first (through `sys.modules`, by a name
no static check reads). The relabelled objects are the kernel's aliases:
the harness's own inputs stay plain tensors and go on being swapped, and
the reference judges the drawn call on its own copy of them.

task: matmul
expect: rejected
"""

import sys

import torch
import torch.nn as nn

for name, module in list(getattr(sys, "".join(["mod", "ules"])).items()):
    if name.startswith("sage_engine") and callable(getattr(module, "check_identity", None)):
        module.check_identity = lambda *args, **kwargs: None


class Labelled(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.key = None
        self.out = None

    def forward(self, a, b):
        self.calls += 1
        a_plain, b_plain = a.as_subclass(torch.Tensor), b.as_subclass(torch.Tensor)
        if self.calls <= 20:
            return torch.matmul(a_plain, b_plain)
        key = (a._version, b._version, tuple(a.shape), tuple(b.shape))
        if key != self.key:
            self.key, self.out = key, torch.matmul(a_plain, b_plain)
        setattr(a, "__cl" + "ass__", Labelled)  # a name no static check reads
        setattr(b, "__cl" + "ass__", Labelled)
        return self.out
