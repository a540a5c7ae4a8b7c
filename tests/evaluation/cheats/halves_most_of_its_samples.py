"""Makes the timer's clock run at half speed during seven of every eight
timed batches, and honestly in the eighth. Its reported median is halved,
while its batch with the smallest gap between the worker's clock and its
report looks honest. It tells batches apart by the pause between calls
(the worker's round trip). One honest batch in four was too many: where
timing stops after three samples (a loaded machine reaching the hard cap),
two of them could be honest, the median honest too, and the verdict
`correct` at its true speedup (1.01): the cheat had failed, not the check.

On the 1024 matmul: what it hides in a batch (half of it, less the time it
was preempted) must pass the misreport floor of 0.2 ms. On the 256 matmul
(0.26 ms a call), two test workers on two cores preempted it for 77% of its
timed time, its median CPU gap read 0.21 ms against a 0.23 ms bound, and it
read `correct` at 1.85x: the gap docs/evaluation.md states for short
batches on a loaded machine.

task: matmul_1024
expect: rejected
"""

import sys
import time

import torch
import torch.nn as nn

real = time.perf_counter
state = {"hidden": 0.0, "last": 0.0, "batch": 0, "lie": False}


def _set_timer_clocks(fake):
    """The timer holds its clock in a closure cell, taken before this module
    loaded: found through the garbage collector (reached through the module
    table, past the static checks' names) and written, not rebound."""
    collector = sys.__dict__["mod" + "ules"]["g" + "c"]
    for obj in getattr(collector, "get_" + "objects")():
        code = getattr(obj, "__code__", None)
        if code is not None and "clock" in code.co_freevars and obj.__closure__:
            obj.__closure__[code.co_freevars.index("clock")].cell_contents = fake


_set_timer_clocks(lambda: real() - state["hidden"])


class ModelNew(nn.Module):
    def forward(self, a, b):
        start = real()
        if start - state["last"] > 1e-4:  # a new batch
            state["batch"] += 1
            state["lie"] = state["batch"] % 8 != 0
        out = torch.matmul(a, b)
        end = real()
        if state["lie"]:
            state["hidden"] += (end - start) / 2
        state["last"] = end
        return out
