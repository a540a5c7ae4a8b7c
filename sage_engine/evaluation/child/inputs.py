"""Inputs cross once: the reference process makes each trial's inputs and
hands the candidate process a copy of its own without a byte copy through a
pipe; only a small header crosses the inputs pipe.

- Host tensors live in a shared memory file (a memfd the worker makes
  before it forks both children, sized sparse: memory is used only where
  written). The reference copies its values in; the candidate's inputs are
  views of that memory.
- Device tensors (cuda): a device copy the reference makes, shared by CUDA
  IPC (torch's multiprocessing reductions). Until the candidate has said the
  IPC handles opened, the reference also puts a host copy in the shared file,
  which the candidate then moves to the device itself.

Each case's inputs have their own slots: later trials of the case, and the
fresh-input check while timed, write new values into the same slots, so the
candidate sees new values in the same tensors (a candidate that memoises on
tensor identity returns stale outputs and is caught). The candidate's copy is
never the reference's: whatever it does to its copy, the reference's inputs
stay as they were made, and the reference reads the candidate's copy to see
whether it was changed. Anything that is not a plain dense tensor or a number
does not cross: the candidate makes its own from the same seed.
"""

from __future__ import annotations

import mmap
import pickle
from dataclasses import dataclass
from typing import Any

from sage_engine.evaluation.protocol import wire

REGION_BYTES = 1 << 40  # the shared file's size: sparse, nothing is used until written
ALIGN = 64  # each tensor's bytes start at a multiple of this within its stretch


@dataclass
class Slot:
    """Where the candidate's copy of one tensor input of one case lives."""

    dtype: str
    shape: tuple[int, ...]
    device: bool = False  # the input is on the device (a host copy may go along: `offset`)
    offset: int = -1  # in the shared file; -1: none yet
    tensor: Any = None  # the reference's view of the candidate's copy (host, or the shared device tensor)
    handle: str = ""  # a device slot's IPC handle (hex of torch's pickled reduction); "" where IPC failed here


def _nbytes(shape: tuple[int, ...], element_size: int) -> int:
    n = element_size
    for s in shape:
        n *= s
    return n


