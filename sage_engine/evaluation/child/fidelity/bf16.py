"""bfloat16 in the Triton interpreter, as the device computes it.

Both interpreters (upstream Triton's and triton-ascend's) hold a bf16 tensor
as its raw 16-bit patterns in a numpy uint16 array and hand those patterns
to numpy: `a + b`, `tl.dot`, `tl.sum`, `exp` then compute on integers (a
64x64 bf16 product comes out near 1e10). A GPU or NPU computes bf16 math in
fp32 and rounds the result to bf16 (round to nearest even). These patches do
exactly that on the interpreter's builder: every floating operation that
sees a bf16 operand converts its operands to fp32, runs the interpreter's own
fp32 code, and rounds a bf16 result back. Casts to bf16 round to nearest
even (the interpreter truncated); atomics on bf16 run element by element.

Imports only the standard library and numpy/triton (it runs in the candidate
process under either interpreter).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sage_engine.evaluation.child.fidelity import once_per_module


def to_f32(bits: Any) -> Any:
    """bf16 patterns (uint16) to the fp32 values they stand for (exact)."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def to_bf16(values: Any, *, truncate: bool = False) -> Any:
    """fp32 values to bf16 patterns, rounded to nearest even (or toward zero)."""
    x = np.ascontiguousarray(np.asarray(values, dtype=np.float32))
    bits = x.view(np.uint32)
    if truncate:
        out = (bits >> 16).astype(np.uint16)
    else:
        out = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out = np.where(nan, ((bits >> 16) | np.uint32(0x0040)).astype(np.uint16), out)
    return out.reshape(x.shape)


