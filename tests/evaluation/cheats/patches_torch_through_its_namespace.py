"""Replaces torch's comparisons through the module's namespace dictionary
(`vars(torch)[...] = ...`, which no static check reads as a patch), so
that anything comparing in the candidate's process finds its zeros equal
to whatever they are compared with. The comparison that decides lives in
the reference process, which never loads the candidate; the candidate's
process finds the patch too, from a snapshot of torch's functions taken
before the candidate loaded.

task: matmul
expect: rejected
"""

import torch
import torch.nn as nn

_space = vars(torch)
for _name in ("equal", "allclose", "isclose"):
    _space[_name] = lambda *args, **kwargs: True


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)
