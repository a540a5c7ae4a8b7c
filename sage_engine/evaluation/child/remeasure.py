"""The fresh-input re-measurement, both children's sides: samples of the
candidate timed on input sets it has never seen, new values in new memory
for every call, so no memo of earlier calls can answer them.

- The reference (`FreshSets`) makes each sample's input sets from secret
  seeds (`remake`) and places every set in a stretch of the shared file no
  earlier call used (new addresses in the candidate's process too), sending
  their headers in one frame; after the sample it judges the call the
  candidate kept (`judge`) against its own forward on that call's inputs.
- The candidate (`FreshRuns`) copies the sets into memory of its own outside
  any timed interval (`prepare`; held for the round, as the reference holds
  the sets it made), times one call per set (`batch`; each set read once right
  before its call, outside the timed interval, as the timed inputs are
  read before theirs in the other sample of the pair), copies every call's
  outputs as a timed batch's are, and sends the outputs of the call the
  worker drew after the sample (`send`).

Only the standard library, torch and the sibling pure modules are imported
here, so a backend may run this under another interpreter (its own venv).
"""

from __future__ import annotations

import secrets
from typing import Any

from sage_engine.evaluation.child import correctness
from sage_engine.evaluation.child.spot import NOT_KEPT, SpotCall, ring_slots
from sage_engine.evaluation.protocol import InputsShared, wire

TRIAL = "remeasure"


class FreshSets:
    """The reference's side: input sets made, placed, kept, and one call judged.
    `failure`: the side's exception for an ended evaluation (`side.Failure`,
    passed in: that module imports this one)."""

    def __init__(self, side: Any, failure: type[Exception]):
        self.side, self.failure = side, failure
        self.sets: list[list[Any]] = []
        self.pristine: list[list[Any]] = []  # the sets as made (a forward may change its inputs)
        self.made = 0  # samples made so far: each places its sets in slots of its own
        self.copies = Copies(side.torch)

    def command(self, verb: str, arg: str) -> str:
        if verb == "rep":  # the reference on the same sets: what new inputs cost the task itself
            churned = arg.endswith("-churned")
            return f"ok {timed_sets(self.side, self.sets, churned, self.copies.of(churned))!r}"
        if verb == "remeasure-make":
            return self.remake(int(arg))
        if verb == "remeasure-judge":
            return self.judge(int(arg))
        self.sets = self.pristine = []  # remeasure-end
        return "ok"

    def remake(self, n: int) -> str:
        side = self.side
        timed = side.timed_case()
        sender = side.sender
        for key in [key for key in sender.slots if isinstance(key, tuple) and key[0] == TRIAL]:
            del sender.slots[key]  # the last sample's: never written again
        self.made += 1
        placed, self.sets, headers = sender.placed, [], []
        for k in range(max(1, n)):
            seed = secrets.randbits(31)
            made = side.make_inputs(timed.index, timed.module, seed)
            header = sender.place(made, (TRIAL, self.made, k))
            headers.append(header if header is not None else {"fallback": "inputs that cannot be shared", "seed": seed})
            self.sets.append(side.on_device(made))  # a set built on the host is timed where the calls run
        # A forward that updates its inputs (inside a list too) changes the sets
        # it is timed on: the judged call's are kept as made.
        self.pristine = [[_deep_copy(side.torch, v) for v in made] for made in self.sets]
        if sender.placed != placed:
            side.emit.send(InputsShared(placed=sender.placed))  # the candidate maps this much more
        wire.write_frame(side.ch.inputs, {"case": timed.index, "trial": TRIAL, "sets": headers}, [])
        return "ok"

    def judge(self, call: int) -> str:
        """Call `call` of the last fresh-input sample (drawn by the worker),
        judged on the inputs that call had: the candidate's process chose neither."""
        side = self.side
        try:
            header = wire.read_header(side.ch.data)
            if header.get("trial") != TRIAL:
                raise wire.ProtocolError(f"expected the re-measurement's frame, got {header.get('trial')!r}")
            if header.get("call") != call or not 0 <= call < len(self.sets):
                raise wire.ProtocolError(f"a re-measurement frame for call {header.get('call')!r}, not the drawn {call}")
            try:
                inputs = [_deep_copy(side.torch, v) for v in self.pristine[call]]
                ref_out = side.reference_forward(side.timed_case().model, side.on_device(inputs))
            except self.failure:
                wire.skip_tensors(side.ch.data, header)
                return "ok skipped: the reference could not run those inputs"
            if "skipped" in header:
                # Only a call the harness could not keep (its outputs past the ring's bytes) may go unjudged.
                size = sum(v.numel() * v.element_size() for v in correctness.as_output_list(ref_out) if isinstance(v, side.torch.Tensor))
                if call >= len(self.sets) - ring_slots(size, len(self.sets)):
                    raise self.failure("rejected", f"the candidate's process did not send call {call}, which it kept", [])
                return "ok skipped: " + NOT_KEPT
            result, _ = side.judge.frame(header, ref_out, None, None)
        except self.failure as failure:
            return "bad " + wire.json_text({"status": getattr(failure, "status", "rejected"), "message": str(failure)})
        except wire.ProtocolError as exc:
            return "bad " + wire.json_text({"status": "rejected", "message": f"garbled frame ({exc})"})
        if result.ok:
            return "ok"
        return "bad " + wire.json_text({"status": "rejected", "message": f"call {call}: {result.message}"})


