"""Spot checks, the candidate's side: every call's outputs of the last
timed batch, copied as each call returns (`SpotCall`, fed by
`Side.timed_batch`), and the frame that sends the one the worker drew to
the reference (`send_spot`), which judges it on its own copy of the
inputs (`fresh.FreshChecks.spot`).

Only the standard library, torch and the sibling pure modules are imported
here, so a backend may run this under another interpreter (its own venv).
"""

from __future__ import annotations

from typing import Any

from sage_engine.evaluation.child import correctness
from sage_engine.evaluation.protocol import wire

# The copies of one batch's outputs stay under this: past it only the last
# calls' are kept (`ring_slots`), and a call drawn before them is not judged.
SPOT_RING_BYTES = 512 << 20
NOT_KEPT = "outputs too large to keep every call's"


def ring_slots(output_bytes: int, calls: int) -> int:
    """How many of a batch's last calls have their outputs kept."""
    return max(1, min(calls, SPOT_RING_BYTES // max(1, output_bytes)))


class SpotCall:
    """Every call's outputs of the last timed batch, copied into buffers of
    the harness's as each call returns (outside the timed interval, before
    the next call's swaps): the kernel's own outputs are freed as before, so
    its allocations and caches are as they would be unchecked, and a kernel
    that writes every call into one buffer is judged on what each call
    left there. Which call is judged is drawn by the worker after the
    batch, from a secret this process never holds: no code here decides
    it, so none the candidate rebinds can. The inputs the call had are not
    taken from here either: the reference repeats the batch's swaps on its
    own copy."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.buffers: list[list[Any]] = []  # per slot, a buffer per tensor output (reused batch after batch)
        self.begin(0)

    def begin(self, calls: int) -> None:
        self.calls, self.slots = calls, 0
        self.kept: dict[int, list[Any]] = {}  # call -> its outputs (copies)
        self.odd = ""  # the class of a timed output that is neither a plain tensor nor a number

    def keep(self, call: int, out: Any) -> None:
        torch = self.torch
        outputs = correctness.as_output_list(out)
        plain = all(type(v) is torch.Tensor or v is None or type(v) in (bool, int, float) for v in outputs)
        if not plain:  # copying it would run its code outside the timer: not copied, and rejected after the batch
            self.odd = next(type(v) for v in outputs if type(v) is not torch.Tensor and v is not None).__qualname__
            return
        if not self.slots:
            size = sum(v.numel() * v.element_size() for v in outputs if type(v) is torch.Tensor)
            self.slots = ring_slots(size, self.calls)
        slot = call % self.slots
        while len(self.buffers) <= slot:
            self.buffers.append([])
        copies = []
        with torch.no_grad():
            for k, v in enumerate(outputs):
                if type(v) is not torch.Tensor:
                    copies.append(v)
                    continue
                held = self.buffers[slot]
                if k >= len(held) or held[k].shape != v.shape or held[k].dtype != v.dtype or held[k].device != v.device:
                    buffer = torch.empty_like(v, memory_format=torch.preserve_format) if v.layout == torch.strided else v.clone()
                    held[k:] = [buffer]
                if v.layout == torch.strided:
                    held[k].copy_(v)
                else:
                    held[k] = v.clone()
                copies.append(held[k])
        self.kept = {c: o for c, o in self.kept.items() if c % self.slots != slot}
        self.kept[call] = copies

    def chosen(self, call: int) -> list[Any] | None:
        """The outputs of `call` of the last batch, where they were kept."""
        return self.kept.get(call)


def send_spot(side: Any, call: int) -> None:
    """The outputs of the last batch's call `call` to the reference, in one frame."""
    timed = side.timed_case()
    outputs = side.spot.chosen(call)
    if outputs is None:
        kept = side.spot.kept
        why = NOT_KEPT if kept and call < side.spot.calls - side.spot.slots else f"call {call} not kept ({len(kept)} of the batch's were)"
        wire.write_frame(side.ch.data, {"case": timed.index, "trial": "spot", "skipped": why}, [])
        return
    side.sync()
    header: dict[str, Any] = {"case": timed.index, "trial": "spot", "call": call, "outputs": []}
    tensors = []
    for value in outputs:
        entry, tensor = wire.describe(value, side.torch)
        header["outputs"].append(entry)
        if tensor is not None:
            tensors.append(tensor)
    wire.write_frame(side.ch.data, header, tensors)
