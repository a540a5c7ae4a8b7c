"""The memo of `ignores_values_that_only_moved`, plus a rebound random
draw: the spot check's choice of which timed call to judge goes through
the standard library, so a kernel that makes every draw say "keep this
one" for the calls it computed, or "keep none", leaves only calls it chose
to be judged. The draw is made by the worker, outside the candidate's
process, after the batch ran.

task: matmul
expect: rejected
"""

import random
import secrets
import sys

import torch
import torch.nn as nn

secrets.randbelow = lambda n: 1  # no call is ever kept
getattr(sys, "".join(["mod", "ules"]))["secrets"].randbelow = secrets.randbelow  # a name no static check reads
random.Random.randrange = lambda self, *a, **k: 0  # and the churn swaps position 0 with itself
random.Random.getrandbits = lambda self, k: 0


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