class FreshRuns:
    """The candidate's side: the sets mapped ahead, one call per set timed, one call kept."""

    def __init__(self, side: Any):
        self.side = side
        self.sets: list[list[Any]] = []
        self.copies = Copies(side.torch)
        self.spot = self.copies.fresh

    def command(self, verb: str, arg: str) -> str:
        if verb == "rep":  # `rep N remeasure` (fresh) or `rep N remeasure-churned`
            return f"ok {self.batch(churned=arg.endswith('-churned'))!r}"
        if verb == "remeasure-prepare":
            return self.prepare()
        if verb == "remeasure-send":
            return self.send(int(arg))
        self.sets = []  # remeasure-end
        return "ok"

    def prepare(self) -> str:
        side = self.side
        timed = side.timed_case()
        header = side.next_header()
        sets = header.get("sets")
        if header.get("trial") != TRIAL or not isinstance(sets, list) or not sets:
            raise wire.ProtocolError("expected the re-measurement's input sets")
        self.sets = []
        with side.torch.no_grad():
            for entry in sets:
                if not isinstance(entry, dict):
                    raise wire.ProtocolError("a re-measurement set that is not described")
                # Copied into this process's own memory, as the reference holds the
                # sets it made in its own: shared pages read slower for some
                # kernels (a fused C++ SwiGLU read 2-3x), which is no cheat.
                self.sets.append([_own(side.torch, v) for v in side.header_values(timed.module, entry)])
        side.sync()
        return "ok"

    def batch(self, churned: bool) -> float:
        return timed_sets(self.side, self.sets, churned, self.copies.of(churned))

    def send(self, call: int) -> str:
        """Call `call`'s outputs (drawn by the worker) to the reference, which judges them on that call's inputs."""
        side = self.side
        side.check_patches("timing ModelNew.forward")
        outputs = self.spot.chosen(call)
        header: dict[str, Any] = {"case": side.timed_case().index, "trial": TRIAL, "call": call, "outputs": []}
        if outputs is None:
            header["skipped"] = NOT_KEPT
            outputs = []
        tensors = []
        for value in correctness.as_output_list(outputs):
            entry, tensor = wire.describe(value, side.torch)
            header["outputs"].append(entry)
            if tensor is not None:
                tensors.append(tensor)
        wire.write_frame(side.ch.data, header, tensors)
        self.spot.begin(0)
        return "ok"


def handler(side: Any, failure: type[Exception]) -> FreshSets | FreshRuns:
    """The side's part of the re-measurement (made on its first command)."""
    found = side.__dict__.get("_remeasure")
    if found is None:
        found = side.__dict__["_remeasure"] = FreshSets(side, failure) if side.role == "reference" else FreshRuns(side)
    return found


class Copies:
    """Where each call's outputs are copied between calls, as in a timed
    batch: the fresh sample's copies are the ones a drawn call is judged on;
    the churned sample's are made and never read, so both kinds of sample,
    on both sides, spend alike between calls and the worker's clock compares
    like with like (copying only in fresh samples read a memory-bound kernel
    as 4-7x slower on new inputs by that clock)."""

    def __init__(self, torch: Any) -> None:
        self.fresh, self.churned = SpotCall(torch), SpotCall(torch)

    def of(self, churned: bool) -> SpotCall:
        return self.churned if churned else self.fresh


def timed_sets(side: Any, sets: list[list[Any]], churned: bool, spot: SpotCall | None = None) -> float:
    """Seconds per call of one call on each set (new values in memory no
    call had), by the side's timer; `spot` keeps one call drawn. `churned`:
    as many calls on the timed inputs, changed between calls as when timed."""
    torch, timed = side.torch, side.timed_case()
    model = timed.model
    churn = side.churn if churned and side.churn is not None and side.churn.active else None
    if not sets:
        raise wire.ProtocolError("a re-measurement sample before its input sets")
    keep = spot
    if keep is not None:
        keep.begin(len(sets))
    if churn is not None:
        # Swaps as a timed batch makes them; no call of this sample is judged,
        # so none needs repeating on the reference's copy (the last sample, after every spot check).
        churn.plan(secrets.randbits(31), len(sets))
    last: list[Any] = [None]
    now: list[Any] = [None]

    def before(i: int) -> None:
        if i and keep is not None:
            keep.keep(i - 1, last[0])
        last[0] = None
        if churn is not None:
            churn(i)
        now[0] = timed.inputs if churned else sets[i]
        # Read once either way: in the caches alike, the same work outside
        # the timer, and no memory taken from what the call's outputs get.
        for v in now[0]:
            if wire._type(v) is torch.Tensor and v.numel():
                v.sum()

    def call(i: int) -> None:
        last[0] = model(*now[0])

    with torch.no_grad():
        seconds = side.timer(call, len(sets), before)
    side.sync()
    if keep is not None:
        keep.keep(len(sets) - 1, last[0])
    last[0] = now[0] = None
    return float(seconds)


def _own(torch: Any, value: Any) -> Any:
    """A copy in this process's own memory (a tensor), or the value itself."""
    if wire._type(value) is not torch.Tensor:
        return value
    return value.detach().clone().requires_grad_(value.requires_grad)


def _deep_copy(torch: Any, value: Any) -> Any:
    """A copy of a value whose tensors (inside lists and tuples too) are copies."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_deep_copy(torch, v) for v in value)
    return value
