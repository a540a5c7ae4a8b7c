"""The reference process of one evaluation.

Runs the task's `Model` on seeded inputs, reads the candidate process's
value frame for the same case and trial, and decides: the comparison
(`correctness.compare_outputs`), the dynamic anti-cheat checks (aliased or
mutated inputs, cached outputs, outputs that are not plain tensors) and,
during timing, the check on inputs the candidate has never seen. This
process never loads the candidate: the candidate cannot patch the
reference, slow it down from inside, or make the comparison lie.
"""

from __future__ import annotations

import time
from typing import Any

from sage_engine.evaluation.common import diagnostics
from sage_engine.evaluation.protocol import wire
from sage_engine.evaluation.child import changes, correctness, guards
from sage_engine.evaluation.child.fresh import FreshChecks
from sage_engine.evaluation.child.inputs import InputSender
from sage_engine.evaluation.child.judge import FrameJudge
from sage_engine.evaluation.child.side import Channels, Emitter, Failure, Side, input_bytes
from sage_engine.evaluation.protocol import (
    CaseEvent,
    CaseResult,
    InputsShared,
    Judgement,
    Lost,
    ReferenceDone,
    Request,
    Variant,
    VariantRow,
    Verdict,
)


class ReferenceSide(Side):
    role = "reference"

    def __init__(self, request: Request, emit: Emitter, channels: Channels):
        super().__init__(request, emit, channels)
        self.sizes: list[int] = []
        self.sender = InputSender(self.torch, channels.shared, channels.inputs)
        self.host_only: set[int] = set()  # cases whose inputs cannot be made on the device
        self.judgement = Judgement()
        self.judge = FrameJudge(
            self.torch,
            channels.data,
            mode=request.tolerance_mode,
            override=self.task.tolerance,
            factor=request.verdict.small_output_factor,
            judgement=self.judgement,
        )
        self.checks = FreshChecks(self)
        self.declared_at = ""  # the first declared case's input shapes, as messages name them

    def main(self) -> None:
        start = time.perf_counter()
        try:
            for index, case in enumerate(self.task.cases):
                if not self.run_case(index, case):
                    return
            first = len(self.task.cases)
            for offset, variant in enumerate(self.task.variants):
                if not self.run_variant(first + offset, variant):
                    return
            self.sender.end()
        except Failure as failure:
            self.emit.send(failure.event())
            return
        except wire.ChannelClosed as exc:
            self.emit.send(Lost(message=str(exc)))
            return
        except wire.ProtocolError as exc:
            # Only code in the candidate process can garble what it sends.
            self.emit.send(
                Failure(
                    "rejected",
                    f"the candidate's outputs arrived garbled ({exc}): something in the candidate process wrote to the harness's channels",
                    [diagnostics.diagnostic("cheat", f"garbled output frames: {exc}")],
                ).event()
            )
            return
        from sage_engine.evaluation.child.device import device_name

        self.emit.send(
            ReferenceDone(
                chosen=self.timed.index if self.timed else 0,
                sizes=self.sizes,
                device_name=device_name(self.device.type) if self.device.type != "cpu" else None,
                slowest_call=self.slowest,
                inputs=self.inputs_report(),
                judgement=self.judgement,
                phases={"reference_correctness": time.perf_counter() - start, "reference_calls": self.call_s},
            )
        )
        self.checks.start_mirror()  # before this side's own timed calls swap its inputs
        self.serve()

    def reference_forward(self, model: Any, values: list[Any]) -> list[Any]:
        try:
            with self.torch.no_grad():
                return correctness.as_output_list(self.forward(model, values))
        except BaseException as exc:
            raise self.reference_failure("the reference's forward failed", exc)

    def build(self, row: dict[str, Any], seed: int) -> tuple[Any, Any]:
        """The task's module with a case row's values, and its Model, made from `seed`."""
        module = self.load_reference(row)
        # Seeded: the two processes have drawn different numbers before (inputs, earlier cases).
        self.reseed(seed)
        init = self.task_call("get_init_inputs()", module.get_init_inputs)
        self.reseed(seed)
        model = self.task_call("constructor", module.Model, *init)
        if isinstance(model, self.torch.nn.Module):
            model = model.to(self.device)
        return module, model

    def run_case(self, index: int, case: dict[str, Any]) -> bool:
        seed = self.req.seed  # this evaluation's: the candidate's author cannot know it
        module, model = self.build(case, seed)
        prev: tuple[list[Any], list[Any]] | None = None
        first_out: list[Any] | None = None
        constant = True
        values: list[Any] = []
        made = self.make_inputs(index, module, seed)
        self.send_inputs(made, seed, case=index, trial=0, row=case, model_seed=seed)
        for trial in range(self.trials):
            values = self.on_device(made)
            pristine = self.clone(values)
            ref_out = self.reference_forward(model, values)
            if first_out is None:
                first_out = ref_out
            elif constant:
                constant = self.judge.same_as(first_out, ref_out)
            # Pipelined: the next trial's inputs are made while the candidate
            # process computes this one, and sent before this one is compared.
            next_seed = seed + trial + 1
            made = self.make_inputs(index, module, next_seed) if trial + 1 < self.trials else []
            header = self.read_frame(index, trial)
            observed = self.changed_by_candidate(index, pristine)
            send_next = (
                (lambda m=made, s=next_seed, t=trial + 1: self.send_inputs(m, s, case=index, trial=t)) if trial + 1 < self.trials else None
            )
            result, cand_out = self.judge.frame(header, ref_out, values, pristine, then=send_next, observed=observed)
            if not result.ok and prev is not None and cand_out is not None:
                self.judge.check_cached(prev, ref_out, cand_out)
            self.emit.send(
                CaseEvent(case_result=CaseResult(case, trial, result.ok, result.max_abs_error, result.max_rel_error, result.message))
            )
            if not result.ok:
                self.emit.send(Verdict(status="incorrect", message=result.message))
                return False
            prev = (ref_out, cand_out or [])
        if constant and self.trials > 1 and not self.judgement.constant:
            self.judgement.constant = (
                f"the reference's output was the same for all {self.trials} input sets of case {index + 1} (within tolerance)"
            )
        self.declared_at = self.declared_at or changes.shapes(values)
        self.sizes.append(input_bytes(self.torch, values))
        self.keep_largest(index, module, model, values)
        return True

    def run_variant(self, index: int, variant: Variant) -> bool:
        """One shape variant: the first of its rows the reference runs, one
        trial; none that runs drops it, and says why."""
        seed = self.req.seed + 7919 * (index + 1)
        reasons: list[str] = []
        for row in variant.rows:
            try:
                module, model = self.build(row, seed)
                made = self.make_inputs(index, module, seed)
                if variant.scale:
                    made, unscaled = large_values(self, index, module, seed, made, variant.scale)
                    if unscaled:
                        reasons.append(unscaled)
                        break
                sent = self.clone(made)  # as made: a reference that updates its inputs changes `made` itself
                values = self.on_device(made)
                pristine = self.clone(values)
                ref_out = self.reference_forward(model, values)
            except Failure as failure:
                reasons.append(f"{row}: {failure.message}")
                continue
            if variant.scale:
                unfit = correctness.unfit_at_large_values(
                    model, values, ref_out, mode=self.req.tolerance_mode, override=self.task.tolerance
                )
                if unfit:
                    reasons.append(unfit)
                    continue
            return self.judge_variant(index, variant, row, sent, values, pristine, ref_out, seed)
        self.judgement.variants.append(VariantRow(variant.name, "dropped", reason="; ".join(reasons)[:600] or "no sizes to vary"))
        return True

    def judge_variant(
        self,
        index: int,
        variant: Variant,
        row: dict[str, Any],
        sent: list[Any],
        values: list[Any],
        pristine: list[Any],
        ref_out: list[Any],
        seed: int,
    ) -> bool:
        """`sent`: the inputs as made (the candidate's copy); `values`, `pristine`:
        the reference's on the device after and before its forward."""
        at = changes.shapes(pristine) + (f" with inputs x{variant.scale:g}" if variant.scale else "")
        self.send_inputs(sent, seed, case=index, trial=0, row=row, variant=variant.name, at=at, model_seed=seed)
        header = self.read_frame(index, 0)
        observed = self.changed_by_candidate(index, pristine)
        result, _ = self.judge.frame(header, ref_out, values, pristine, observed=observed, scaled_inputs=variant.scale is not None)
        message = result.message
        if not result.ok:
            message = changes.failed_at(self.declared_at, at, variant.name, result.message, "wrong")
        self.emit.send(
            CaseEvent(case_result=CaseResult(row, 0, result.ok, result.max_abs_error, result.max_rel_error, message, variant=variant.name))
        )
        self.judgement.variants.append(VariantRow(variant.name, "passed" if result.ok else "failed", at))
        if not result.ok:
            self.emit.send(Verdict(status="incorrect", message=message, judgement=Judgement(variants=list(self.judgement.variants))))
        return result.ok

    def read_frame(self, index: int, trial: Any) -> dict[str, Any]:
        header = wire.read_header(self.ch.data)
        if header.get("case") != index or header.get("trial") != trial:
            raise wire.ProtocolError(
                f"expected the frame of case {index} trial {trial}, got {header.get('case')!r}/{header.get('trial')!r}"
            )
        self.note_transport(header)
        return header

    def make_inputs(self, case: int, module: Any, seed: int) -> list[Any]:
        """A trial's inputs, made on the device where the task's builder allows
        it (the device's own generator: no host build, no copy up), else on the host."""
        if self.device.type == "cpu" or not self.req.inputs_on_device or case in self.host_only:
            return self.host_inputs(module, seed)
        self.reseed(seed)
        try:
            with self.torch.no_grad(), self.torch.device(self.device):
                made = list(module.get_inputs())
        except Exception:  # noqa: BLE001 - a builder that needs the host (numpy, a sparse layout): build it there
            made = None
        if made is None or not all(wire.shareable(v, self.torch) for v in made):
            self.host_only.add(case)  # and the candidate builds the same from the seed where they cannot cross
            return self.host_inputs(module, seed)
        return made

    def send_inputs(self, made: list[Any], seed: int, *, case: int, trial: Any, **extra: Any) -> None:
        """The candidate's copy of a trial's inputs, into shared memory (`child/inputs.py`)."""
        placed = self.sender.placed
        self.sender.send(made, seed=seed, case=case, trial=trial, **extra)
        if self.sender.placed != placed:
            # The candidate maps this much shared memory beyond its memory cap: the worker allows it.
            self.emit.send(InputsShared(placed=self.sender.placed))

    def note_transport(self, header: dict[str, Any]) -> None:
        """The candidate says whether the device inputs' IPC handles opened: host copies stop, or go on."""
        if header.get("inputs") in ("ipc", "host"):
            self.sender.ipc_open = header["inputs"] == "ipc"

    def changed_by_candidate(self, case: int, pristine: list[Any]) -> list[int]:
        """Inputs the candidate changed, seen in its copy where the reference
        can see it (not taken from the candidate's word)."""
        copy = self.sender.candidate_copy(case, self.device)
        return guards.mutated([p if c is not None else None for p, c in zip(pristine, copy)], copy)

    def inputs_report(self) -> dict[str, Any]:
        s = self.sender
        via = "cuda ipc" if s.ipc_open else "shared memory"
        return {
            "via": via,
            "shared_bytes": s.shared_bytes,
            "pipe_bytes": s.pipe_bytes,
            "on_device": self.device.type != "cpu" and len(self.host_only) < len(self.task.cases),
        }

    # -- timing commands

    def command(self, verb: str, arg: str) -> str:
        if verb in ("fresh", "stale", "check", "spot"):
            return self.checks.command(verb, arg)
        return super().command(verb, arg)


def large_values(side: ReferenceSide, index: int, module: Any, seed: int, made: list[Any], scale: float) -> tuple[list[Any], str]:
    """A variant's inputs at large values: the task's builder run again on
    the same seed with its floating draws scaled (`changes.large_values`);
    with why not where there are none."""
    if not all(wire.shareable(v, side.torch) for v in made):
        return made, "its inputs cannot cross to the candidate, so they cannot be scaled"
    with changes.scaled_draws(side.torch, scale):
        drawn = side.make_inputs(index, module, seed)
    large = changes.large_values(made, drawn)
    if large is None:
        return made, "the task draws no floating input through torch's random functions, so none can be scaled"
    return large, ""
