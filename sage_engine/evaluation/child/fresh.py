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
from sage_engine.evaluation.child.spot import NOT_KEPT, ring_slots
from sage_engine.evaluation.child.side import Failure


class FreshChecks:
    def __init__(self, side: Any):
        self.side = side
        self.fresh_in: list[Any] | None = None  # the last checked inputs (a stale check changes a few of their values)
        self.fresh_out: list[Any] | None = None  # the reference's output for them (None: it could not run them)
        self.stale_prev: list[Any] | None = None  # the output for the inputs before, while a stale check is pending
        # The candidate's timed inputs as they are, rebuilt here: the values the
        # reference sent it, changed by the same swaps its batches made (`changes.Churn.run`).
        self.mirror: list[Any] | None = None
        # The last check's outputs (the reference's and the candidate's as
        # read), held until the next check: freed at once, the reference's
        # next timed call got their memory back from the heap still in the
        # caches, and the candidate's did not (docs/evaluation.md, "fair to
        # both sides": 12 memory-bound references against themselves read a
        # median 0.86-0.93x with the checks between rounds, 0.97-1.00x held).
        self.held: Any = None
        self.mirror_churn: Any = None

    def command(self, verb: str, arg: str) -> str:
        if verb == "fresh":
            return self.fresh(int(arg))
        if verb == "stale":
            return self.stale(int(arg))
        if verb == "spot":
            return self.spot(arg)
        return self.check()

    def output_bytes(self) -> int:
        """The bytes of one call's outputs, by the reference's own (their sizes do not depend on the values)."""
        try:
            return _output_bytes(self.side.reference_forward(self.side.timed_case().model, list(self.mirror or [])), self.side.torch)
        except Failure:
            return 0

    def start_mirror(self) -> None:
        """The candidate's timed inputs as they are when timing starts: the last trial's, as sent.
        This side's own churn takes the positions found on them (the same
        values): one search for hand-set values a side, as the candidate's makes."""
        side = self.side
        if side.timed is not None and side.req.timing is not None:
            self.set_mirror(side.timed.inputs)
            if side.churn is None:
                side.churn = changes.Churn(side.torch, side.timed.inputs, side.req.verdict.churn_swaps, like=self.mirror_churn)

    def set_mirror(self, values: list[Any]) -> None:
        """The candidate's timed inputs now hold `values`: laid out as its copy
        is (contiguous where they crossed, as made where it made its own), in
        the same tensors where the layout did not change, as the candidate's are."""
        torch = self.side.torch
        crossed = all(wire.shareable(v, torch) for v in values)
        old = self.mirror
        if old is not None and _same_layout(old, values, torch):
            with torch.no_grad():
                for m, v in zip(old, values):
                    if type(m) is torch.Tensor and type(v) is torch.Tensor:
                        m.copy_(v)
            self.mirror = [m if type(m) is torch.Tensor else v for m, v in zip(old, values)]
            return
        fmt = torch.contiguous_format if crossed else torch.preserve_format
        self.mirror = [_copy(v, fmt, torch) if type(v) is torch.Tensor else v for v in values]
        self.mirror_churn = changes.Churn(torch, self.mirror, self.side.req.verdict.churn_swaps)

    def fresh(self, seed: int) -> str:
        side = self.side
        timed = side.timed_case()
        self.fresh_in = side.make_inputs(timed.index, timed.module, seed)
        side.send_inputs(self.fresh_in, seed, case=timed.index, trial="fresh")
        self.set_mirror(side.on_device(self.fresh_in))
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
        self.set_mirror(side.on_device(changed))
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
            self.held = cand
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

    def spot(self, arg: str) -> str:
        """A call of the candidate's last timed batch, drawn by the worker
        (`call`), judged on this process's own copy of the candidate's inputs
        as that call had them: the batches it ran since the last spot check
        (`log`: `calls:seed:hold` each, the last one the judged batch) are
        repeated here on the copy. Nothing of the inputs is taken
        from the candidate's process, so a churn it switched off, or inputs
        it pointed at other memory, make its outputs wrong here. Skipped
        only for reasons of the task's own: its forward updates its inputs,
        the reference cannot run them, or nothing in them can be swapped."""
        side = self.side
        self.held = None
        try:
            call, batches = _spot_args(arg)
            header = wire.read_header(side.ch.data)
            if header.get("case") != side.timed_case().index or header.get("trial") != "spot":
                raise wire.ProtocolError(f"expected the spot frame, got {header.get('case')!r}/{header.get('trial')!r}")
            if self.mirror is None:
                self.start_mirror()
            churn = self.mirror_churn
            for calls, seed, hold in batches[:-1]:
                churn.run(seed, calls, hold)
            calls, seed, hold = batches[-1]
            if not churn.active:
                wire.skip_tensors(side.ch.data, header)
                return "ok skipped: nothing in the task's inputs can be swapped"
            churn.plan(seed, calls, hold)
            if "skipped" in header:
                skipped = str(header["skipped"])
                allowed = skipped == NOT_KEPT and call < calls - ring_slots(self.output_bytes(), calls)
                churn.run(seed, calls, hold)
                if allowed:
                    return "ok skipped: " + NOT_KEPT
                return _bad(
                    "rejected",
                    f"the candidate's process skipped the check ({skipped[:100]}), "
                    "though the reference's inputs were plain tensors it swapped: a check the kernel can switch off is not optional",
                )
            judged = header.get("call")
            if judged != call:
                raise wire.ProtocolError(f"the spot frame is of call {judged!r}, drawn was {call} of {calls}")
            for i in range(judged + 1):
                churn(i)
            try:
                if side.judge.reference_updates:
                    wire.skip_tensors(side.ch.data, header)
                    return "ok skipped: the task's forward updates its inputs"
                try:
                    ref_out = side.reference_forward(side.timed_case().model, list(self.mirror or []))
                except Failure:
                    wire.skip_tensors(side.ch.data, header)
                    return "ok skipped: the reference could not run those inputs"
                result, cand_out = side.judge.frame(header, ref_out, None, None)
                self.held = (ref_out, cand_out)
            finally:
                for i in range(judged + 1, calls):
                    churn(i)
        except Failure as failure:
            return _bad(failure.status, failure.message)
        except (wire.ProtocolError, ValueError) as exc:
            return _bad("rejected", f"garbled spot frame ({exc})")
        if result.ok:
            return "ok"
        return _bad("rejected", f"call {judged}: {result.message}")


def _output_bytes(outputs: list[Any], torch: Any) -> int:
    return sum(v.numel() * v.element_size() for v in outputs if type(v) is torch.Tensor)


def _spot_args(arg: str) -> tuple[int, list[tuple[int, int, bool]]]:
    """`CALL CALLS:SEED:HOLD,...` of a `spot` command."""
    words = arg.split()
    batches = []
    for item in words[1].split(","):
        calls, seed, hold = item.split(":")
        batches.append((int(calls), int(seed), hold == "1"))
    return int(words[0]), batches


def _copy(t: Any, fmt: Any, torch: Any) -> Any:
    """A copy of a tensor laid out as the candidate's copy is (a sparse one as it is)."""
    return t.detach().clone(memory_format=fmt) if t.layout == torch.strided else t.detach().clone()


def _same_layout(a: list[Any], b: list[Any], torch: Any) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if (type(x) is torch.Tensor) != (type(y) is torch.Tensor):
            return False
        if type(x) is torch.Tensor and (x.shape != y.shape or x.dtype != y.dtype or x.device != y.device):
            return False
    return True


def _bad(status: str, message: str) -> str:
    """The reply for a check the candidate failed."""
    return "bad " + wire.json_text({"status": status, "message": message})
