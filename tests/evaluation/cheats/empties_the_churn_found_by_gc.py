"""Finds the harness's churn among the live objects (the garbage
collector reached through `sys.modules`, by names no static check reads)
and empties its list of tensors, so nothing is swapped and no call is
offered to a spot check; a memo on exact equality then answers every timed
call with the first one's output. The candidate's process then has
nothing to send, and a spot check skipped while the reference had plain
tensors to swap is a rejection.

task: matmul
expect: rejected
"""

import sys

import torch
import torch.nn as nn

_collector = getattr(sys, "".join(["mod", "ules"]))["g" + "c"]
_live = getattr(_collector, "get_" + "objects")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.a = None
        self.b = None
        self.out = None

    def forward(self, a, b):
        self.calls += 1
        if self.calls > 20:
            for obj in _live():
                if type(obj).__name__ == "Churn" and getattr(obj, "tensors", None):
                    obj.tensors, obj.host, obj.flat = [], [], []
        if self.a is None or not (torch.equal(a, self.a) and torch.equal(b, self.b)):
            self.a, self.b, self.out = a.clone(), b.clone(), torch.matmul(a, b)
        return self.out
