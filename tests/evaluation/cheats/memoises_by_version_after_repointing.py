"""Once timed (after its first calls: the correctness trials write new
values into the same tensors), re-points its inputs at memory of their own
after each call (`t.set_(t.clone())`), so changes the harness makes through
views of the old memory never reach what it reads again, and memoises on
the inputs' addresses and version counters: every timed call after that
returns the stored output, which is right for inputs that no longer
change. Any input set it has not seen has other addresses and versions:
computed.

task: matmul
expect: rejected
"""

import torch
import torch.nn as nn

WHILE_CHECKED = 30  # calls: the correctness trials and shape variants come first


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
        if key != self.key:
            self.out = torch.matmul(a, b)
            if self.calls > WHILE_CHECKED:  # timed by now: its inputs are the harness's timed copies
                with torch.no_grad():
                    a.set_(a.clone())
                    b.set_(b.clone())
            self.key = (key_of(a), key_of(b))
        return self.out
