"""Comparing a candidate's outputs with the reference's.

Pure functions over tensors; they run inside the sandbox child, so this
module imports nothing from SAGE beyond the standard library and torch.

Tolerance modes:
- kernelbench: |c - r| <= atol + rtol * |r| elementwise (torch.allclose);
  fp32 1e-4/1e-4, fp16/bf16 1e-2/1e-2, integers and bool exact.
- npukernelbench: an element fails only if abs err > atol AND
  rel err > rtol, rel = abs / (|r| + 1e-7); 1e-3/1e-3 for floats.
A task may override atol/rtol per dtype in either mode.

Inputs scaled to large magnitudes (`scaled_inputs`, the `large values`
shape variant) make atol at least `LARGE_VALUES_RTOL` (or rtol, where
larger) x the output's largest magnitude: rounding errors grow with the
inputs, and faster than they do where the operator is ill-conditioned
(attention over scores x10^4). That variant is there for what overflows
(non-finite values fail at any tolerance); precision is judged at the
ordinary magnitudes of every other trial.

Outputs small against the absolute tolerance (their largest magnitude at
most `small_output_factor` x atol) would let a kernel that computes nothing
pass: zeros are within atol of every element of a softmax over 393216
values. Those are compared relative to their own scale instead: atol becomes
rtol x the output's largest magnitude, and the Comparison says so (`scale`).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

KERNELBENCH_TOL = {
    "float64": (1e-4, 1e-4),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1e-2, 1e-2),
    "complex64": (1e-4, 1e-4),
}
NPUKERNELBENCH_TOL = {name: (1e-3, 1e-3) for name in KERNELBENCH_TOL}
# At the `large values` variant: correct float32 attention over inputs x100,
# summed in another order, missed the float32 reference by up to 0.28% of the
# output's scale (2000 draws; rtol x scale failed 0.5-13% of correct kernels).
LARGE_VALUES_RTOL = 1e-2
REL_EPS = 1e-7
MODES = ("kernelbench", "npukernelbench")


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    message: str = ""
    scale: float | None = None  # set when compared relative to the output's scale: its largest magnitude
    atol: float | None = None  # the absolute tolerance that applied then

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "max_abs_error": self.max_abs_error,
            "max_rel_error": self.max_rel_error,
            "message": self.message,
        }


def dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def tolerance_for(dtype: Any, mode: str, override: dict | None = None) -> tuple[float, float] | None:
    """(atol, rtol) for a floating dtype; None means exact comparison."""
    if mode not in MODES:
        raise ValueError(f"tolerance mode must be one of {MODES}, got {mode!r}")
    name = dtype_name(dtype)
    table = KERNELBENCH_TOL if mode == "kernelbench" else NPUKERNELBENCH_TOL
    if name not in table:
        return None
    atol, rtol = table[name]
    if override and name in override:
        atol = override[name].get("atol", atol)
        rtol = override[name].get("rtol", rtol)
    return float(atol), float(rtol)


def as_output_list(value: Any) -> list[Any]:
    """A forward's return value as a flat list: tensor -> [tensor],
    tuple/list -> its items, None -> []."""
    if value is None:
        return []
    if isinstance(value, (tuple, list)):
        out: list[Any] = []
        for v in value:
            out.extend(as_output_list(v) if isinstance(v, (tuple, list)) else [v])
        return out
    return [value]


def compare_outputs(
    reference: list[Any],
    candidate: list[Any],
    *,
    mode: str,
    override: dict | None = None,
    small_output_factor: float = 0.0,
    scaled_inputs: bool = False,
) -> Comparison:
    """Compare flattened outputs; the message names the first output that
    fails. `scale` is the smallest scale any output was compared against."""
    if len(reference) != len(candidate):
        return Comparison(False, message=f"expected {len(reference)} output(s), got {len(candidate)}")
    worst_abs = worst_rel = 0.0
    scale = atol = None
    for i, (ref, cand) in enumerate(zip(reference, candidate)):
        label = f"output {i}" if len(reference) > 1 else "output"
        result = compare_one(
            ref, cand, mode=mode, override=override, label=label, small_output_factor=small_output_factor, scaled_inputs=scaled_inputs
        )
        if not result.ok:
            return result
        worst_abs = max(worst_abs, result.max_abs_error or 0.0)
        worst_rel = max(worst_rel, result.max_rel_error or 0.0)
        if result.scale is not None and (scale is None or result.scale < scale):
            scale, atol = result.scale, result.atol
    return Comparison(True, worst_abs, worst_rel, "", scale, atol)


def output_scale(r: Any) -> float:
    """The largest finite magnitude of a floating tensor (0.0 when it has none)."""
    import torch

    # Two reductions and no copy in the common case (a 6 GiB output stays one).
    top, bottom = float(r.max()), float(r.min())
    if math.isfinite(top) and math.isfinite(bottom):
        return max(abs(top), abs(bottom))
    magnitude = r.abs()
    magnitude = torch.where(torch.isfinite(magnitude), magnitude, torch.zeros_like(magnitude))
    return float(magnitude.max())


def scaled_atol(r: Any, atol: float, rtol: float, factor: float) -> tuple[float, float | None]:
    """(atol, scale): atol, or rtol x the output's scale where that scale is
    at most `factor` x atol (an all-zero output keeps atol: nothing to scale by)."""
    if factor <= 0:
        return atol, None
    scale = output_scale(r)
    if 0.0 < scale <= factor * atol:
        return rtol * scale, scale
    return atol, None


def compare_one(
    ref: Any,
    cand: Any,
    *,
    mode: str,
    override: dict | None = None,
    label: str = "output",
    small_output_factor: float = 0.0,
    scaled_inputs: bool = False,
) -> Comparison:
    import torch

    if not isinstance(ref, torch.Tensor):
        return _compare_python(ref, cand, mode=mode, label=label)
    if not isinstance(cand, torch.Tensor):
        return Comparison(False, message=f"{label}: expected a tensor, got {type(cand).__name__}")
    if tuple(ref.shape) != tuple(cand.shape):
        return Comparison(False, message=f"{label}: shape {tuple(cand.shape)} != expected {tuple(ref.shape)}")
    if ref.dtype != cand.dtype:
        return Comparison(False, message=f"{label}: dtype {dtype_name(cand.dtype)} != expected {dtype_name(ref.dtype)}")
    r = ref.detach().to("cpu")
    c = cand.detach().to("cpu")
    if r.numel() == 0:
        return Comparison(True, 0.0, 0.0)
    tol = tolerance_for(r.dtype, mode, override)
    if tol is None:
        bad = r != c
        if not bool(bad.any()):
            return Comparison(True, 0.0, 0.0)
        diff = (r.to(torch.float64) - c.to(torch.float64)).abs() if r.dtype != torch.bool else bad.double()
        idx = _first_index(bad)
        return Comparison(
            False,
            float(diff.max()),
            None,
            f"{label}: {int(bad.sum())} of {r.numel()} elements differ (exact dtype "
            f"{dtype_name(r.dtype)}); first at index {idx}: got {_item(c, idx)}, expected {_item(r, idx)}",
        )
    if r.is_complex():
        r, c = torch.view_as_real(r), torch.view_as_real(c)
    atol, rtol = tol
    if scaled_inputs:
        # Inputs at large magnitudes: rounding grows with them, so atol grows
        # with the output's scale (a sum of values x100 that cancels to near
        # zero, attention whose near-tied scores swap under rounding).
        atol = max(atol, max(rtol, LARGE_VALUES_RTOL) * output_scale(r))
    atol, scale = scaled_atol(r, atol, rtol, small_output_factor)
    fast = _fast_pass(r, c, atol, rtol, mode)
    if fast is not None:
        return Comparison(True, fast.max_abs_error, fast.max_rel_error, "", scale, atol if scale else None)
    r64, c64 = r.to(torch.float64), c.to(torch.float64)
    r_fin, c_fin = torch.isfinite(r64), torch.isfinite(c64)
    # Same non-finite value in both (nan and nan, inf and inf) counts as a match.
    same_special = (~r_fin) & ((torch.isnan(r64) & torch.isnan(c64)) | (r64 == c64))
    nonfinite_bad = (~c_fin | ~r_fin) & ~same_special
    both = r_fin & c_fin
    abs_err = torch.where(both, (c64 - r64).abs(), torch.zeros_like(r64))
    rel_err = abs_err / (r64.abs() + REL_EPS)
    if mode == "kernelbench":
        bad = both & (abs_err > atol + rtol * r64.abs())
    else:
        bad = both & (abs_err > atol) & (rel_err > rtol)
    bad = bad | nonfinite_bad
    max_abs, max_rel = float(abs_err.max()), float(rel_err.max())
    if not bool(bad.any()):
        return Comparison(True, max_abs, max_rel, "", scale, atol if scale else None)
    idx = _first_index(bad)
    n_bad = int(bad.sum())
    if bool(nonfinite_bad.any()):
        idx = _first_index(nonfinite_bad)
        what = f"non-finite value {_item(c, idx)} where the reference has {_item(r, idx)}"
    else:
        what = f"got {_item(c, idx)}, expected {_item(r, idx)}"
    relative = (
        f", atol relative to the output's scale: its largest magnitude {scale:.3g} is at most {small_output_factor:g}x the usual atol"
        if scale
        else ""
    )
    return Comparison(
        False,
        max_abs,
        max_rel,
        f"{label}: {n_bad} of {r.numel()} elements exceed tolerance (atol={atol:g}, rtol={rtol:g}, "
        f"{mode}{relative}); first at index {idx}: {what}; max abs error {max_abs:.3g}, max rel error {max_rel:.3g}",
        scale,
        atol if scale else None,
    )


# Elements the fast pass takes at a time: its passes over a block stay in
# the core's cache (a 4M-element float32 output: 41 ms whole, 16 ms by blocks).
FAST_BLOCK = 1 << 16


def _fast_pass(r: Any, c: Any, atol: float, rtol: float, mode: str) -> Comparison | None:
    """The common case, all finite and within tolerance, in a few passes at
    float32 (float64 inputs stay float64), block by block; None sends the
    caller to the slow path that explains the failure."""
    import torch

    work = torch.float64 if r.dtype == torch.float64 else torch.float32
    rf, cf = r.reshape(-1), c.reshape(-1)
    max_abs = max_rel = 0.0
    for start in range(0, rf.numel(), FAST_BLOCK):
        rw, cw = rf[start : start + FAST_BLOCK].to(work), cf[start : start + FAST_BLOCK].to(work)
        abs_err = (cw - rw).abs_()
        ref_abs = rw.abs()
        # Finite maxima (max propagates NaN) mean finite tensors: two reductions
        # instead of two isfinite passes and their masks.
        block_abs, block_ref = float(abs_err.max()), float(ref_abs.max())
        if not (math.isfinite(block_abs) and math.isfinite(block_ref)):
            return None
        if mode == "kernelbench":
            ok = bool((abs_err <= ref_abs.mul(rtol).add_(atol)).all())
        else:
            ok = not bool(((abs_err > atol) & (abs_err > ref_abs.add(REL_EPS).mul_(rtol))).any())
        if not ok:
            return None
        max_abs = max(max_abs, block_abs)
        max_rel = max(max_rel, float(abs_err.div_(ref_abs.add_(REL_EPS)).max()))
    return Comparison(True, max_abs, max_rel)


def _compare_python(ref: Any, cand: Any, *, mode: str, label: str) -> Comparison:
    if isinstance(ref, bool) or isinstance(ref, int) or not isinstance(ref, float):
        ok = type(cand) is type(ref) and cand == ref
        return Comparison(ok, message="" if ok else f"{label}: got {cand!r}, expected {ref!r}")
    if not isinstance(cand, (int, float)) or isinstance(cand, bool):
        return Comparison(False, message=f"{label}: expected a number, got {type(cand).__name__}")
    atol, rtol = KERNELBENCH_TOL["float32"] if mode == "kernelbench" else NPUKERNELBENCH_TOL["float32"]
    err = abs(cand - ref)
    rel = err / (abs(ref) + REL_EPS)
    ok = err <= atol + rtol * abs(ref) if mode == "kernelbench" else not (err > atol and rel > rtol)
    return Comparison(ok, err, rel, "" if ok else f"{label}: got {cand!r}, expected {ref!r}")


def _first_index(mask: Any) -> tuple[int, ...]:
    import torch

    flat = int(torch.nonzero(mask.reshape(-1))[0])
    return tuple(int(i) for i in _unravel(flat, tuple(mask.shape)))


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for dim in reversed(shape):
        out.append(flat % dim)
        flat //= dim
    return list(reversed(out))


def _item(t: Any, idx: tuple[int, ...]) -> str:
    v = t[idx] if idx else t
    return f"{v.item():.6g}" if v.is_floating_point() else str(v.item())


def unfit_at_large_values(model: Any, values: list[Any], ref_out: list[Any], *, mode: str, override: dict | None) -> str:
    """Why the reference's own outputs at large input values are no answer
    to hold a kernel to ("" when they are): not finite, or not what the
    same reference computes in float64 to the tolerance."""
    import torch

    if not all_finite(ref_out):
        return "its outputs are not finite at these input values"
    try:
        with torch.no_grad():
            wide = [v.double() if type(v) is torch.Tensor and v.is_floating_point() else v for v in values]
            exact = as_output_list(copy.deepcopy(model).double()(*wide))
        exact = [e.to(r.dtype) if isinstance(e, torch.Tensor) and isinstance(r, torch.Tensor) else e for e, r in zip(exact, ref_out)]
    except Exception as exc:  # noqa: BLE001 - a reference that cannot run in float64 cannot be checked so
        return f"its accuracy at these input values cannot be checked in float64 ({type(exc).__name__})"
    check = compare_outputs(exact, ref_out, mode=mode, override=override, scaled_inputs=True)
    return "" if check.ok else f"the reference itself is not accurate to the tolerance there ({check.message[:200]})"


def all_finite(values: list[Any]) -> bool:
    """No NaN or infinity in any floating output."""
    import torch

    for v in values:
        if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex()):
            if not bool(torch.isfinite(v).all()):
                return False
        elif isinstance(v, float) and not math.isfinite(v):
            return False
    return True


def same_values(a: list[Any], b: list[Any]) -> bool:
    """Bitwise-equal outputs (used to spot a candidate that returns the same
    thing for different inputs)."""
    import torch

    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(x.detach().cpu(), y.detach().cpu()):
                return False
        elif x != y:
            return False
    return True
