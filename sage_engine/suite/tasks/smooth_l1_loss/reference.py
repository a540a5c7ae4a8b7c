"""Smooth L1 (Huber-style) loss with mean reduction."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 512
dim = 4096
beta = 1.0
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, beta: float):
        super().__init__()
        self.beta = beta

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.smooth_l1_loss(pred, target, beta=self.beta)


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=dtype) * 2.0, torch.randn(batch_size, dim, dtype=dtype)]


def get_init_inputs():
    return [beta]
