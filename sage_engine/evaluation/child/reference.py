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
from typing import Any, Callable

from sage_engine.evaluation import diagnostics, wire
from sage_engine.evaluation.child import correctness, guards
from sage_engine.evaluation.child.side import Failure, Side
from sage_engine.evaluation.child.inputs import InputSender
from sage_engine.evaluation.protocol import CaseEvent, CaseRow, InputsShared, Lost, ReferenceDone, Request, Verdict


def _cheat(message: str, detail: str) -> Failure:
    return Failure("rejected", message, [diagnostics.diagnostic("cheat", detail)])


class ReferenceSide(Side):
    role = "reference"

    def __init__(self, request: Request, emit, channels):
        super().__init__(request, emit, channels)
        self.mode = request.tolerance_mode
        self.override = self.task.tolerance
        self.sizes: list[int] = []
        self.fresh_out: list[Any] | None = None
        self.sender = InputSender(self.torch, channels.shared, channels.inputs)
        self.host_only: set[int] = set()  # cases whose inputs cannot be made on the device

    def main(self) -> None:
        start = time.perf_counter()
        try:
            for index, case in enumerate(self.task.cases):
                if not self.run_case(index, case):
                    return
        except Failure as failure:
            self.emit.send(failure.event())
            return
        except wire.ChannelClosed as exc:
            self.emit.send(Lost(message=str(exc)))
            return
        except wire.ProtocolError as exc:
            # Only code in the candidate process can garble what it sends.
            self.emit.send(Failure("rejected", f"the candidate's outputs arrived garbled ({exc}): something in the "
                                   "candidate process wrote to the harness's channels",
                                   [diagnostics.diagnostic("cheat", f"garbled output frames: {exc}")]).event())
            return
        from sage_engine.evaluation.child.device import device_name

        self.emit.send(ReferenceDone(
            chosen=self.timed.index if self.timed else 0, sizes=self.sizes,
            device_name=device_name(self.device.type) if self.device.type != "cpu" else None,
            slowest_call=self.slowest, inputs=self.inputs_report(),
            phases={"reference_correctness": time.perf_counter() - start, "reference_calls": self.call_s}))
        self.serve()

    def reference_forward(self, model: Any, values: list[Any]) -> list[Any]:
        try:
            with self.torch.no_grad():
                return correctness.as_output_list(self.forward(model, values))
        except BaseException as exc:
            raise self.reference_failure("the reference's forward failed", exc)

    def run_case(self, index: int, case: dict[str, Any]) -> bool:
        torch = self.torch
        module = self.load_reference(case)
        # Seeded: the two processes have drawn different numbers before (inputs, earlier cases).
        self.reseed(self.task.seed)
        init = self.task_call("get_init_inputs()", module.get_init_inputs)
        self.reseed(self.task.seed)
        model = self.task_call("constructor", module.Model, *init)
        if isinstance(model, torch.nn.Module):
            model = model.to(self.device)
        prev: tuple[list[Any], list[Any]] | None = None
        values: list[Any] = []
        made = self.make_inputs(index, module, self.task.seed)
        self.send_inputs(made, self.task.seed, case=index, trial=0)
        for trial in range(self.trials):
            values = self.on_device(made)
            pristine = self.clone(values)
            ref_out = self.reference_forward(model, values)
            # Pipelined: the next trial's inputs are made while the candidate
            # process computes this one, and sent before this one is compared.
            seed = self.task.seed + trial + 1
            made = self.make_inputs(index, module, seed) if trial + 1 < self.trials else []
            header = wire.read_header(self.ch.data)
            if header.get("case") != index or header.get("trial") != trial:
                raise wire.ProtocolError(f"expected the frame of case {index} trial {trial}, got "
                                         f"{header.get('case')!r}/{header.get('trial')!r}")
            self.note_transport(header)
            observed = self.changed_by_candidate(index, pristine)
            send_next = (lambda m=made, s=seed, t=trial + 1: self.send_inputs(m, s, case=index, trial=t)) \
                if trial + 1 < self.trials else None
            result, cand_out = self.judge(header, ref_out, values, pristine, then=send_next, observed=observed)
            if not result.ok and prev is not None and cand_out is not None:
                self.check_cached(prev, ref_out, cand_out)
            self.emit.send(CaseEvent(case_result=CaseRow(case, trial, result.ok, result.max_abs_error,
                                                         result.max_rel_error, result.message)))
            if not result.ok:
                self.emit.send(Verdict(status="incorrect", message=result.message))
                return False
            prev = (ref_out, cand_out or [])
        self.sizes.append(self.input_bytes(values))
        self.keep_largest(index, module, model, values)
        return True

    def make_inputs(self, case: int, module: Any, seed: int) -> list[Any]:
        """A trial's inputs, made on the device where the task's builder
        allows it (with the device's own generator: no host build, no copy
        up), else on the host."""
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

    def send_inputs(self, made: list[Any], seed: int, *, case: int, trial: Any) -> None:
        """The candidate's copy of a trial's inputs, into shared memory (`child/inputs.py`)."""
        placed = self.sender.placed
        self.sender.send(made, seed=seed, case=case, trial=trial)
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
        return {"via": via, "shared_bytes": s.shared_bytes, "pipe_bytes": s.pipe_bytes,
                "on_device": self.device.type != "cpu" and len(self.host_only) < len(self.task.cases)}

    # -- judging one frame

    def judge(self, header: dict[str, Any], ref_out: list[Any], ref_in: list[Any] | None,
              pristine: list[Any] | None, then: Callable[[], None] | None = None, observed: list[int] = (),
              ) -> tuple[correctness.Comparison, list[Any] | None]:
        """The comparison for one frame, reading its tensors only once their
        headers match what the reference produced; `then` runs once the frame
        is read, before the comparison. (Comparison, the candidate's values)
        or raises Failure for a cheat."""
        entries = header.get("outputs")
        if not isinstance(entries, list):
            raise wire.ProtocolError("a frame without outputs")
        ref_mut = guards.mutated(pristine, ref_in) if ref_in is not None and pristine is not None else []
        if ref_in is not None:
            self.check_inputs(header, ref_out, ref_in, ref_mut, observed)
        if len(entries) != len(ref_out):
            return correctness.Comparison(False, message=f"expected {len(ref_out)} output(s), got {len(entries)}"), None
        cand: list[Any] = []
        for i, (entry, ref) in enumerate(zip(entries, ref_out)):
            label = f"output {i}" if len(ref_out) > 1 else "output"
            value, failed = self.read_value(entry, ref, label)
            if failed is not None:
                return failed, None
            cand.append(value)
        extra_ref, extra_cand = [], []
        if ref_mut:
            sent = {int(m["index"]): m for m in header.get("mutated", []) if isinstance(m, dict)}
            for j in ref_mut:
                label = f"output {len(ref_out) + len(extra_ref)}"
                if j in sent:
                    value, failed = self.read_value(sent[j], ref_in[j], label)
                    if failed is not None:
                        return failed, None
                else:
                    value = pristine[j]  # the candidate left it unchanged
                extra_ref.append(ref_in[j])
                extra_cand.append(value)
        if then is not None:
            then()
        result = correctness.compare_outputs(ref_out + extra_ref, cand + extra_cand, mode=self.mode,
                                             override=self.override)
        return result, cand

    def check_inputs(self, header: dict[str, Any], ref_out: list[Any], ref_in: list[Any], ref_mut: list[int],
                     observed: list[int] = ()) -> None:
        ref_alias = set(guards.aliased(ref_out, ref_in))
        for pair in header.get("aliased", []):
            i, j = int(pair[0]), int(pair[1])
            if (i, j) not in ref_alias:
                raise _cheat(f"output {i} shares memory with input {j}; return a new tensor",
                             f"output {i} aliases input {j} (the reference returns fresh memory)")
        reported = {int(m.get("index", -1)) for m in header.get("mutated", []) if isinstance(m, dict)}
        unexpected = sorted((reported | set(observed)) - set(ref_mut))
        if unexpected:
            raise Failure("rejected", f"the candidate modifies input {unexpected[0]} in place; the reference does not",
                          [diagnostics.diagnostic("cheat", f"input {j} was mutated by ModelNew.forward")
                           for j in unexpected])

    def read_value(self, entry: Any, ref: Any, label: str) -> tuple[Any, correctness.Comparison | None]:
        torch = self.torch
        if not isinstance(entry, dict):
            raise wire.ProtocolError("a frame entry that is not an object")
        kind = entry.get("kind")
        if kind == "subclass":
            raise _cheat(f"{label} is a {entry.get('type')}, a torch.Tensor subclass; return a plain torch.Tensor",
                         f"{label} is a {entry.get('type')} (subclasses can compute lazily or lie in comparisons)")
        if kind == "value":
            value = entry.get("value")
            if isinstance(ref, torch.Tensor):
                return None, correctness.Comparison(False, message=f"{label}: expected a tensor, got {type(value).__name__}")
            return value, None
        if kind in ("other", "unsupported"):
            what = entry.get("type") or entry.get("why")
            return None, correctness.Comparison(False, message=f"{label}: expected a dense torch.Tensor, got {what}")
        if kind != "tensor" or entry.get("dtype") not in wire.DTYPES or not isinstance(entry.get("shape"), list):
            raise wire.ProtocolError(f"an unreadable frame entry for {label}")
        if not isinstance(ref, torch.Tensor):
            return None, correctness.Comparison(False, message=f"{label}: expected {ref!r}, got a tensor")
        placeholder = torch.empty([int(s) for s in entry["shape"]], dtype=getattr(torch, entry["dtype"]), device="meta")
        shape_check = correctness.compare_one(ref, placeholder, mode=self.mode, override=self.override, label=label) \
            if tuple(placeholder.shape) != tuple(ref.shape) or placeholder.dtype != ref.dtype else None
        if shape_check is not None:
            return None, shape_check
        if entry.get("device") != str(ref.device):
            return None, correctness.Comparison(
                False, message=f"{label}: on device {entry.get('device')}; the reference's is on {ref.device}")
        return wire.read_tensor(self.ch.data, entry, torch), None

    def check_cached(self, prev, ref_out, cand_out) -> None:
        prev_ref, prev_cand = prev
        if correctness.same_values(prev_cand, cand_out) and not correctness.same_values(prev_ref, ref_out):
            raise _cheat("the candidate returned the previous call's output for different inputs: outputs are "
                         "cached, not computed", "returns cached outputs for new inputs")

    # -- timing commands

    def command(self, verb: str, arg: str) -> str:
        if verb == "fresh":
            timed = self.timed_case()
            made = self.make_inputs(timed.index, timed.module, int(arg))
            self.send_inputs(made, int(arg), case=timed.index, trial="fresh")
            self.fresh_out = self.reference_forward(timed.model, self.on_device(made))
            return "ok"
        if verb == "check":
            if self.fresh_out is None:
                raise wire.ProtocolError("`check` before `fresh`")
            try:
                header = wire.read_header(self.ch.data)
                result, _ = self.judge(header, self.fresh_out, None, None)
            except Failure as failure:
                return "bad " + wire.json_text({"status": failure.status, "message": failure.message})
            except wire.ProtocolError as exc:
                return "bad " + wire.json_text({"status": "rejected", "message": f"garbled output frame ({exc})"})
            if result.ok:
                return "ok"
            return "bad " + wire.json_text({"status": "rejected", "message": result.message})
        return super().command(verb, arg)

