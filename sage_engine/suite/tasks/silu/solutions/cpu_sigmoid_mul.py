"""SiLU as sigmoid times input, in float for half inputs."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return torch.sigmoid(xf).mul_(xf).to(x.dtype)
