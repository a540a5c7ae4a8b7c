"""Spot checks, the candidate's side: one call drawn from inside each timed
batch (`SpotCall`, kept by `Side.timed_batch`) and the frame that sends it
to the reference (`send_spot`), which judges it (`fresh.FreshChecks.spot`).

Only the standard library, torch and the sibling pure modules are imported
here, so a backend may run this under another interpreter (its own venv).
"""

from __future__ import annotations

import secrets
from typing import Any

from sage_engine.evaluation.child import correctness, guards
from sage_engine.evaluation.protocol import wire


class SpotCall:
    """One call of the last timed batch, drawn uniformly among its calls
    (reservoir sampling): after each call returns, it replaces the one held
    with probability 1/(calls so far), from the kernel's random source, so no
    call can know beforehand whether it is the one kept. Nothing is copied:
    the kept call's outputs are held as they are (a later call allocates its
    own) and its inputs are the timed inputs with the later calls' swaps
    undone (`changes.Churn.rewind`), so keeping one disturbs no call. The
    worker asks for it after the batch (`spot`): a candidate that computes
    only the calls a check could see is judged on one it did not choose."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.seen = 0
        self.call: int | None = None
        self.outputs: list[Any] = []
        self.last: list[Any] = []  # the last call's outputs
        self.storages: list[set[int]] = []  # per call, the memory its tensor outputs live in

    def offer(self, out: Any, *, last: bool = False) -> None:
        outputs = correctness.as_output_list(out)
        self.storages.append({p for p in map(guards.storage_ptr, outputs) if p is not None})
        if last:  # held after the batch only: during it, each call finds the output before it freed
            self.last = outputs
        self.seen += 1
        if not secrets.randbelow(self.seen):
            self.call, self.outputs = self.seen - 1, outputs

    def chosen(self) -> tuple[int, list[Any]] | None:
        """(call, outputs) to judge: the kept call, or the last one where a
        later call wrote into the kept call's outputs (a kernel that reuses
        its output buffer: only the last call's values are still there)."""
        if self.call is None:
            return None
        kept = self.storages[self.call]
        if any(kept & later for later in self.storages[self.call + 1 :]):
            return self.seen - 1, self.last
        return self.call, self.outputs


def send_spot(side: Any) -> None:
    """The last batch's drawn call (`SpotCall`) to the reference: the
    inputs it had (the later calls' swaps undone for the moment), then
    its outputs, in one frame; a frame that says why not where none was
    drawn or its inputs cannot cross."""
    spot, torch, timed = side.spot, side.torch, side.timed_case()
    chosen = spot.chosen()
    if chosen is None or not all(wire.shareable(v, torch) for v in timed.inputs):
        why = "no call drawn" if chosen is None else "inputs that cannot cross"
        wire.write_frame(side.ch.data, {"case": timed.index, "trial": "spot", "skipped": why}, [])
        return
    # An output that is an input's memory is judged too: rewound, it holds what it held after that call.
    call, outputs = chosen
    side.sync()
    redo = side.churn.rewind(call)
    try:
        header: dict[str, Any] = {"case": timed.index, "trial": "spot", "call": call, "spot_inputs": [], "outputs": []}
        tensors = []
        for key, values in (("spot_inputs", timed.inputs), ("outputs", outputs)):
            for value in values:
                entry, tensor = wire.describe(value, torch)
                header[key].append(entry)
                if tensor is not None:
                    tensors.append(tensor)
        wire.write_frame(side.ch.data, header, tensors)
    finally:
        redo()
        # Freed here, not when the next batch begins: the kept outputs' memory
        # would otherwise go back inside the next sample's command, CPU only the
        # candidate's side spends there (the clock check compares the two sides').
        spot.reset()
