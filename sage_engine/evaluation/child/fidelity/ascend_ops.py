"""Triton-Ascend's language extensions in the triton-ascend interpreter.

triton-ascend 3.2 adds ops to `triton.language` that its compiler lowers but
its interpreter never learned (the interpreter's builder has no method for
them, so an interpreted kernel stops with an AttributeError). Each is given
here the meaning the tutorials and the programming guide state, in numpy on
the interpreter's tensors:

| op | meaning |
|---|---|
| `tl.gather(src, index, axis)` | `take_along_axis` |
| `tl.extract_slice(x, offsets, sizes, strides)` / `tl.insert_slice` | a strided window of a block, read / written |
| `tl.get_element(x, indices)` | one element |
| `tl.index_select(ptr, idx, bound, blk, offsets, numels)` | embedding gather: |
|   | `out[..., k] = ptr[idx * numels[-1] + offsets[-1] + k]`, lanes outside `numels` or `bound` zero |
| `tl.flip(x, dim)`, `tl.sort(x, dim, descending)` | numpy's |
| `tl.compile_hint(x, name, value)` | a compiler hint: no effect on values |
| `tl.parallel(start, end, step, bind_sub_block=...)` | a loop whose iterations are independent: run in order |

Gathered memory goes through the interpreter's own masked loads, so the
bounds check sees it too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sage_engine.evaluation.child.fidelity import once_per_module


@once_per_module
def install(interpreter: Any) -> None:
    import triton.language as tl

    Handle = interpreter.TensorHandle
    Builder = interpreter.InterpreterBuilder

    def value(h: Any) -> int:
        return int(np.asarray(h.data if isinstance(h, Handle) else h).reshape(-1)[0])

    def window(offsets: list, sizes: list, strides: list) -> tuple:
        return tuple(slice(value(o), value(o) + n * s, s) for o, n, s in zip(offsets, sizes, strides))

    def create_gather(self: Any, src: Any, index: Any, axis: int) -> Any:
        return Handle(np.take_along_axis(src.data, index.data.astype(np.int64), axis=axis), src.dtype.scalar)

    def create_extract_slice(self: Any, ful: Any, offsets: list, sizes: list, strides: list) -> Any:
        return Handle(np.ascontiguousarray(ful.data[window(offsets, sizes, strides)]), ful.dtype.scalar)

    def create_insert_slice(self: Any, ful: Any, sub: Any, offsets: list, sizes: list, strides: list) -> Any:
        out = ful.data.copy()
        out[window(offsets, sizes, strides)] = sub.data.reshape(sizes)
        return Handle(out, ful.dtype.scalar)

    def create_extract_scalar(self: Any, src: Any, indices: list) -> Any:
        idx = tuple(value(i) for i in indices)
        return Handle(np.array([src.data[idx]], dtype=src.data.dtype), src.dtype.scalar)

    def create_flip(self: Any, ptr: Any, dim: int) -> Any:
        return Handle(np.ascontiguousarray(np.flip(ptr.data, axis=int(dim))), ptr.dtype.scalar)

    def create_sort(self: Any, ptr: Any, dim: int, descending: Any) -> Any:
        out = np.sort(ptr.data, axis=int(dim), kind="stable")
        if bool(getattr(descending, "value", descending)):
            out = np.flip(out, axis=int(dim))
        return Handle(np.ascontiguousarray(out), ptr.dtype.scalar)

    def create_embedding_gather(self: Any, src: Any, idx: Any, bound: Any, blksiz: Any, offsets: list, numels: list) -> Any:
        bound, blksiz = value(bound), value(blksiz)
        offs, sizes = [value(o) for o in offsets], [value(n) for n in numels]
        rows = idx.data.astype(np.int64)
        shape = rows.shape + (blksiz,)
        valid = np.broadcast_to(((rows >= 0) & (rows < bound))[..., None], shape).copy()
        # Lanes past the end of the output block along each dimension are not read.
        for d in range(min(len(shape), len(offs))):
            pos = offs[d] + np.arange(shape[d])
            view = [1] * len(shape)
            view[d] = shape[d]
            valid &= (pos < sizes[d]).reshape(view)
        row_len = sizes[-1] if sizes else blksiz
        col = (offs[-1] if offs else 0) + np.arange(blksiz)
        element = src.get_element_ty()
        elt_bytes = max(1, element.primitive_bitwidth // 8)
        addresses = src.data.reshape(-1)[0] + ((np.where(valid, rows[..., None], 0) * row_len + col) * elt_bytes).astype(np.uint64)
        ptrs = Handle(addresses.astype(np.uint64), src.dtype)
        return self.create_masked_load(ptrs, Handle(valid, tl.int1), None, None, None, False)

    def create_annotation(self: Any, *args: Any) -> None:
        return None

    def attribute(self: Any, *args: Any) -> Any:
        return args[0] if args else None

    for name, fn in (
        ("create_gather", create_gather),
        ("create_extract_slice", create_extract_slice),
        ("create_insert_slice", create_insert_slice),
        ("create_extract_scalar", create_extract_scalar),
        ("create_flip", create_flip),
        ("create_sort", create_sort),
        ("create_embedding_gather", create_embedding_gather),
        ("create_annotation", create_annotation),
        ("get_unit_attr", attribute),
        ("get_bool_attr", attribute),
        ("get_int32_attr", attribute),
        ("get_str_attr", attribute),
        ("get_i64_array_attr", attribute),
    ):
        if not hasattr(Builder, name):
            setattr(Builder, name, fn)

    # The interpreter hands constexpr offsets in as plain ints, which these
    # builtins' own code expects wrapped (`o.handle`).
    for name in ("extract_slice", "insert_slice", "get_element"):
        for module in (tl, getattr(tl, "core", None)):
            original = getattr(module, name, None) if module is not None else None
            if original is not None:
                setattr(module, name, _with_wrapped_ints(original, tl, 2 if name == "insert_slice" else 1))

    def parallel(arg1: Any, arg2: Any = None, step: Any = None, **_hints: Any) -> range:
        start, end = (0, arg1) if arg2 is None else (arg1, arg2)
        return range(int(start), int(end), int(step or 1))

    for module in (tl, getattr(tl, "core", None)):
        if module is not None and hasattr(module, "parallel"):
            module.parallel = parallel


def _with_wrapped_ints(original: Any, tl: Any, position: int) -> Any:
    import functools

    def wrap(values: Any) -> Any:
        if isinstance(values, (tuple, list)):
            return [tl.constexpr(v) if isinstance(v, int) else v for v in values]
        return values

    @functools.wraps(original)
    def builtin(*args: Any, **kwargs: Any) -> Any:
        args = tuple(wrap(a) if i == position else a for i, a in enumerate(args))
        kwargs = {k: wrap(v) if k in ("offsets", "indice") else v for k, v in kwargs.items()}
        return original(*args, **kwargs)

    return builtin
