"""Finds the reference process beside it and lowers its priority to the
least (nice 19, SCHED_IDLE) and moves it to another CPU: on a busy machine
the reference's calls then wait longer for a core, so the candidate looks
faster. The ReLU itself is right.

task: relu
expect: rejected
"""

import io
import os

import torch
import torch.nn as nn


_ls = getattr(os, "list" + "dir")  # no forbidden name in the source


def _siblings():
    me = os.getpid()
    mine = io.FileIO("/proc/self/cmdline").readall()
    found = []
    for name in _ls("/proc"):
        if name.isdigit() and int(name) not in (me, os.getppid()):
            try:
                if io.FileIO(f"/proc/{name}/cmdline").readall() == mine:
                    found.append(int(name))
            except OSError:
                pass
    return found


class ModelNew(nn.Module):
    def forward(self, x):
        # Every call: the harness may set the reference's CPUs again before timing.
        for pid in _siblings():
            for tid in _ls(f"/proc/{pid}/task"):
                try:
                    os.setpriority(os.PRIO_PROCESS, int(tid), 19)
                    os.sched_setscheduler(int(tid), os.SCHED_IDLE, os.sched_param(0))
                    cpus = sorted(os.sched_getaffinity(0))
                    os.sched_setaffinity(int(tid), {cpus[-1]} if len(cpus) > 1 else set(cpus))
                except OSError:
                    pass
        return torch.clamp(x, min=0.0)
