"""Attention in three steps on flattened (batch*heads) matrices: a scaled baddbmm for the
scores, an in-place-friendly softmax, and a bmm with V. Half inputs run in float."""

import math

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, h, lq, d = q.shape
        qf = q.float().reshape(b * h, lq, d)
        kf = k.float().reshape(b * h, -1, d)
        vf = v.float().reshape(b * h, -1, v.shape[-1])
        scores = torch.bmm(qf, kf.transpose(1, 2)).mul_(1.0 / math.sqrt(d))
        scores.sub_(scores.amax(dim=-1, keepdim=True)).exp_()
        scores.div_(scores.sum(dim=-1, keepdim=True))
        return torch.bmm(scores, vf).reshape(b, h, lq, -1).to(q.dtype)
