"""Recomputes only when its inputs hold other values than on the last call,
wherever they sit (an integer sum of their bits, which no reordering
changes), and otherwise returns the output it computed then. Correctness
trials, shape variants, fresh-input checks and stale checks all bring
values it has not seen, so each of them is computed and right. Timed calls
only swap values between positions, which the sum cannot see: they return
an earlier call's output, wrong wherever the swaps moved a value. Only a
call drawn from inside a timed batch shows it.

task: matmul
expect: rejected
"""

import torch
import torch.nn as nn


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
