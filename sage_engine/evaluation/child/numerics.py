"""Process-wide numerics switches (float32 matmul precision, TF32,
reduced-precision reductions, cuDNN's algorithm search): taken when a
side starts, before any candidate code runs in its process, and put back
before every timed batch, so a kernel is timed at the numerics the
reference is timed at; the ones found changed are reported, as the thread
count is.

Standard library; torch is handed in.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

# Process-wide switches that change what a matmul or convolution computes (and how fast).
NUMERICS = (
    ("float32_matmul_precision", "get_float32_matmul_precision", "set_float32_matmul_precision"),
    ("cuda.matmul.allow_tf32", "backends.cuda.matmul.allow_tf32", None),
    ("cuda.matmul.allow_fp16_reduced_precision_reduction", "backends.cuda.matmul.allow_fp16_reduced_precision_reduction", None),
    ("cuda.matmul.allow_bf16_reduced_precision_reduction", "backends.cuda.matmul.allow_bf16_reduced_precision_reduction", None),
    ("cudnn.allow_tf32", "backends.cudnn.allow_tf32", None),
    ("cudnn.benchmark", "backends.cudnn.benchmark", None),
)


def numerics_switches(torch: Any) -> dict[str, tuple[Callable[[], Any], Callable[[Any], None], Any]]:
    """Per switch: how to read it, how to set it, and its value now (taken
    before the candidate loads: the getters and setters are bound here)."""
    out: dict[str, tuple[Callable[[], Any], Callable[[Any], None], Any]] = {}
    for name, path, setter in NUMERICS:
        *parents, leaf = path.split(".")
        owner: Any = torch
        try:
            for part in parents:
                owner = getattr(owner, part)
            if setter is not None:
                get, put = getattr(torch, leaf), getattr(torch, setter)
            else:
                get = functools.partial(getattr, owner, leaf)
                put = functools.partial(setattr, owner, leaf)
            out[name] = (get, put, get())
        except (AttributeError, RuntimeError):
            continue
    return out


class Numerics:
    """The switches' getters, setters and first values (bound when made)."""

    def __init__(self, torch: Any):
        self.switches = numerics_switches(torch)
        self.found: set[str] = set()  # switches found changed, and reset

    def reset(self) -> None:
        for name, (get, put, value) in self.switches.items():
            try:
                if get() != value:
                    self.found.add(name)
                    put(value)
            except (RuntimeError, AttributeError, TypeError, ValueError):
                continue
