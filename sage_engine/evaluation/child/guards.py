"""Checks the children make while a candidate runs: outputs that share
memory with inputs, inputs changed in place, torch's functions replaced.

What the candidate process finds itself is early, friendly feedback (that
process runs candidate code); the reference process repeats what decides.
Standard library, torch imported lazily.
"""

from __future__ import annotations

from typing import Any, Callable


def storage_ptr(value: Any) -> int | None:
    import torch

    if not isinstance(value, torch.Tensor) or value.is_sparse:
        return None
    try:
        ptr = value.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
    return ptr or None


def aliases(values: list[Any], torch: Any) -> list[Any]:
    """New tensor objects on the same memory as `values`' plain tensors (the
    same leaves where they require grad); anything else as it is. The
    harness keeps `values`: a kernel that relabels or re-points what it
    got changes its aliases only."""
    out = []
    for v in values:
        if type(v) is torch.Tensor and v.layout == torch.strided:
            alias = v.detach()
            if v.requires_grad:
                alias.requires_grad_(True)
            out.append(alias)
        else:
            out.append(v)
    return out


def same_memory(a: Any, b: Any) -> bool:
    """Two strided tensors that are views of the very same elements."""
    import torch

    if a.layout != torch.strided or b.layout != torch.strided:
        return False
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype


def identity_reader(torch: Any) -> Callable[[Any], tuple[Any, ...]]:
    """What a tensor is, as the harness relies on it: its class, memory,
    shape, strides, dtype and device. The functions are bound here, when
    called before the candidate loads (taken from the C base class, not
    looked up on `torch.Tensor` at call time): a candidate that later
    replaces `type`, `torch.Tensor.data_ptr` or the like does not reach
    them. Anything that is not a tensor reads as its class alone."""
    base = torch._C.TensorBase
    kind, tensor, layout = type, torch.Tensor, torch.strided
    data_ptr, size, stride = base.__dict__["data_ptr"], base.__dict__["size"], base.__dict__["stride"]
    offset, storage = base.__dict__["storage_offset"], base.__dict__["untyped_storage"]
    storage_ptr_of = torch._C.StorageBase.__dict__["data_ptr"]
    dtype, device, layout_of = base.__dict__["dtype"].__get__, base.__dict__["device"].__get__, base.__dict__["layout"].__get__
    _tuple = tuple

    def identity(value: Any) -> tuple[Any, ...]:
        cls = kind(value)
        if cls is not tensor or layout_of(value) is not layout:
            return (cls,)
        return (
            cls,
            data_ptr(value),
            storage_ptr_of(storage(value)),
            offset(value),
            _tuple(size(value)),
            _tuple(stride(value)),
            dtype(value),
            device(value),
        )

    return identity


def aliased(outputs: list[Any], inputs: list[Any]) -> list[tuple[int, int]]:
    """(output index, input index) pairs that share storage."""
    in_ptrs = [storage_ptr(x) for x in inputs]
    pairs = []
    for i, out in enumerate(outputs):
        ptr = storage_ptr(out)
        if ptr is None:
            continue
        for j, p in enumerate(in_ptrs):
            if p == ptr:
                pairs.append((i, j))
    return pairs


def mutated(before: list[Any], after: list[Any]) -> list[int]:
    """Indices of tensor inputs whose values changed during a call."""
    import torch

    changed = []
    for i, (b, a) in enumerate(zip(before, after)):
        if not isinstance(b, torch.Tensor) or not isinstance(a, torch.Tensor):
            continue
        if b.shape != a.shape or b.dtype != a.dtype or b.layout != a.layout:
            changed.append(i)
            continue
        if not all(_same_bits(x, y) for x, y in zip(components(b), components(a))):
            changed.append(i)
    return changed


def components(t: Any) -> list[Any]:
    """The dense tensors that hold a tensor's values: itself when strided; a
    sparse tensor's index and value tensors as stored (a sparse COO tensor of
    ten sparse dimensions may describe more elements than memory holds, so it
    is never made dense)."""
    import torch

    if t.layout == torch.sparse_coo:
        return [t._indices(), t._values()]
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        return [t.crow_indices(), t.col_indices(), t.values()]
    if t.layout in (torch.sparse_csc, torch.sparse_bsc):
        return [t.ccol_indices(), t.row_indices(), t.values()]
    return [t]


def _same_bits(b: Any, a: Any) -> bool:
    import torch

    if b.shape != a.shape or b.dtype != a.dtype:
        return False
    if torch.equal(b, a):
        return True
    same = b == a
    if b.is_floating_point() or b.is_complex():
        same = same | (torch.isnan(b) & torch.isnan(a))
    return bool(same.all())


def torch_snapshot(torch: Any, device: str = "cpu") -> dict[str, dict[str, int]]:
    """Identities of torch's functions and of Tensor/Module methods, taken
    before the candidate loads (from `__dict__`s: no lazy import is triggered).
    On a device, also the device module's functions and its Event class (the
    device timer's parts), callables only: the module keeps state flags too."""
    spaces = {
        "torch": torch,
        "torch.nn.functional": torch.nn.functional,
        "torch.linalg": torch.linalg,
        "torch.Tensor": torch.Tensor,
        "torch.nn.Module": torch.nn.Module,
    }
    snapshot = {name: {k: id(v) for k, v in vars(ns).items()} for name, ns in spaces.items()}
    mod = getattr(torch, device, None) if device != "cpu" else None
    if mod is not None:
        snapshot[f"torch.{device}"] = {k: id(v) for k, v in vars(mod).items() if callable(v)}
        if isinstance(getattr(mod, "Event", None), type):
            snapshot[f"torch.{device}.Event"] = {k: id(v) for k, v in vars(mod.Event).items()}
    return snapshot


def patched(torch: Any, before: dict[str, dict[str, int]], device: str = "cpu") -> list[str]:
    """Names whose object changed since `before`. In classes a new entry
    counts too: it shadows the C implementation (`torch.Tensor.add = f`)."""
    now = torch_snapshot(torch, device)
    out = []
    for space, old in before.items():
        is_class = space in ("torch.Tensor", "torch.nn.Module") or space.endswith(".Event")
        for key, ident in now.get(space, {}).items():
            if key in old and old[key] != ident or key not in old and is_class:
                out.append(f"{space}.{key}")
    return sorted(out)
