"""`triton.language.extra.libdevice` in upstream Triton's interpreter.

The libdevice functions (`libdevice.tanh(x)`, `pow`, `erf`, ...; also
`tl.extra.cuda.libdevice`'s) are stubs or extern calls that each backend's
compiler resolves in its device library; the interpreter has none, so every call returns None and the kernel fails
("cannot convert None ... to tensor"), though the device computes it
happily. Here the common ones compute in numpy on the interpreter's tensors,
at the operand's precision (bf16 through fp32, as the device does).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sage_engine.evaluation.child.fidelity import once_per_module
from sage_engine.evaluation.child.fidelity.bf16 import to_bf16, to_f32

_erfc = np.vectorize(math.erfc, otypes=[np.float64])
_lgamma = np.vectorize(math.lgamma, otypes=[np.float64])

UNARY = {
    "tanh": np.tanh,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "exp": np.exp,
    "exp2": np.exp2,
    "exp10": lambda x: 10.0**x,
    "expm1": np.expm1,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "cbrt": np.cbrt,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "rint": np.rint,
    "nearbyint": np.rint,
    "round": lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5),
    "abs": np.abs,
    "fabs": np.abs,
    "erf": lambda x: np.vectorize(math.erf, otypes=[np.float64])(x),
    "erfc": _erfc,
    "lgamma": _lgamma,
    "rcp_rn": lambda x: 1.0 / x,
    "fast_expf": np.exp,
    "fast_logf": np.log,
    "fast_tanhf": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
}
BINARY = {
    "pow": np.power,
    "powf": np.power,
    "fmax": np.fmax,
    "fmin": np.fmin,
    "fmod": np.fmod,
    "atan2": np.arctan2,
    "hypot": np.hypot,
    "div_rn": np.divide,
    "fdiv_rn": np.divide,
    "copysign": np.copysign,
    "nextafter": np.nextafter,
    "remainder": np.remainder,
    "fast_powf": np.power,
    "fast_dividef": np.divide,
}
PREDICATES = {"isnan": np.isnan, "isinf": np.isinf, "isfinited": np.isfinite, "finitef": np.isfinite, "signbit": np.signbit}


@once_per_module
def install(interpreter: Any) -> None:
    """Compute the libdevice functions the kernels of `interpreter` call."""
    import importlib

    modules = []
    for name in ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice", "triton.language.extra.hip.libdevice"):
        try:
            modules.append(importlib.import_module(name))
        except ImportError:
            continue
    import triton.language as tl

    Handle = interpreter.TensorHandle

    def operand(value: Any) -> tuple[Any, Any]:
        if isinstance(value, tl.tensor):
            data = value.handle.data
            if value.dtype == tl.bfloat16:
                data = to_f32(data)
            return data, value.dtype
        return np.asarray(getattr(value, "value", value)), None

    def result(data: Any, dtype: Any) -> Any:
        data = np.asarray(data)
        if dtype == tl.int1:
            out = data.astype(bool)
        elif dtype == tl.bfloat16:
            out = to_bf16(data.astype(np.float32))
        else:
            out = data.astype(interpreter._get_np_dtype(dtype))
        shape = list(out.shape)
        ty = tl.block_type(dtype, shape) if shape and shape != [1] else dtype
        if not shape:
            out = out.reshape(1)
        return tl.tensor(Handle(out, dtype), ty)

    def make(fn: Any, predicate: bool = False) -> Any:
        def call(*args: Any, **_kwargs: Any) -> Any:
            values = [operand(a) for a in args]
            dtype = next((d for _, d in values if d is not None), tl.float32)
            with np.errstate(all="ignore"):
                wide = [v.astype(np.float64) if v.dtype == np.float16 or v.dtype == np.float32 else v for v, _ in values]
                out = fn(*wide)
            return result(out, tl.int1 if predicate else dtype)

        return call

    for module in modules:
        for table, predicate in ((UNARY, False), (BINARY, False), (PREDICATES, True)):
            for name, fn in table.items():
                if getattr(module, name, None) is not None:
                    setattr(module, name, make(fn, predicate))
