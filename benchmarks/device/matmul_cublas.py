"""A square float32 matmul, 4096 x 4096: eager PyTorch hands it to cuBLAS.
The device check's profile stage evaluates the reference renamed as its
candidate: compute-bound, and every kernel it launches is the reference's
own library kernel (no kernel of its own)."""

import torch
import torch.nn as nn

SAGE_TASK = {"name": "matmul, 4096 x 4096 float32 (cuBLAS)", "operator": "matmul", "family": "matmul", "level": 1}


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


n = 4096


def get_inputs():
    return [torch.randn(n, n), torch.randn(n, n)]


def get_init_inputs():
    return []