@once_per_module
def install(interpreter: Any) -> None:
    """Patch the interpreter module's builder and reductions."""
    import triton.language as tl

    Handle = interpreter.TensorHandle
    Builder = interpreter.InterpreterBuilder
    bf16 = tl.bfloat16

    u16 = np.dtype(np.uint16)

    def is_bf16(h: Any) -> bool:
        # bf16 patterns live in uint16 arrays: the dtype compare is the cheap first test.
        data = getattr(h, "data", None)
        return getattr(data, "dtype", None) == u16 and getattr(h.dtype, "scalar", None) == bf16

    def widened(h: Any) -> Any:
        return Handle(to_f32(h.data), tl.float32) if is_bf16(h) else h

    def narrowed(h: Any) -> Any:
        data = h.data
        if data.dtype == np.bool_ or not np.issubdtype(data.dtype, np.floating):
            return h
        return Handle(to_bf16(data), bf16)

    def through_fp32(original: Any, n_args: int) -> Any:
        """A builder method whose result is bf16 when any of its first `n_args` operands is."""

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            for a in args[:n_args]:
                if is_bf16(a):
                    break
            else:
                return original(self, *args, **kwargs)
            wide = [widened(a) for a in args[:n_args]] + list(args[n_args:])
            return narrowed(original(self, *wide, **kwargs))

        return method

    original_binary = Builder.binary_op

    def binary_op(self: Any, lhs: Any, rhs: Any, op: Any) -> Any:
        if not (is_bf16(lhs) or is_bf16(rhs)):
            return original_binary(self, lhs, rhs, op)
        out = op(widened(lhs).data, widened(rhs).data)
        if out.dtype == np.bool_ or not np.issubdtype(out.dtype, np.floating):
            return Handle(out, tl.int1 if out.dtype == np.bool_ else lhs.dtype.scalar)
        return Handle(to_bf16(out), bf16)

    Builder.binary_op = binary_op

    original_ternary = Builder.ternary_op

    def ternary_op(self: Any, lhs: Any, rhs: Any, other: Any, op: Any) -> Any:
        # np.where only moves patterns; clamp compares values.
        if op is np.where or not any(is_bf16(h) for h in (lhs, rhs, other)):
            return original_ternary(self, lhs, rhs, other, op)
        return narrowed(original_ternary(self, widened(lhs), widened(rhs), widened(other), op))

    Builder.ternary_op = ternary_op
    Builder.unary_op = through_fp32(Builder.unary_op, 1)
    Builder.create_fma = through_fp32(Builder.create_fma, 3)
    for name in ("create_erf", "create_rsqrt"):
        if hasattr(Builder, name):
            setattr(Builder, name, through_fp32(getattr(Builder, name), 1))

    original_dot = Builder.create_dot

    def create_dot(self: Any, a: Any, b: Any, d: Any, *rest: Any, **kwargs: Any) -> Any:
        if not any(is_bf16(h) for h in (a, b, d)):
            return original_dot(self, a, b, d, *rest, **kwargs)
        out = original_dot(self, widened(a), widened(b), widened(d), *rest, **kwargs)
        return narrowed(out) if is_bf16(d) else out

    Builder.create_dot = create_dot

    original_cast = Builder.cast_impl

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        src_bf16, dst_bf16 = is_bf16(src), dst_type.scalar == bf16
        if src_bf16 and dst_bf16:
            return Handle(src.data.copy(), bf16)
        if src_bf16:
            return original_cast(self, widened(src), dst_type)
        if dst_bf16:
            wide = original_cast(self, src, tl.float32) if src.dtype.scalar != tl.float32 else src
            return Handle(to_bf16(wide.data), bf16)
        return original_cast(self, src, dst_type)

    Builder.cast_impl = cast_impl

    original_fp_to_fp = Builder.create_fp_to_fp

    def create_fp_to_fp(self: Any, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
        src_bf16, dst_bf16 = is_bf16(src), dst_type.scalar == bf16
        if not (src_bf16 or dst_bf16):
            return original_fp_to_fp(self, src, dst_type, rounding_mode)
        wide = widened(src).data if src_bf16 else src.data.astype(np.float32)
        if dst_bf16:
            rtz = "RTZ" in str(rounding_mode)
            return Handle(to_bf16(wide, truncate=rtz), bf16)
        return original_fp_to_fp(self, Handle(wide, tl.float32), dst_type, rounding_mode)

    Builder.create_fp_to_fp = create_fp_to_fp

    if not hasattr(Builder, "get_bf16"):
        # tl.full(..., tl.bfloat16) with a non-zero value asks the builder for a bf16 constant.
        Builder.get_bf16 = lambda self, value: Handle(to_bf16(np.array([value], dtype=np.float32)), bf16)

    original_rmw = Builder.create_atomic_rmw

    def create_atomic_rmw(self: Any, rmw_op: Any, ptr: Any, val: Any, mask: Any, sem: Any, scope: Any) -> Any:
        if not is_bf16(val):
            return original_rmw(self, rmw_op, ptr, val, mask, sem, scope)
        return Handle(_bf16_atomic(interpreter, str(rmw_op), ptr.data, val.data, mask.data), bf16)

    Builder.create_atomic_rmw = create_atomic_rmw

    for cls in (interpreter.ReduceOps, interpreter.ScanOps):
        cls.apply = _reduce_through_fp32(cls.apply, Handle, bf16)


def _reduce_through_fp32(original: Any, Handle: Any, bf16: Any) -> Any:
    """Reductions and scans of bf16 inputs in fp32, results rounded back to bf16."""
    import triton.language as tl

    def apply(self: Any, input: Any) -> Any:
        inputs = input if isinstance(input, (tuple, list)) else (input,)
        if not any(getattr(t, "dtype", None) == bf16 for t in inputs):
            return original(self, input)
        wide = [tl.tensor(Handle(to_f32(t.handle.data), tl.float32), _typed(t, tl.float32)) if t.dtype == bf16 else t for t in inputs]
        out = original(self, type(input)(wide) if isinstance(input, (tuple, list)) else wide[0])
        outs = out if isinstance(out, (tuple, list)) else (out,)
        back = []
        for src, res in zip(inputs, outs):
            if src.dtype == bf16 and getattr(res, "dtype", None) == tl.float32:
                res = tl.tensor(Handle(to_bf16(res.handle.data), bf16), _typed(res, bf16))
            back.append(res)
        back += list(outs[len(back) :])
        return type(out)(back) if isinstance(out, (tuple, list)) else back[0]

    return apply


def _typed(t: Any, element: Any) -> Any:
    """`t`'s type with another element type (its block shape kept)."""
    import triton.language as tl

    ty = t.type
    return tl.block_type(element, list(ty.shape)) if ty.is_block() else element


def _bf16_atomic(interpreter: Any, op: str, ptrs: Any, vals: Any, mask: Any) -> Any:
    """An atomic on bf16 memory, lane by lane (the interpreter runs one program at a time,
    so lanes in order are what a device's serialised atomics give)."""
    ptrs = np.asarray(ptrs).reshape(-1)
    vals = np.broadcast_to(np.asarray(vals), np.asarray(ptrs).shape if np.asarray(vals).size != 1 else (ptrs.size,))
    vals = np.asarray(vals).reshape(-1)
    mask = np.broadcast_to(np.asarray(mask), (ptrs.size,)).reshape(-1)
    old = np.zeros(ptrs.size, dtype=np.uint16)
    one = np.ones(1, dtype=bool)
    for i in range(ptrs.size):
        if not mask[i]:
            continue
        p = ptrs[i : i + 1]
        cur = interpreter._interpreter.load(p, one, np.zeros(1, dtype=np.uint16), np.dtype(np.uint16))
        old[i] = cur[0]
        a, b = to_f32(cur)[0], to_f32(vals[i : i + 1])[0]
        if "FADD" in op or op.endswith("ADD"):
            new = a + b
        elif "MAX" in op:
            new = max(a, b)
        elif "MIN" in op:
            new = min(a, b)
        elif "XCHG" in op:
            new = b
        else:
            raise NotImplementedError(f"atomic {op} on bfloat16 is not interpreted")
        interpreter._interpreter.store(p, to_bf16(np.array([new], dtype=np.float32)), one)
    return old
