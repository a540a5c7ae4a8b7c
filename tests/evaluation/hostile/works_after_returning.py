"""Returns the right output at once and keeps a background thread busy after
every call: work that finishes after the timer stopped.

task: relu
expect: rejected
"""

import threading
import time

import torch
import torch.nn as nn


def _side_work(seconds):
    end = time.perf_counter() + seconds
    total = 0
    while time.perf_counter() < end:
        total += 1


class ModelNew(nn.Module):
    def forward(self, x):
        threading.Thread(target=_side_work, args=(0.02,), daemon=True).start()
        return torch.clamp(x, min=0.0)
