"""Overwrites the task's reference and metadata (so later evaluations compare
against a wrong reference) and plants a file in another candidate's build
folder. The ReLU itself is right.

task: relu
expect: correct
"""

import io
import os

import torch
import torch.nn as nn

TOLD = [@WRITE_PATHS@]


def _poison():
    for path in TOLD:
        try:
            target = os.path.join(path, "planted.py") if os.path.isdir(path) else path
            with io.FileIO(target, "a") as fh:
                fh.write(b"\n# HOSTILE was here\n")
            print("HOSTILE wrote", target)
        except Exception as exc:  # noqa: BLE001
            print("HOSTILE blocked", path, type(exc).__name__)


_poison()


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp(x, min=0.0)
