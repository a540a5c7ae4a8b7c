"""The candidate process of one evaluation.

Loads the candidate, builds `ModelNew` for every case with the reference's
constructor arguments and seed, runs it on the inputs the reference process
made and sent for each trial, and sends each trial's outputs there as a
value frame.
What it checks itself (aliased or mutated inputs, torch functions replaced,
outputs that are not plain tensors) is early, friendly feedback: this
process runs candidate code, so the verdict on correctness is the
reference process's.

Later trials copy new values into the *same* input tensors, so a candidate
that memoises on tensor identity returns stale outputs, which the reference
process catches.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sage_engine.evaluation.common import diagnostics
from sage_engine.evaluation.protocol import wire
from sage_engine.evaluation.child import changes, correctness, guards
from sage_engine.evaluation.child.inputs import InputReceiver
from sage_engine.evaluation.child.side import Channels, Emitter, Failure, Side, resolve, versions
from sage_engine.evaluation.child.spot import send_spot
from sage_engine.evaluation.protocol import CandidateDone, Event, Extras, Request


@dataclass
class Case:
    """The case or shape variant the candidate process is checking."""

    index: int
    module: Any
    variant: str = ""
    at: str = ""  # a variant's input shapes
    model: Any = None
    values: list[Any] = field(default_factory=list)  # what the kernel gets: aliases of `owned`
    owned: list[Any] = field(default_factory=list)  # the harness's own references to the same memory
    identities: list[Any] = field(default_factory=list)  # the aliases' identities when made


class CandidateSide(Side):
    role = "candidate"

    def __init__(self, request: Request, emit: Emitter, channels: Channels):
        super().__init__(request, emit, channels)
        self.cand_path = str(Path(os.getcwd(), diagnostics.CANDIDATE_FILE))
        self.phases: dict[str, float] = {}
        self.snapshot: dict[str, dict[str, int]] = {}
        # A backend's code around the candidate's run: `extras()` after each trial, `finish(event)` at the end.
        self.hook = resolve(request.candidate_hook)(request) if request.candidate_hook else None
        self.receiver = InputReceiver(self.torch, channels.shared, self.device)
        self.declared_at = ""  # the first declared case's input shapes, as messages name them
        self.identity = guards.identity_reader(self.torch)  # bound now, before the candidate loads

    # -- stages

    def main(self) -> None:
        total = self.req.progress_total
        threads_before = thread_count()
        self.snapshot = guards.torch_snapshot(self.torch, self.device.type)
        try:
            self.emit.progress(1, total, "loading candidate")
            model_new = self.load_candidate()
            self.check_patches("loading the candidate")
            start = time.perf_counter()
            self.run_cases(model_new, total)
            self.phases["candidate_correctness"] = time.perf_counter() - start
            self.phases["candidate_calls"] = self.call_s
        except Failure as failure:
            self.emit.send(self.finish(failure.event()))
            return
        report = self.finish(
            CandidateDone(threads=[threads_before, thread_count()], phases=self.phases, versions=versions(), slowest_call=self.slowest)
        )
        self.emit.send(report)
        if isinstance(report, CandidateDone):
            self.serve()

    def finish(self, event: Event) -> Event:
        return self.hook.finish(event) if self.hook is not None else event

    def load_candidate(self) -> type:
        start = time.perf_counter()
        try:
            return load_model_new(self.req.candidate_source, self.cand_path)
        finally:
            self.phases["import"] = time.perf_counter() - start

    def candidate_failure(self, exc: BaseException, what: str) -> Failure:
        return candidate_failure(exc, what, self.cand_path, self.req.limits.memory_mb)

    def check_patches(self, when: str) -> None:
        names = guards.patched(self.torch, self.snapshot, self.device.type)
        if names:
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            raise Failure(
                "rejected",
                f"{when} replaced {shown}: candidates may not patch torch",
                [diagnostics.diagnostic("cheat", f"monkeypatched torch: {shown}")],
            )

    def run_cases(self, model_new: type, total: int) -> None:
        """Every case and shape variant the reference process sends, in its
        order: each case's first header brings its row (a variant's, its
        name), the trials' inputs follow, and `end` closes the checks."""
        case: Case | None = None
        while True:
            header = self.next_header()
            if header.get("end"):
                break
            if header.get("trial") == 0 or case is None:
                if case is not None:
                    self.finish_case(case)
                case = self.start_case(header, model_new)
                what = f"checking {case.variant} sizes" if case.variant else f"checking case {case.index + 1}/{len(self.task.cases)}"
                self.emit.progress(2 + case.index, total, what)
            self.run_trial(case, header)
        if case is not None:
            self.finish_case(case)

    def start_case(self, header: dict[str, Any], model_new: type) -> "Case":
        torch = self.torch
        row = header.get("row")
        if not isinstance(row, dict):
            raise Failure(
                "runtime_error",
                "the reference process's first inputs of a case came without its row",
                [diagnostics.diagnostic("harness", "inputs header without a row")],
            )
        case = new_case(header, self.load_reference(row), self.hook, self.declared_at)
        seed = int(header.get("model_seed", self.req.seed))
        # Seeded as the reference seeds its Model: the same parameters.
        self.reseed(seed)
        init = self.task_call("get_init_inputs()", case.module.get_init_inputs)
        self.reseed(seed)
        try:
            with torch.no_grad():
                case.model = model_new(*init)
            if isinstance(case.model, torch.nn.Module):
                case.model = case.model.to(self.device)
        except BaseException as exc:
            raise at_variant(self.declared_at, case, self.candidate_failure(exc, "ModelNew(*get_init_inputs())"))
        return case

    def run_trial(self, case: "Case", header: dict[str, Any]) -> None:
        torch = self.torch
        trial = header.get("trial")
        # Later trials bring new values in the same tensors (on the host the
        # same shared memory, rewritten by the reference): a candidate that
        # memoises on tensor identity then returns stale outputs.
        fresh = self.header_values(case.module, header)
        if not case.values or not _same_layout(case.values, fresh, torch):
            # The kernel gets aliases: whatever it does to them (a class, a storage), the harness's stay.
            case.owned, (case.values, case.identities) = fresh, give(fresh, self.identity, torch)
        else:
            with torch.no_grad():  # inputs that require grad are leaves: refreshed outside autograd
                case.values = refreshed(self.torch, case.values, fresh)
        if not case.variant and not self.declared_at:
            self.declared_at = changes.shapes(case.values)
        pristine = self.clone(case.values)
        try:
            with torch.no_grad():
                raw = self.forward(case.model, case.values)
        except BaseException as exc:
            raise at_variant(self.declared_at, case, self.candidate_failure(exc, "ModelNew.forward"))
        check_identity(self.identity, case.values, case.identities, "ModelNew.forward")
        self.send(case.index, trial, correctness.as_output_list(raw), case.values, pristine)
        if self.hook is not None:
            self.emit.send(Extras(hook=self.hook.extras()))

    def finish_case(self, case: "Case") -> None:
        # Once a case, not a trial: the reference process, which never loads the
        # candidate, is what patches cannot reach; this is early, friendly feedback.
        self.check_patches("ModelNew.forward")
        if case.variant:
            return  # timing stays on the declared cases
        values = case.owned
        if self.device.type == "cpu":
            # Timed on memory of its own, as the reference is: shared pages may
            # not get the huge pages the reference's private memory gets.
            values = [v.detach().clone().requires_grad_(v.requires_grad) if isinstance(v, self.torch.Tensor) else v for v in values]
        self.keep_largest(case.index, case.module, case.model, values)

    def next_header(self) -> dict[str, Any]:
        try:
            return wire.read_header(self.ch.inputs)
        except wire.ProtocolError as exc:
            raise inputs_lost(exc)

    def header_values(self, module: Any, header: dict[str, Any]) -> list[Any]:
        """The inputs a header describes, on the device: this process's copy,
        in memory the reference shares (`child/inputs.py`)."""
        try:
            values = self.receiver.values(header)
        except wire.ProtocolError as exc:
            raise inputs_lost(exc)
        if values is None:  # not plain tensors and numbers: made here, from the same seed
            return self.inputs(module, int(header["seed"]))
        return self.on_device(values)

    def receive_inputs(self, module: Any, **expected: Any) -> list[Any]:
        """The next inputs, which must be those of `expected` (case, trial)."""
        header = self.next_header()
        if any(header.get(k) != v for k, v in expected.items()):
            raise Failure(
                "runtime_error",
                f"expected the inputs of {expected}, got {header.get('case')!r}/{header.get('trial')!r}",
                [diagnostics.diagnostic("harness", "inputs out of order")],
            )
        return self.header_values(module, header)

    def send(self, index: int, trial: Any, outputs: list[Any], values: list[Any] | None, pristine: list[Any] | None) -> None:
        """One value frame to the reference process."""
        torch = self.torch
        header: dict[str, Any] = {"case": index, "trial": trial, "outputs": [], "mutated": [], "aliased": [], "inputs": self.receiver.via}
        tensors = []
        for value in outputs:
            entry, tensor = wire.describe(value, torch)
            header["outputs"].append(entry)
            if tensor is not None:
                tensors.append(tensor)
        if values is not None and pristine is not None:
            header["aliased"] = [list(p) for p in guards.aliased(outputs, values)]
            for j in guards.mutated(pristine, values):
                entry, tensor = wire.describe(values[j], torch)
                # Said even when its values cannot travel (a sparse input): the reference judges the change.
                header["mutated"].append({"index": j, **entry})
                if tensor is not None:
                    tensors.append(tensor)
        wire.write_frame(self.ch.data, header, tensors)

    # -- timing commands

    def timed_batch(self, n: int, seed: int) -> float:
        timed = self.timed_case()
        if timed.aliases is None:
            timed.aliases, timed.identities = give(timed.inputs, self.identity, self.torch)
        seconds = super().timed_batch(n, seed)
        check_identity(self.identity, timed.aliases, timed.identities or [], "timing ModelNew.forward")
        # A lazy or subclassed output would defer its work past the timer.
        odd = [wire._type(v).__qualname__ for v in correctness.as_output_list(self.last_first) if not _plain(v, self.torch)]
        for name in odd + ([self.spot.odd] if self.spot.odd else [])[:1]:
            if name:
                raise Failure(
                    "rejected",
                    f"ModelNew.forward returned a {name} while being timed; return plain torch.Tensor outputs",
                    [diagnostics.diagnostic("cheat", f"timed output is a {name}")],
                )
        return seconds

    def command(self, verb: str, arg: str) -> str:
        if verb == "fresh":
            # New values in the same tensors: what the candidate has never seen.
            timed = self.timed_case()
            fresh = self.receive_inputs(timed.module, case=timed.index, trial="fresh")
            if _same_layout(timed.inputs, fresh, self.torch):
                with self.torch.no_grad():
                    timed.inputs = refreshed(self.torch, timed.inputs, fresh)
            else:
                timed.inputs = list(fresh)
                self.churn = changes.Churn(self.torch, timed.inputs, self.req.verdict.churn_swaps)
            self.keep_first, timed.aliases = True, None  # aliases anew: a number drawn with the inputs changes too
            return "ok"
        if verb in ("check", "spot"):  # a fresh-input check's output, or a call drawn from the last batch
            self.check_patches("timing ModelNew.forward")
            if verb == "spot":
                send_spot(self, int(arg))
            else:
                self.send(self.timed_case().index, "timing", correctness.as_output_list(self.last_first), None, None)
            return "ok"
        if verb in ("warm", "rep"):
            try:
                return super().command(verb, arg)
            except Failure:
                raise
            except BaseException as exc:
                raise self.candidate_failure(exc, "timing ModelNew.forward")
        return super().command(verb, arg)


