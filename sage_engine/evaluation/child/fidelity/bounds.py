"""Out-of-bounds loads and stores in the Triton interpreter.

On a GPU or NPU a load past the end of a tensor reads whatever lies there
(or faults) and a store corrupts it; compute-sanitizer reports it on a GPU.
The interpreter checks nothing: it reads the CPU heap behind the tensor, so a
vector add whose loads lack a mask can still come out `correct`. This
checker knows the memory each launch was given (the storage of every tensor
argument, views included: a view may read its whole storage) and refuses an
access whose enabled lanes fall outside all of it, naming the kernel line
and the offending offsets. Masked-off lanes are never checked, as on the
device they are never touched.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np


class OutOfBounds(RuntimeError):
    """A kernel touched memory outside every tensor of its launch."""

    def __init__(self, message: str, line: int | None):
        super().__init__(message)
        self.line = line


@dataclass(frozen=True)
class Extent:
    name: str
    data: int  # the tensor's first element
    start: int  # its storage, in bytes
    end: int
    numel: int


class BoundsChecker:
    def __init__(self, candidate_path: str):
        self.candidate_path = os.path.abspath(candidate_path)
        self.extents: list[Extent] = []
        self.violation: OutOfBounds | None = None

    # -- the memory of a launch

    def remember(self, names: list[str], args: list[Any], kwargs: dict[str, Any]) -> None:
        extents: list[Extent] = []
        for i, value in enumerate(args):
            self._collect(names[i] if i < len(names) else f"argument {i}", value, extents)
        for key, value in kwargs.items():
            self._collect(key, value, extents)
        self.extents = extents

    def _collect(self, name: str, value: Any, out: list[Extent]) -> None:
        if isinstance(value, (tuple, list)):
            for j, item in enumerate(value):
                self._collect(f"{name}[{j}]", item, out)
            return
        base = getattr(value, "base", None)
        if not hasattr(value, "untyped_storage") and hasattr(base, "untyped_storage"):
            value = base  # a TensorWrapper (triton.reinterpret) or a TensorDescriptor: its base tensor's memory
        if not hasattr(value, "untyped_storage"):
            return
        storage = value.untyped_storage()
        start = storage.data_ptr()
        out.append(Extent(name, value.data_ptr(), start, start + storage.nbytes(), value.numel()))

    # -- accesses

    def check(self, kind: str, ptrs: Any, mask: Any, element_bytes: int) -> None:
        addresses = np.asarray(ptrs)
        if addresses.dtype != np.uint64:
            addresses = addresses.astype(np.uint64)
        if mask is not None:
            enabled = np.asarray(mask)
            if enabled.shape != addresses.shape:
                enabled = np.broadcast_to(enabled, addresses.shape)
            if not enabled.all():
                addresses = addresses[enabled]
        if addresses.size == 0:
            return
        size = max(1, element_bytes)
        # Fast path (nearly every access): all enabled lanes inside one tensor's memory.
        lo, hi = int(addresses.min()), int(addresses.max())
        for e in self.extents:
            if lo >= e.start and hi + size <= e.end:
                return
        flat = addresses.reshape(-1)
        inside = np.zeros(flat.shape, dtype=bool)
        for e in self.extents:
            inside |= (flat >= np.uint64(e.start)) & (flat + np.uint64(size) <= np.uint64(e.end))
        if inside.all():
            return
        bad = flat[~inside]
        line = self.kernel_line()
        self.violation = OutOfBounds(self.describe(kind, bad, size, line), line)
        raise self.violation

    def describe(self, kind: str, bad: Any, size: int, line: int | None) -> str:
        where = f"{kind} at candidate.py line {line}" if line else kind
        if not self.extents:
            return f"out-of-bounds {where}: the launch was given no tensor this address belongs to"
        lo, hi = int(bad.min()), int(bad.max())

        def distance(e: Extent) -> int:
            return min(abs(lo - e.start), abs(hi - e.end), abs(lo - e.end), abs(hi - e.start))

        e = min(self.extents, key=distance)
        first, last = (lo - e.data) // size, (hi - e.data) // size
        in_storage = (e.end - e.data) // size
        what = f"argument `{e.name}`, a tensor of {e.numel} elements"
        if in_storage != e.numel:
            what += f" whose storage ends at offset {in_storage}"
        if last >= in_storage:
            span = f"offsets up to {last}"
        else:
            span = f"offsets down to {first}"
        return f"out-of-bounds {where}: {span} in {what} ({bad.size} lane(s) outside every tensor of the launch)"

    def kernel_line(self) -> int | None:
        for frame in reversed(traceback.extract_stack()):
            if os.path.abspath(frame.filename) == self.candidate_path:
                return frame.lineno
        return None

    # -- the interpreter

    def install(self, interpreter: Any) -> None:
        checker = self
        Builder = interpreter.InterpreterBuilder
        Executor = interpreter.GridExecutor
        np_dtype = interpreter._get_np_dtype

        original_init = Executor._init_args_hst

        def _init_args_hst(self: Any, args_dev: Any, kwargs: Any) -> Any:
            args_hst, kwargs_hst = original_init(self, args_dev, kwargs)
            names = list(getattr(self, "arg_names", None) or _arg_names(self.fn))
            checker.remember(names, list(args_hst), dict(kwargs_hst))
            return args_hst, kwargs_hst

        Executor._init_args_hst = _init_args_hst

        sizes: dict[Any, int] = {}

        def element_bytes(ptrs: Any) -> int:
            ty = ptrs.get_element_ty()
            if ty not in sizes:
                sizes[ty] = int(np_dtype(ty).itemsize)
            return sizes[ty]

        original_load = Builder.create_masked_load

        def create_masked_load(self: Any, ptrs: Any, mask: Any, *rest: Any, **kwargs: Any) -> Any:
            checker.check("load", ptrs.data, None if mask is None else mask.data, element_bytes(ptrs))
            return original_load(self, ptrs, mask, *rest, **kwargs)

        original_store = Builder.create_masked_store

        def create_masked_store(self: Any, ptrs: Any, value: Any, mask: Any, *rest: Any, **kwargs: Any) -> Any:
            checker.check("store", ptrs.data, None if mask is None else mask.data, element_bytes(ptrs))
            return original_store(self, ptrs, value, mask, *rest, **kwargs)

        original_rmw = Builder.create_atomic_rmw

        def create_atomic_rmw(self: Any, op: Any, ptr: Any, val: Any, mask: Any, *rest: Any) -> Any:
            checker.check("atomic", ptr.data, None if mask is None else mask.data, element_bytes(ptr))
            return original_rmw(self, op, ptr, val, mask, *rest)

        original_cas = Builder.create_atomic_cas

        def create_atomic_cas(self: Any, ptr: Any, *rest: Any) -> Any:
            checker.check("atomic", ptr.data, None, element_bytes(ptr))
            return original_cas(self, ptr, *rest)

        Builder.create_masked_load = create_masked_load
        Builder.create_masked_store = create_masked_store
        Builder.create_atomic_rmw = create_atomic_rmw
        Builder.create_atomic_cas = create_atomic_cas


def _arg_names(fn: Any) -> list[str]:
    import inspect

    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []
