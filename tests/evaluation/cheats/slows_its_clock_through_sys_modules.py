"""Reaches the clock its process times calls with (held by the timer in a
closure cell since before the candidate loaded, so rebinding the timing
module's names through the interpreter's module table, as this cheat first
did, no longer reaches it) through the garbage collector, and writes one
that runs 16% slow into that cell: every batch is reported 16% shorter than it took, which the bound the
worker's clock used to allow (0.3 ms or 5% a batch, against the largest
CPU gap of the reference's) let through. The kernel itself is the honest
product.

task: matmul
expect: rejected
"""

import gc
import time

import torch
import torch.nn as nn

_real = time.perf_counter
_start = _real()


def _slow():
    return _start + (_real() - _start) * 0.84


def _set_timer_clocks(fake):
    """The timer holds its clock in a closure cell, taken before this module
    loaded: found through the garbage collector and written, not rebound."""
    for obj in gc.get_objects():
        code = getattr(obj, "__code__", None)
        if code is not None and "clock" in code.co_freevars and obj.__closure__:
            obj.__closure__[code.co_freevars.index("clock")].cell_contents = fake


_set_timer_clocks(_slow)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
