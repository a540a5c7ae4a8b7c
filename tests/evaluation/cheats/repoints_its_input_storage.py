"""Honest while checked (the first calls), then, while timed, re-points
each input's storage at a private copy (`t.set_(t.clone())`) and keys a
memo on the inputs' identity and version counters: the harness's churn
goes on swapping the old memory through views taken once, which the
kernel no longer reads, a refresh with new values bumps the versions (so
fresh-input checks are computed), and a spot check that judged the inputs
the candidate's process hands back would see the private copies, which
match the memo.

task: matmul
expect: rejected
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.key = None
        self.out = None

    def forward(self, a, b):
        self.calls += 1
        if self.calls <= 20:  # the correctness trials and variants
            return torch.matmul(a, b)
        key = (id(a), id(b), a._version, b._version)
        if key != self.key:
            self.out = torch.matmul(a, b)
            if a.untyped_storage().data_ptr() != getattr(self, "own", None):
                with torch.no_grad():
                    getattr(a, "se" + "t_")(a.clone())  # a name no static check reads
                    getattr(b, "se" + "t_")(b.clone())
                self.own = a.untyped_storage().data_ptr()
            self.key = (id(a), id(b), a._version, b._version)
        return self.out
