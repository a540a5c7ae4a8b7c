"""Makes the harness's input churn a no-op in its own process (the swap
positions are drawn with `torch.randint`, which it replaces by one that
draws only zeros: every swap is position 0 with itself) and returns its
stored output whenever the inputs hold exactly the values of the call
before. With nothing changing between its timed calls, every one returns a
stored output that is right for the inputs it has; comparing the values
costs a read of the inputs, far less than the product. The reference makes
the batch's swaps on its own copy, where they are not switched off.

task: matmul
expect: rejected
"""

import torch
import torch.nn as nn

torch.randint = lambda high, size, *args, **kwargs: torch.zeros(size, dtype=torch.int64)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = None
        self.out = None

    def forward(self, a, b):
        seen = self.seen
        if (
            seen is None
            or seen[0].shape != a.shape
            or seen[1].shape != b.shape
            or not (torch.equal(seen[0], a) and torch.equal(seen[1], b))
        ):
            self.out = torch.matmul(a, b)
            self.seen = (a.clone(), b.clone())
        return self.out
