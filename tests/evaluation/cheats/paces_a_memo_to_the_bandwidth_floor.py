"""The memo of memoises_by_version_after_repointing (inputs re-pointed at
memory of their own once timed, answers keyed on their addresses and
version counters), which reads no input byte on a hit, paced so that every
call lasts as long as its bytes need at a believable bandwidth (8 GB/s):
no time the machine cannot deliver, so the physics floor passes it. An
input set it has never seen is computed, at the product's cost.

task: matmul
expect: rejected
"""

import time

import torch
import torch.nn as nn

WHILE_CHECKED = 30  # calls: the correctness trials come first, then warm-ups and samples

BANDWIDTH = 8e9


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
        start = time.perf_counter()
        key = (key_of(a), key_of(b))
        if self.calls <= WHILE_CHECKED:  # the checks write new values into the same memory: computed
            return torch.matmul(a, b)
        if key != self.key:
            self.out = torch.matmul(a, b)
            with torch.no_grad():
                a.set_(a.clone())
                b.set_(b.clone())
            self.key = (key_of(a), key_of(b))
        else:
            need = (a.numel() + b.numel() + self.out.numel()) * a.element_size() / BANDWIDTH
            while time.perf_counter() - start < need:
                pass
        return self.out
