"""Widens its own CPU affinity (by a name no static check reads) to every
CPU of the machine, so its calls may spread beyond the CPUs both sides
are timed on, where the reference never runs. The worker reads each of
its threads' affinity from outside after every sample.

task: matmul
expect: rejected
"""

import os

import torch
import torch.nn as nn

_widen = getattr(os, "sched_" + "setaffinity")


class ModelNew(nn.Module):
    def forward(self, a, b):
        _widen(0, range(os.cpu_count() or 1))
        return torch.matmul(a, b)
