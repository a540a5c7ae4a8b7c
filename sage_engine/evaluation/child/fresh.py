"""The reference's side of the checks made while timing: fresh inputs from a
seed the candidate never learns, whose output is checked (`fresh`); the
same inputs with a few values changed (`stale`), where an output that is
still the answer to the inputs before is a stored answer; the verdict
on the candidate's output for either (`check`); and the verdict on one call
drawn from inside the candidate's last timed batch, after it ran (`spot`)."""

from __future__ import annotations

import random
import secrets
from typing import Any

from sage_engine.evaluation.protocol import wire
from sage_engine.evaluation.child import changes
from sage_engine.evaluation.child.side import Failure


class FreshChecks:
    def __init__(self, side: Any):
        self.side = side
        self.fresh_in: list[Any] | None = None  # the last checked inputs (a stale check changes a few of their values)
        self.fresh_out: list[Any] | None = None  # the reference's output for them (None: it could not run them)
        self.stale_prev: list[Any] | None = None  # the output for the inputs before, while a stale check is pending

    def command(self, verb: str, arg: str) -> str:
        if verb == "fresh":
            return self.fresh(int(arg))
        if verb == "stale":
            return self.stale(int(arg))
        if verb == "spot":
            return self.spot()
        return self.check()

    def fresh(self, seed: int) -> str:
        side = self.side
        timed = side.timed_case()
        self.fresh_in = side.make_inputs(timed.index, timed.module, seed)
        side.send_inputs(self.fresh_in, seed, case=timed.index, trial="fresh")
        self.fresh_out, self.stale_prev = side.reference_forward(timed.model, side.on_device(self.fresh_in)), None
        return "ok"

    def stale(self, seed: int) -> str:
        """The last fresh inputs with a few values changed (taken from another
        valid input set): a kernel that recognises inputs by a sample of their
        values answers these with what it stored for the last ones. Inputs
        that do not cross as plain tensors (the candidate makes its own from
        the seed) get a plain fresh check instead."""
        side = self.side
        if self.fresh_in is None:
            raise wire.ProtocolError("`stale` before `fresh`")
        timed = side.timed_case()
        other = side.make_inputs(timed.index, timed.module, seed)
        changed = None
        if all(wire.shareable(v, side.torch) for v in self.fresh_in):
            rng = random.Random(secrets.randbits(64))
            changed = changes.with_changes(self.fresh_in, other, side.req.verdict.stale_changes, rng)
        if changed is None:
            return self.fresh(seed)
        side.send_inputs(changed, seed, case=timed.index, trial="fresh")
        self.stale_prev, self.fresh_in = self.fresh_out, changed
        try:
            self.fresh_out = side.reference_forward(timed.model, side.on_device(changed))
        except Failure:
            self.fresh_out = None  # inputs the reference itself refuses: no verdict from them
        return "ok"

    def check(self) -> str:
        """The candidate's output for the last fresh (or stale-check) inputs, judged."""
        try:
            side = self.side
            header = wire.read_header(side.ch.data)
            if self.fresh_out is None:
                wire.skip_tensors(side.ch.data, header)
                return "ok skipped: the reference could not run those inputs"
            result, cand = side.judge.frame(header, self.fresh_out, None, None)
        except Failure as failure:
            return _bad(failure.status, failure.message)
        except wire.ProtocolError as exc:
            return _bad("rejected", f"garbled output frame ({exc})")
        if result.ok:
            return "ok"
        if self.stale_prev is None:
            return _bad("rejected", result.message)
        if side.judge.same_as(self.stale_prev, cand or []):
            n = side.req.verdict.stale_changes
            return _bad(
                "rejected",
                f"returned a stored answer for new input values: after {n} value(s) of each input changed, its "
                f"output still matched the answer for the inputs before ({result.message})",
            )
        # Wrong for these inputs, and not the old answer: the changed values may
        # break a property the task's inputs have (symmetry, a normalised row).
        return "ok inconclusive: " + result.message[:300]

    def spot(self) -> str:
        """The candidate's drawn call of its last timed batch (`SpotCall`):
        the reference runs the inputs that call had and judges its outputs.
        Not judged where the task's forward updates its inputs (the inputs
        after a call are not the ones it had) or the reference cannot run them."""
        side = self.side
        try:
            header = wire.read_header(side.ch.data)
            if header.get("case") != side.timed_case().index or header.get("trial") != "spot":
                raise wire.ProtocolError(f"expected the spot frame, got {header.get('case')!r}/{header.get('trial')!r}")
            if "skipped" in header:
                return f"ok skipped: {str(header['skipped'])[:100]}"
            entries = header.get("spot_inputs")
            if not isinstance(entries, list):
                raise wire.ProtocolError("a spot frame without its inputs")
            inputs = [_value(side, entry) for entry in entries]
            if side.judge.reference_updates:
                wire.skip_tensors(side.ch.data, header)
                return "ok skipped: the task's forward updates its inputs"
            try:
                ref_out = side.reference_forward(side.timed_case().model, side.on_device(inputs))
            except Failure:
                wire.skip_tensors(side.ch.data, header)
                return "ok skipped: the reference could not run those inputs"
            result, _ = side.judge.frame(header, ref_out, None, None)
        except Failure as failure:
            return _bad(failure.status, failure.message)
        except wire.ProtocolError as exc:
            return _bad("rejected", f"garbled spot frame ({exc})")
        if result.ok:
            return "ok"
        return _bad("rejected", f"call {header.get('call')}: {result.message}")


def _value(side: Any, entry: Any) -> Any:
    """One input of a spot frame: a tensor read from the stream, or a plain value."""
    if not isinstance(entry, dict):
        raise wire.ProtocolError("a spot input that is not described")
    if entry.get("kind") == "value":
        return entry.get("value")
    if entry.get("kind") != "tensor":
        raise wire.ProtocolError(f"a spot input of kind {entry.get('kind')!r}")
    return wire.read_tensor(side.ch.data, entry, side.torch)


def _bad(status: str, message: str) -> str:
    """The reply for a check the candidate failed."""
    return "bad " + wire.json_text({"status": status, "message": message})
