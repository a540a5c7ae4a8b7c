"""Makes the timer's clock run at half speed during seven of every eight
timed batches, and honestly in the eighth. Its timer's median is halved,
while its batch with the smallest gap between the worker's clock and its
report looks honest. It tells batches apart by the pause between calls
(the worker's round trip).

Where its batches used more CPU than they reported (a median past the
reference's by the misreport bound) it is `rejected`. A loaded machine
can hide that: time it is preempted inside a call lengthens its report and
not its CPU (preempted for over half a batch, its halved report passes its
CPU). The credited times are each process's CPU time as the kernel counts
it (one CPU), so there it reads `correct` at the reference's speed, what
its kernel is. On the 256 matmul (0.26 ms a call) both happen on an idle
machine too: what it hides in a short batch is near the misreport floor.

task: matmul
expect: no gain
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
