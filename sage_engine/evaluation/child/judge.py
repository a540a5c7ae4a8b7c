"""Judging one frame of the candidate's outputs in the reference process:
the comparison with the reference's outputs (`correctness`), and the cheats
a frame shows (outputs sharing memory with inputs, inputs changed in place,
tensor subclasses, the previous call's output for new inputs)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from sage_engine.evaluation.common import diagnostics
from sage_engine.evaluation.protocol import wire
from sage_engine.evaluation.child import correctness, guards
from sage_engine.evaluation.child.side import Failure
from sage_engine.evaluation.protocol import Judgement


def cheat(message: str, detail: str) -> Failure:
    return Failure("rejected", message, [diagnostics.diagnostic("cheat", detail)])


class FrameJudge:
    """Reads frames from the candidate's data pipe and judges them; notes
    in `judgement` when outputs were compared relative to their scale."""

    def __init__(self, torch: Any, data: int, *, mode: str, override: dict, factor: float, judgement: Judgement):
        self.torch, self.data = torch, data
        self.mode, self.override, self.factor, self.judgement = mode, override, factor, judgement
        self.reference_updates = False  # the reference's forward changed its inputs in a frame judged

    def frame(
        self,
        header: dict[str, Any],
        ref_out: list[Any],
        ref_in: list[Any] | None,
        pristine: list[Any] | None,
        then: Callable[[], None] | None = None,
        observed: Sequence[int] = (),
        scaled_inputs: bool = False,
    ) -> tuple[correctness.Comparison, list[Any] | None]:
        """The comparison for one frame, reading its tensors only once their
        headers match what the reference produced; `then` runs once the frame
        is read, before the comparison. (Comparison, the candidate's values)
        or raises Failure for a cheat."""
        entries = header.get("outputs")
        if not isinstance(entries, list):
            raise wire.ProtocolError("a frame without outputs")
        ref_mut = guards.mutated(pristine, ref_in) if ref_in is not None and pristine is not None else []
        self.reference_updates = self.reference_updates or bool(ref_mut)
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
        extra_ref: list[Any] = []
        extra_cand: list[Any] = []
        if ref_mut and ref_in is not None and pristine is not None:  # mutations are found only with both
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
        result = correctness.compare_outputs(
            ref_out + extra_ref,
            cand + extra_cand,
            mode=self.mode,
            override=self.override,
            small_output_factor=self.factor,
            scaled_inputs=scaled_inputs,
        )
        if result.scale is not None and not self.judgement.notes:
            self.judgement.notes.append(
                f"outputs compared relative to their own scale: the largest magnitude, {result.scale:.3g}, is at "
                f"most {self.factor:g}x the absolute tolerance, under which outputs of zeros would pass; "
                f"atol {result.atol:.3g} applied"
            )
        return result, cand

    def check_inputs(
        self, header: dict[str, Any], ref_out: list[Any], ref_in: list[Any], ref_mut: list[int], observed: Sequence[int] = ()
    ) -> None:
        ref_alias = set(guards.aliased(ref_out, ref_in))
        for pair in header.get("aliased", []):
            i, j = int(pair[0]), int(pair[1])
            if (i, j) not in ref_alias:
                raise cheat(
                    f"output {i} shares memory with input {j}; return a new tensor",
                    f"output {i} aliases input {j} (the reference returns fresh memory)",
                )
        reported = {int(m.get("index", -1)) for m in header.get("mutated", []) if isinstance(m, dict)}
        unexpected = sorted((reported | set(observed)) - set(ref_mut))
        if unexpected:
            raise Failure(
                "rejected",
                f"the candidate modifies input {unexpected[0]} in place; the reference does not",
                [diagnostics.diagnostic("cheat", f"input {j} was mutated by ModelNew.forward") for j in unexpected],
            )

    def read_value(self, entry: Any, ref: Any, label: str) -> tuple[Any, correctness.Comparison | None]:
        torch = self.torch
        if not isinstance(entry, dict):
            raise wire.ProtocolError("a frame entry that is not an object")
        kind = entry.get("kind")
        if kind == "subclass":
            raise cheat(
                f"{label} is a {entry.get('type')}, a torch.Tensor subclass; return a plain torch.Tensor",
                f"{label} is a {entry.get('type')} (subclasses can compute lazily or lie in comparisons)",
            )
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
        shape_check = (
            correctness.compare_one(ref, placeholder, mode=self.mode, override=self.override, label=label)
            if tuple(placeholder.shape) != tuple(ref.shape) or placeholder.dtype != ref.dtype
            else None
        )
        if shape_check is not None:
            return None, shape_check
        if entry.get("device") != str(ref.device):
            return None, correctness.Comparison(
                False, message=f"{label}: on device {entry.get('device')}; the reference's is on {ref.device}"
            )
        return wire.read_tensor(self.data, entry, torch), None

    def check_cached(self, prev: tuple[list[Any], list[Any]], ref_out: list[Any], cand_out: list[Any]) -> None:
        prev_ref, prev_cand = prev
        if correctness.same_values(prev_cand, cand_out) and not correctness.same_values(prev_ref, ref_out):
            raise cheat(
                "the candidate returned the previous call's output for different inputs: outputs are cached, not computed",
                "returns cached outputs for new inputs",
            )

    def same_as(self, expected: list[Any], got: list[Any]) -> bool:
        """Whether `got` matches `expected` as a frame's outputs are judged."""
        return correctness.compare_outputs(expected, got, mode=self.mode, override=self.override, small_output_factor=self.factor).ok
