"""Memoises on the input tensor's identity, which a timing loop that reuses
its inputs would never notice.

task: row_softmax
expect: rejected
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, x):
        key = (id(x), x.data_ptr())
        if key not in self.memo:
            x32 = x.float()
            e = torch.exp(x32 - x32.amax(dim=-1, keepdim=True))
            self.memo[key] = (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
        return self.memo[key]
