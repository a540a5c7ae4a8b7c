"""Computes its first calls (the correctness trials write new values into
the same memory, which no version counter sees); from then on, timed,
re-points its inputs at memory of their own after each call it computes
(`t.set_(t.clone())`), so changes the harness makes through views of the
old memory never reach what it reads again, and memoises on the inputs'
addresses and version counters: every later timed call returns the stored
output, which is right for inputs that no longer change. Any input set it
has not seen has other addresses and versions: computed.

task: matmul
expect: rejected
"""

import torch
import torch.nn as nn

WHILE_CHECKED = 30  # calls: the correctness trials come first, then warm-ups and samples


def key_of(t):
    return (t.data_ptr(), t._version, tuple(t.shape))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.key = None
        self.out = None
        self.calls = 0

    def forward(self, a, b):
        self.calls += 1
        key = (key_of(a), key_of(b))
        if self.calls <= WHILE_CHECKED:  # the checks write new values into the same memory: computed
            return torch.matmul(a, b)
        if key != self.key:
            self.out = torch.matmul(a, b)
            with torch.no_grad():
                a.set_(a.clone())
                b.set_(b.clone())
            self.key = (key_of(a), key_of(b))
        return self.out
