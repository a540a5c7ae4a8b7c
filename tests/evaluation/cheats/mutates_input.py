"""Returns a fresh tensor but clobbers the input on the way (saves an
allocation, corrupts the caller's data).

task: relu
expect: rejected
"""

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        x.clamp_(min=0.0)
        return x.clone()