def new_case(header: dict[str, Any], module: Any, hook: Any, declared_at: str) -> Case:
    """The case a header starts; a backend's hook learns which (a fault it finds later is placed there)."""
    case = Case(int(header["case"]), module, str(header.get("variant") or ""), str(header.get("at") or ""))
    if hook is not None:
        hook.on_case(case.variant, case.at, declared_at)
    return case


def refreshed(torch: Any, dst: Any, src: Any) -> Any:
    """`src`'s values in `dst`'s tensors, inside list and tuple arguments
    too: tensors are copied into (a candidate that memoises on tensor
    identity must see new values in the same objects, and timed calls that
    update them in place start from the new values); numbers and anything
    else come from `src` (`tril`'s `diagonal` is drawn anew with the tensor)."""
    if isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor):
        if dst is not src and not guards.same_memory(dst, src):
            dst.copy_(src)
        return dst
    if isinstance(dst, (list, tuple)) and isinstance(src, (list, tuple)) and len(dst) == len(src):
        items = [refreshed(torch, d, s) for d, s in zip(dst, src)]
        if isinstance(dst, list):
            dst[:] = items
            return dst
        return tuple(items)
    return src


def give(values: list[Any], identity: Any, torch: Any) -> tuple[list[Any], list[Any]]:
    """What the kernel gets for the harness's `values`: aliases (`guards.aliases`), and their identities now."""
    aliases = guards.aliases(values, torch)
    return aliases, [identity(v) for v in aliases]


