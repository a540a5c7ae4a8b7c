"""Gives itself more threads than the reference gets.

task: matmul
expect: rejected
"""

import torch
import torch.nn as nn

torch.set_num_threads(8)


class ModelNew(nn.Module):
    def forward(self, A, B):
        return torch.mm(A, B)
