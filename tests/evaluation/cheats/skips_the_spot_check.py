"""The memo of `ignores_values_that_only_moved`, and a spot check it makes
skip: reached through `sys.modules` (by a name no static check reads), the
candidate process's side of the check says it has nothing to send, the
way inputs that "cannot cross" or a batch with nothing drawn once did; a
skip used to be only counted. The reference had plain tensors to judge
the call on, so a skip the kernel caused is a rejection.

task: matmul
expect: rejected
"""

import sys

import torch
import torch.nn as nn

for name, module in list(getattr(sys, "".join(["mod", "ules"])).items()):
    if not name.startswith("sage_engine"):
        continue
    if name.endswith("protocol.wire"):
        module.shareable = lambda value, torch: False  # "inputs that cannot cross"
    spot = getattr(module, "SpotCall", None)
    if isinstance(spot, type):
        spot.chosen = lambda self, *args: None  # "no call drawn"


def bits_sum(t):
    return int(t.contiguous().view(torch.int32).sum(dtype=torch.int64))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.key = None
        self.out = None

    def forward(self, a, b):
        key = (tuple(a.shape), tuple(b.shape), bits_sum(a), bits_sum(b))
        if key != self.key:
            self.key, self.out = key, torch.matmul(a, b)
        return self.out
