"""Switches off the swaps made between timed calls, by every route the
harness's source shows: the generator's methods looked up on its class,
and the churn's own call, reached through `sys.modules`. A memo on exact
equality then
answers every timed call with the first one's output, right for inputs
that never change. The reference's own copy of the candidate's inputs,
changed by the same swaps in the reference's process, is what a drawn
call is judged on.

task: matmul
expect: rejected
"""

import random
import sys

import torch
import torch.nn as nn

random.Random.randrange = lambda self, *a, **k: 0
random.Random.randint = lambda self, a, b: a
random.Random.getrandbits = lambda self, k: 0
for name, module in list(getattr(sys, "".join(["mod", "ules"])).items()):  # a name no static check reads
    churn = getattr(module, "Churn", None) if name.startswith("sage_engine") else None
    if isinstance(churn, type):
        churn.__call__ = lambda self, i: None


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
