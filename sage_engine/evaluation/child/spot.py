"""Spot checks, the candidate's side: every call's outputs of the last
timed batch, held (`SpotCall`, fed by `Side.timed_batch`), and the frame
that sends the one the worker drew to the reference (`send_spot`), which
judges it on its own copy of the inputs (`fresh.FreshChecks.spot`).

Only the standard library, torch and the sibling pure modules are imported
here, so a backend may run this under another interpreter (its own venv).
"""

from __future__ import annotations

from typing import Any

from sage_engine.evaluation.child import correctness, guards
from sage_engine.evaluation.protocol import wire


class SpotCall:
    """Every call's outputs of the last timed batch, held as they are
    (nothing copied; a later call allocates its own). Which one is judged
    is drawn by the worker after the batch ran, from a secret this process
    never holds: no code here decides it, so none the candidate rebinds
    can. The inputs the call had are not taken from here either: the
    reference repeats the batch's swaps on its own copy."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.outputs: list[list[Any]] = []
        self.storages: list[set[int]] = []  # per call, the memory its tensor outputs live in

    @property
    def seen(self) -> int:
        return len(self.outputs)

    def offer(self, *outs: Any) -> None:
        """Calls' outputs, in order."""
        for out in outs:
            outputs = correctness.as_output_list(out)
            self.storages.append({p for p in map(guards.storage_ptr, outputs) if p is not None})
            self.outputs.append(outputs)

    def chosen(self, call: int) -> tuple[int, list[Any]] | None:
        """(call, outputs) to judge for the worker's `call`: that one, or the
        last one where a later call wrote into its outputs (a kernel that
        reuses its output buffer: only the last call's values are still there)."""
        if not 0 <= call < self.seen:
            return None
        kept = self.storages[call]
        if any(kept & later for later in self.storages[call + 1 :]):
            return self.seen - 1, self.outputs[-1]
        return call, self.outputs[call]


def send_spot(side: Any, call: int) -> None:
    """The outputs of the last batch's call `call` (or of the call that
    overwrote them, `SpotCall.chosen`) to the reference, in one frame."""
    timed = side.timed_case()
    chosen = side.spot.chosen(call)
    if chosen is None:
        wire.write_frame(side.ch.data, {"case": timed.index, "trial": "spot", "skipped": f"no call {call} in the batch"}, [])
        return
    judged, outputs = chosen
    side.sync()
    header: dict[str, Any] = {"case": timed.index, "trial": "spot", "call": judged, "outputs": []}
    tensors = []
    for value in outputs:
        entry, tensor = wire.describe(value, side.torch)
        header["outputs"].append(entry)
        if tensor is not None:
            tensors.append(tensor)
    wire.write_frame(side.ch.data, header, tensors)
