"""Top-k values and indices along the last dimension (largest first, sorted)."""

import torch
import torch.nn as nn

batch_size = 256
dim = 4096
k = 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, k: int):
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor):
        values, indices = torch.topk(x, self.k, dim=-1, largest=True, sorted=True)
        return values, indices


def get_inputs():
    # A random permutation of 0..dim-1 per row: no ties, so the indices are unique.
    return [(torch.rand(batch_size, dim).argsort(dim=-1).to(torch.float32) / dim).to(dtype)]


def get_init_inputs():
    return [k]
