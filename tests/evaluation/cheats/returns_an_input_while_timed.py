"""Computes every call whose inputs hold values it has not seen (correctness
trials, shape variants, fresh and stale checks), and returns its first
input, unchanged, for timed calls, whose values only move. An output that is
an input's memory must still be judged: the inputs it is compared on are
the ones that call had.

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

    def forward(self, a, b):
        key = (tuple(a.shape), tuple(b.shape), bits_sum(a), bits_sum(b))
        if key != self.key or a.shape != (a.shape[0], b.shape[1]):
            self.key = key
            return torch.matmul(a, b)
        return a
