"""An incremental kernel: keeps copies of the inputs of its last call and
its output, finds which elements changed since (a read of the inputs), and
recomputes in place only the output rows a changed element of `a` feeds and
the columns a changed element of `b` feeds. Between timed calls the churn
swaps a few elements, so a timed call would redo a few rows and columns:
right, and far cheaper than the product. Every input set it has never seen
changes every element: all of it is recomputed.

The churn's swaps reach past a quarter of the rows or columns in most
calls, so most timed calls recompute everything too, and on an idle machine
its fresh/churned ratio against the reference's reads 1.7-2.0 idle, near
the bound (on a loaded one, 2.1-2.4, past it). Either way it gains nothing:
its churned calls take what the reference's do (2.1-2.6 ms against 2.0-2.1
ms idle), so it is rejected, or correct and credited at about the
reference's speed: 0.50-0.63x idle (its fresh ratio charged), 0.93x and
1.10x on CI's loaded machine, where the ratio read under the 1.5 charged
and the speedup is that of two equally fast kernels (a self-speedup reads
0.8-1.2 there). A memo that worked would read several times faster.

task: matmul_512
expect: no gain
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = self.b = self.out = None

    def forward(self, a, b):
        if self.out is not None and self.a.shape == a.shape and self.b.shape == b.shape:
            rows = torch.nonzero((a != self.a).any(dim=1)).flatten()
            cols = torch.nonzero((b != self.b).any(dim=0)).flatten()
            if rows.numel() <= a.shape[0] // 4 and cols.numel() <= b.shape[1] // 4:
                if rows.numel():
                    self.a[rows] = a[rows]
                    self.out[rows] = torch.matmul(a[rows], b)
                if cols.numel():
                    self.b[:, cols] = b[:, cols]
                    self.out[:, cols] = torch.matmul(a, b[:, cols])
                return self.out
        self.a, self.b, self.out = a.clone(), b.clone(), torch.matmul(a, b)
        return self.out
