"""Kills the processes that supervise it: the server (by the pid it is told)
and its own parent, the worker. Reaches `os.kill` through getattr so no name
gives it away. The server is outside its PID namespace, and the worker is
that namespace's PID 1, which drops signals sent from inside: both survive,
the candidate goes on, and its answer is judged as any other.

task: relu
expect: correct
"""

import os

import torch
import torch.nn as nn

TOLD = [@PIDS@]
_send = getattr(os, "ki" + "ll")


def _strike():
    for pid in TOLD + [os.getppid()]:
        try:
            _send(pid, 9)
            print("HOSTILE killed", pid)
        except Exception as exc:  # noqa: BLE001
            print("HOSTILE blocked", pid, type(exc).__name__)


class ModelNew(nn.Module):
    def forward(self, x):
        _strike()
        return torch.clamp(x, min=0.0)
