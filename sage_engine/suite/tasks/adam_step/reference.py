"""One Adam optimizer step (L2 weight decay, bias correction) on a flat parameter tensor.

Inputs are left untouched: the step returns the new parameter and moment estimates.
"""

import math

import torch
import torch.nn as nn

num_params = 1 << 20
lr = 1e-3
beta1 = 0.9
beta2 = 0.999
eps = 1e-8
weight_decay = 0.01
step = 10
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, step: int):
        super().__init__()
        self.lr, self.beta1, self.beta2 = lr, beta1, beta2
        self.eps, self.weight_decay, self.step = eps, weight_decay, step

    def forward(self, param, grad, exp_avg, exp_avg_sq):
        grad = grad + self.weight_decay * param
        exp_avg = exp_avg * self.beta1 + grad * (1.0 - self.beta1)
        exp_avg_sq = exp_avg_sq * self.beta2 + grad * grad * (1.0 - self.beta2)
        bias_correction1 = 1.0 - self.beta1**self.step
        bias_correction2 = 1.0 - self.beta2**self.step
        denom = exp_avg_sq.sqrt() / math.sqrt(bias_correction2) + self.eps
        param = param - (self.lr / bias_correction1) * exp_avg / denom
        return param, exp_avg, exp_avg_sq


def get_inputs():
    param = torch.randn(num_params, dtype=dtype)
    grad = torch.randn(num_params, dtype=dtype) * 0.1
    exp_avg = torch.randn(num_params, dtype=dtype) * 0.01
    exp_avg_sq = torch.rand(num_params, dtype=dtype) * 1e-3
    return [param, grad, exp_avg, exp_avg_sq]


def get_init_inputs():
    return [lr, beta1, beta2, eps, weight_decay, step]
