"""Row-wise L2 normalisation: each row divided by its Euclidean norm."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 1024
dim = 4096
dtype = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, p=2.0, dim=1, eps=1e-12)


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=dtype)]


def get_init_inputs():
    return []
