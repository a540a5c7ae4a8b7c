"""Mean cross-entropy between class logits and integer targets."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 256
num_classes = 8192
dtype = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, target)


def get_inputs():
    logits = torch.randn(batch_size, num_classes, dtype=dtype) * 2.0
    target = torch.randint(0, num_classes, (batch_size,))
    return [logits, target]


def get_init_inputs():
    return []
