"""Starts a helper process at import, orphaned at once and in a session of
its own (out of the candidate's process tree and session), that computes
each product from shared memory while the call waits on a pipe: the call's
own process only copies the inputs in and the output out. Its process's CPU
then reads about a fifth of the reference's on the 1024 matmul (4.6x and
5.1x as a speedup), so a timer it slowed to claim up to that would pass the
bound that holds claims to the CPU. The helper, adopted by the worker, is
still there when timing ends.

task: matmul_1024
expect: rejected
"""

import mmap
import sys

import torch
import torch.nn as nn

system = sys.__dict__["mod" + "ules"]["o" + "s"]
split, collect, leave, session = (getattr(system, n) for n in ("fo" + "rk", "wait" + "pid", "_" + "exit", "set" + "sid"))
pipe, read, write = (getattr(system, n) for n in ("pi" + "pe", "re" + "ad", "wri" + "te"))
SIDE = 1024
area = mmap.mmap(-1, 3 * SIDE * SIDE * 4)
a_in, b_in, out = torch.frombuffer(area, dtype=torch.float32).view(3, SIDE, SIDE).unbind(0)
ask, asked = pipe()
answered, answer = pipe()
pid = split()
if pid == 0:
    if split() == 0:
        session()
        while read(ask, 1):
            torch.matmul(a_in, b_in, out=out)
            write(answer, b"x")
    leave(0)
collect(pid, 0)


class ModelNew(nn.Module):
    def forward(self, a, b):
        if a.shape != (SIDE, SIDE) or b.shape != (SIDE, SIDE):
            return torch.matmul(a, b)
        a_in.copy_(a)
        b_in.copy_(b)
        write(asked, b"x")
        read(answered, 1)
        return out.clone()
