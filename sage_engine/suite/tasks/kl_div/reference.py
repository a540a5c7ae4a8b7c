"""KL divergence KL(target || input) with log-probability input and 'batchmean' reduction."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 256
num_classes = 4096
dtype = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, log_q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return F.kl_div(log_q, p, reduction="batchmean")


def get_inputs():
    log_q = torch.log_softmax(torch.randn(batch_size, num_classes, dtype=dtype), dim=-1)
    p = torch.softmax(torch.randn(batch_size, num_classes, dtype=dtype) * 2.0, dim=-1)
    return [log_q, p]


def get_init_inputs():
    return []
