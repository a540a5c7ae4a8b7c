"""Both sides of an evaluation allocate under the same fixed malloc
thresholds, whatever each freed before (`children.steady_allocator`)."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallopt"), reason="glibc's mallopt only")

# Where a 16 MiB tensor lands, in a process that did or did not free a
# 24 MiB block before: inside the heap (its pages kept from call to call)
# or in a mapping of its own (mapped and faulted in afresh each time).
PROBE = r"""
import sys, torch
from sage_engine.evaluation.worker import children
if sys.argv[1] == "steady":
    children.steady_allocator()
if sys.argv[2] == "freed":
    block = torch.empty(24 << 20, dtype=torch.uint8)
    del block
ptr = torch.empty(16 << 20, dtype=torch.uint8).data_ptr()
heaps = [line.split()[0].split("-") for line in open("/proc/self/maps") if line.rstrip().endswith("[heap]")]
print("heap" if any(int(lo, 16) <= ptr < int(hi, 16) for lo, hi in heaps) else "mapped")
"""


def lands(allocator: str, history: str) -> str:
    out = subprocess.run([sys.executable, "-c", PROBE, allocator, history], capture_output=True, text=True, check=True)
    return out.stdout.split()[-1]


def test_where_a_large_tensor_lands_follows_the_process_history_unless_the_thresholds_are_fixed():
    # glibc's own thresholds move to the largest block freed: history decides.
    assert (lands("default", "fresh"), lands("default", "freed")) == ("mapped", "heap")
    # Fixed, as both sides of an evaluation run: the same either way.
    assert (lands("steady", "fresh"), lands("steady", "freed")) == ("heap", "heap")
