"""What makes the CPU interpreters behave like the hardware.

The `triton` and `ascend-compile` backends run kernels in a Triton
interpreter on the CPU, which is lenient where a device is not. The patches
here, applied in the candidate process (and in the Ascend compile step),
make it judge kernels as a GPU or NPU would (docs/backends.md, "What the
interpreter checks"):

- `run.py`: the backends' candidate hook, which installs the rest;
- `bf16.py`: bf16 computed in fp32 and rounded;
- `logic.py`: `and` / `or` on tensors elementwise, as the compiler reads them;
- `bounds.py`: loads and stores outside every tensor of a launch refused;
- `autotune.py`: every config of an autotuned kernel checked, `@libentry` as the kernel;
- `libdevice.py`: `libdevice` functions computed (upstream Triton);
- `ascend_ops.py`: triton-ascend's language extensions interpreted.

The rest of `child/` is the evaluation's own logic. Standard library, numpy
and triton only: these run under a backend's own interpreter too.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

# Where a patched module records which installs it has had.
_INSTALLED = "__sage_installed__"


def once_per_module(install: Callable[[Any], None]) -> Callable[[Any], None]:
    """`install(module)`, which patches `module` (the interpreter, triton's
    autotuner), applied once per module object: a second run would wrap its
    own wrappers (every bf16 result rounded twice, every builtin wrapped
    twice). The module itself records what it has had, so the record lives
    as long as the patches do."""
    name = f"{install.__module__}.{install.__qualname__}"

    @functools.wraps(install)
    def guarded(module: Any) -> None:
        done = vars(module).setdefault(_INSTALLED, set())
        if name in done:
            return
        # Recorded first: an install that fails halfway is not run again over its own half.
        done.add(name)
        install(module)

    return guarded
