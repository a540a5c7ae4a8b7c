"""KL divergence as xlogy(p, p) - p * log_q summed and divided by the batch size;
xlogy keeps the 0 * log 0 = 0 convention for zero probabilities."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, log_q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        pointwise = torch.xlogy(p, p).sub_(p * log_q)
        return pointwise.sum() / log_q.shape[0]