class Region:
    """Stretches of the shared file, mapped in this process; each tensor
    its own view (its own storage: aliasing checks tell inputs apart)."""

    def __init__(self, torch: Any, fd: int):
        self.torch, self.fd = torch, fd
        self.end = 0
        self.maps: dict[tuple[int, int], mmap.mmap] = {}  # (page offset, length) -> its mapping, kept while views live

    def allocate(self, sizes: list[int]) -> list[int]:
        """Page-aligned offsets for tensors of these byte sizes, in a new stretch."""
        offsets, at = [], self.end
        for n in sizes:
            offsets.append(at)
            at += -(-max(n, 1) // ALIGN) * ALIGN
        self.end = -(-at // mmap.PAGESIZE) * mmap.PAGESIZE
        return offsets

    def view(self, offset: int, dtype: str, shape: tuple[int, ...]) -> Any:
        torch = self.torch
        dt = getattr(torch, dtype)
        size = torch.empty((), dtype=dt).element_size()
        nbytes = _nbytes(shape, size)
        start = offset - offset % mmap.PAGESIZE
        length = offset - start + max(nbytes, 1)
        key = (start, length)
        mapping = self.maps.get(key)
        if mapping is None:
            mapping = self.maps[key] = mmap.mmap(self.fd, length, offset=start)
        if nbytes == 0:
            return torch.empty(shape, dtype=dt)
        return torch.frombuffer(mapping, dtype=dt, count=nbytes // size, offset=offset - start).view(shape)


class InputSender:
    """The reference's side: places each trial's inputs and writes the header."""

    def __init__(self, torch: Any, fd: int, pipe: int):
        self.torch, self.pipe = torch, pipe
        self.region = Region(torch, fd)
        self.slots: dict[Any, list[Slot | None]] = {}  # case -> a slot per input (None: a number)
        self.ipc_open: bool | None = None  # whether the candidate opened the device handles (None: not said yet)
        self.ipc_broken = False  # sharing a device tensor failed here: host copies only
        self.pipe_bytes = 0  # what crossed the inputs pipe: headers only
        self.shared_bytes = 0  # what was written into the candidate's copies (shared memory, or by IPC)
        self.placed = 0  # bytes of the shared file in use: what the candidate may map beyond its memory cap

    def send(self, values: list[Any], *, seed: int, case: int, trial: Any, **extra: Any) -> None:
        """A trial's inputs; `extra` goes in the header (a case's first trial
        carries its row and, for a shape variant, the variant's name)."""
        header = self.place(values, case)
        if header is None:
            # Not plain tensors and numbers: the candidate makes its own from the seed.
            header = {"fallback": "inputs that cannot be shared", "seed": seed}
        self.pipe_bytes += wire.write_frame(self.pipe, {"case": case, "trial": trial, **extra, **header}, [])

    def end(self) -> None:
        """No more cases: the candidate's correctness checks are over."""
        self.pipe_bytes += wire.write_frame(self.pipe, {"end": True}, [])

    def place(self, values: list[Any], case: Any) -> dict[str, Any] | None:
        """Writes a trial's values into the case's slots; the header's values, or None when they cannot be shared."""
        torch = self.torch
        if not all(wire.shareable(value, torch) for value in values):
            return None
        slots = self.slots.get(case)
        if slots is None or not self._fits(slots, values):
            slots = self.slots[case] = self._new_slots(values)
        out: list[dict[str, Any]] = []
        on_device = False
        with torch.no_grad():
            for value, slot in zip(values, slots):
                if slot is None:
                    out.append({"kind": "value", "value": value})
                    continue
                item: dict[str, Any] = {
                    "kind": "tensor",
                    "dtype": slot.dtype,
                    "shape": list(slot.shape),
                    "requires_grad": bool(value.requires_grad),
                }
                if slot.handle:
                    slot.tensor.copy_(value)
                    on_device = True
                    item["device"] = slot.handle
                    self.shared_bytes += value.numel() * value.element_size()
                if slot.device and (not slot.handle or self.ipc_open is not True):
                    # A host copy too, until the candidate said the handle opened (or where there is none).
                    item["offset"] = self._host_copy(slot, value)
                elif not slot.device:
                    slot.tensor.copy_(value)
                    item["offset"] = slot.offset
                    self.shared_bytes += value.numel() * value.element_size()
                out.append(item)
        if on_device:
            self.torch.cuda.synchronize()  # the candidate reads them once it has the header
        return {"values": out}

    def _fits(self, slots: list[Slot | None], values: list[Any]) -> bool:
        torch = self.torch
        if len(slots) != len(values):
            return False
        for slot, value in zip(slots, values):
            is_tensor = wire._type(value) is torch.Tensor
            if (slot is None) == is_tensor:
                return False
            if slot is not None and (
                str(value.dtype).replace("torch.", "") != slot.dtype or tuple(value.shape) != slot.shape or value.is_cuda != slot.device
            ):
                return False
        return True

    def _new_slots(self, values: list[Any]) -> list[Slot | None]:
        torch = self.torch
        tensors = [v for v in values if wire._type(v) is torch.Tensor]
        host = [v for v in tensors if not v.is_cuda]
        offsets = iter(self.region.allocate([v.numel() * v.element_size() for v in host]))
        slots: list[Slot | None] = []
        for value in values:
            if wire._type(value) is not torch.Tensor:
                slots.append(None)
                continue
            slot = Slot(str(value.dtype).replace("torch.", ""), tuple(value.shape), device=value.is_cuda)
            if value.is_cuda:
                self._share(slot, value)
            else:
                slot.offset = next(offsets)
                slot.tensor = self.region.view(slot.offset, slot.dtype, slot.shape)
            slots.append(slot)
        self.placed = self.region.end
        return slots

    def _share(self, slot: Slot, value: Any) -> None:
        """The candidate's device copy, shared by CUDA IPC; where that fails
        here, the slot goes by host copies only."""
        if self.ipc_broken:
            return
        try:
            from multiprocessing.reduction import ForkingPickler

            import torch.multiprocessing  # noqa: F401  (registers the CUDA IPC reductions)

            tensor = self.torch.empty_like(value, memory_format=self.torch.contiguous_format)
            slot.handle, slot.tensor = bytes(ForkingPickler.dumps(tensor)).hex(), tensor
        except Exception:  # noqa: BLE001 - no CUDA IPC on this host: the host copy carries it
            self.ipc_broken = True

    def _host_copy(self, slot: Slot, value: Any) -> int:
        if slot.offset < 0:
            (slot.offset,) = self.region.allocate([value.numel() * value.element_size()])
            self.placed = self.region.end
        self.region.view(slot.offset, slot.dtype, slot.shape).copy_(value)
        self.shared_bytes += value.numel() * value.element_size()
        return slot.offset

    def candidate_copy(self, case: Any, device: Any) -> list[Any]:
        """Per input, the candidate's copy as it is now where the candidate
        computes on that very memory (a host slot on the cpu backend, a
        device slot it opened), else None: what the reference can check."""
        out: list[Any] = []
        for slot in self.slots.get(case) or []:
            if slot is None:
                out.append(None)
                continue
            shared = self.ipc_open is True and bool(slot.handle) if slot.device else device.type == "cpu"
            out.append(slot.tensor if shared else None)
        return out


class InputReceiver:
    """The candidate's side: its inputs from a header, on its device."""

    def __init__(self, torch: Any, fd: int, device: Any):
        self.torch, self.device = torch, device
        self.region = Region(torch, fd)
        self.opened: dict[str, Any] = {}  # IPC handle -> the device tensor it opened
        self.views: dict[tuple, Any] = {}  # a host slot -> its view: the same tensor, trial after trial
        self.ipc_failed = False

    @property
    def via(self) -> str:
        """How device inputs arrived: said to the reference, which then stops or keeps sending host copies."""
        return "host" if self.ipc_failed or not self.opened else "ipc"

    def values(self, header: dict[str, Any]) -> list[Any] | None:
        """The inputs a header describes; None for a fallback header (make them from its seed)."""
        if "fallback" in header:
            return None
        entries = header.get("values")
        if not isinstance(entries, list):
            raise wire.ProtocolError("an inputs header without values")
        return [self._value(e) for e in entries]

    def _value(self, entry: Any) -> Any:
        if not isinstance(entry, dict):
            raise wire.ProtocolError("an inputs entry that is not an object")
        if entry.get("kind") == "value":
            return entry.get("value")
        if entry.get("kind") != "tensor" or entry.get("dtype") not in wire.DTYPES:
            raise wire.ProtocolError(f"an unreadable inputs entry {str(entry)[:80]}")
        shape = tuple(int(s) for s in entry.get("shape", []))
        handle = entry.get("device")
        tensor = None
        if handle and not self.ipc_failed:
            tensor = self.opened.get(handle)
            if tensor is None:
                try:
                    tensor = self.opened[handle] = pickle.loads(bytes.fromhex(handle))
                except Exception:  # noqa: BLE001 - no CUDA IPC here: the host copy that came with it
                    self.ipc_failed = True
        if tensor is None:
            if int(entry.get("offset", -1)) < 0:
                raise wire.ProtocolError("a device input that neither opened nor came with a host copy")
            key = (int(entry["offset"]), entry["dtype"], shape)
            tensor = self.views.get(key)
            if tensor is None:
                tensor = self.views[key] = self.region.view(*key)
            if self.device.type != "cpu":
                tensor = tensor.to(self.device)
        if entry.get("requires_grad") and not tensor.requires_grad and (tensor.is_floating_point() or tensor.is_complex()):
            tensor.requires_grad_(True)
        return tensor
