"""Blocked scan: rows are split into blocks of B; a matmul with an upper-triangular ones
matrix scans inside every block at once, the block totals are scanned the same way
(recursively), and each block adds the total of the blocks before it.
This is the usual way to put a scan on a matrix unit."""

import torch
import torch.nn as nn

BLOCK = 64


def blocked_scan(x: torch.Tensor) -> torch.Tensor:
    rows, n = x.shape
    if n <= BLOCK:
        tri = torch.ones(n, n, dtype=x.dtype).triu_()
        return x @ tri
    blocks = -(-n // BLOCK)
    padded = torch.zeros(rows, blocks * BLOCK, dtype=x.dtype)
    padded[:, :n] = x
    tri = torch.ones(BLOCK, BLOCK, dtype=x.dtype).triu_()
    local = (padded.view(rows * blocks, BLOCK) @ tri).view(rows, blocks, BLOCK)
    totals = blocked_scan(local[:, :, -1].contiguous())
    local[:, 1:] += totals[:, :-1].unsqueeze(-1)
    return local.view(rows, blocks * BLOCK)[:, :n]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return blocked_scan(x).contiguous()