def check_identity(identity: Any, aliases: list[Any], expected: list[Any], when: str) -> None:
    """Rejects a kernel that changed what its inputs are (class, memory,
    shape, strides, dtype), read with functions bound before it loaded."""
    changed = [i for i, (v, was) in enumerate(zip(aliases, expected)) if identity(v) != was]
    if changed:
        detail = ", ".join(f"input {i}: {identity(aliases[i])[0].__qualname__}" for i in changed[:3])
        raise Failure(
            "rejected",
            f"{when} changed the identity of its inputs ({detail}): a kernel may read and write its "
            "inputs' values, not replace their class or point them at other memory",
            [diagnostics.diagnostic("cheat", f"changed the identity of its inputs while {when}")],
        )


def at_variant(declared_at: str, case: Case, failure: Failure) -> Failure:
    """A failure at sizes the kernel was not written for: `incorrect`, naming them."""
    if not case.variant:
        return failure
    message = changes.failed_at(declared_at, case.at, case.variant, failure.message)
    return Failure("incorrect", message, failure.diags, variant=case.variant, at=case.at)


def inputs_lost(exc: wire.ProtocolError) -> Failure:
    return Failure(
        "runtime_error",
        f"the reference process's inputs did not arrive ({exc})",
        [diagnostics.diagnostic("harness", f"inputs channel: {exc}")],
    )


def thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def _plain(value: Any, torch: Any) -> bool:
    return wire._type(value) is torch.Tensor or value is None or wire._type(value) in (bool, int, float)


def _same_layout(a: list[Any], b: list[Any], torch: Any) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor) and (x.shape != y.shape or x.dtype != y.dtype or x.device != y.device):
            return False
    return True


def load_model_new(source: str, path: str) -> type:
    """The candidate module's ModelNew, loaded from `path`; a Failure
    (`compile_error`) with the candidate's lines when it cannot be."""
    Path(path).write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("candidate", path)
    if spec is None or spec.loader is None:  # a .py path always has a spec and a loader
        raise Failure("compile_error", f"the candidate at {path} cannot be loaded as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate"] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise Failure("compile_error", f"SyntaxError: {exc.msg}", [diagnostics.from_syntax_error(exc)])
    except BaseException as exc:
        text = str(exc)
        if "Error building extension" in text or "error:" in text and "ninja" in text:
            frames = diagnostics.candidate_frames(exc, path)
            fallback = frames[-1].lineno if frames else None
            diags = diagnostics.compiler_errors(text, source, fallback_line=fallback)
            if not diags:
                diags = [diagnostics.diagnostic("cpp", diagnostics.exception_text(exc), line=fallback)]
            raise Failure("compile_error", "C++ extension build failed: " + diags[0]["message"], diags)
        category = "import" if isinstance(exc, ImportError) else "module"
        diag = diagnostics.from_exception(exc, category, path)
        raise Failure("compile_error", f"loading the candidate raised {diagnostics.exception_text(exc)}", [diag])
    cls = getattr(module, "ModelNew", None)
    if not isinstance(cls, type):
        raise Failure(
            "compile_error",
            "the candidate defines no class ModelNew",
            [
                diagnostics.diagnostic(
                    "interface", "define `class ModelNew(nn.Module)` with the reference's constructor and forward signature"
                )
            ],
        )
    return cls


def candidate_failure(exc: BaseException, what: str, path: str, memory_mb: int) -> Failure:
    """The `runtime_error` for an exception the candidate's code raised."""
    oom = diagnostics.out_of_memory(exc)
    diag = diagnostics.from_exception(exc, "memory" if oom else "runtime", path)
    message = f"{what} raised {diagnostics.exception_text(exc)}"
    if oom == "host":
        note = diagnostics.memory_cap_note(memory_mb)
        message += note
        diag["message"] = (diag["message"] + note)[: diagnostics.MAX_MESSAGE]
    return Failure("runtime_error", message, [diag])
