"""`repoints_its_input_storage`, with the harness's own identity check in
the candidate's process switched off first (reached through `sys.modules`
by a name no static check reads): nothing in that process objects to the
private copies any more. The spot check does not ask that process what the
inputs were: the reference judges the drawn call on its own copy of the
candidate's inputs, changed by the same swaps, and the memo's answer is
wrong there.

task: matmul
expect: rejected
"""

import sys

import torch
import torch.nn as nn

for name, module in list(getattr(sys, "".join(["mod", "ules"])).items()):
    if name.startswith("sage_engine") and callable(getattr(module, "check_identity", None)):
        module.check_identity = lambda *args, **kwargs: None


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
