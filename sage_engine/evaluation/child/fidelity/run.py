"""The candidate-side hook of the interpreter backends (`triton`, `ascend-compile`).

Wrapped around the standard correctness run in the candidate process, it
makes the Triton interpreter run kernels as a device would judge them
(see docs/backends.md, "What the interpreter checks"):

- bf16 computed in fp32 and rounded (`bf16`);
- `and` / `or` on tensors elementwise, as the compiler reads them (`logic`);
- loads and stores outside every tensor of a launch refused (`bounds`);
- every config of an autotuned kernel checked, the autotuner's benchmarking
  never run, `@libentry` as the kernel (`autotune`);
- on upstream Triton, the libdevice functions computed (`libdevice`);
- on triton-ascend, its language extensions interpreted (`ascend_ops`).

A fault it catches is recorded when it happens and decides the candidate's
last event, even when the candidate caught the exception and fell back to
something else. It only ever adds failures: nothing here can pass a kernel.
Its settings arrive in `Request.candidate_hook_args`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sage_engine.evaluation.common import diagnostics
from sage_engine.evaluation.child import changes, correctness
from sage_engine.evaluation.child.fidelity import autotune, bf16, bounds, libdevice, logic
from sage_engine.evaluation.protocol import CandidateDone, Event, Fail, HookReport, Request

# Failures that say which Triton they happened on (the verdict depends on the version).
VERSION_NOTES = (
    ("Block pointers have been removed", "block pointers (tl.make_block_ptr, tl.advance) were removed in Triton 3.9"),
    ("has no attribute 'make_tensor_descriptor'", "tl.make_tensor_descriptor arrived in Triton 3.4"),
)


class InterpreterChecks:
    def __init__(self, request: Request):
        from triton.runtime import interpreter

        args = request.candidate_hook_args or {}
        self.request = request
        self.cand_path = str(Path(os.getcwd(), diagnostics.CANDIDATE_FILE))
        self.version_note = args.get("version_note", "")
        self.trial_configs: list[dict[str, str]] = []
        bf16.install(interpreter)
        logic.install(interpreter)
        self.bounds = bounds.BoundsChecker(self.cand_path)
        if args.get("bounds", True):
            self.bounds.install(interpreter)
        self.autotune = autotune.AutotuneShim(
            limit=int(args.get("autotune_configs", 4)), compare=self.compare, on_config=self.on_config, rotated=request.trials
        )
        self.autotune.install()
        # The shape variant under way when the first fault was found: (name, its shapes, the declared shapes).
        self.variant: tuple[str, str, str] | None = None

    def on_case(self, variant: str, at: str, declared_at: str) -> None:
        """The candidate process starts a case or shape variant ("" for a declared case)."""
        if self.bounds.violation is None and self.autotune.mismatch is None:
            self.variant = (variant, at, declared_at) if variant else None

    def on_config(self, tuner: Any, args: tuple, kwargs: dict, config: Any) -> None:
        """Every config of an autotuned kernel, run or not (the Ascend gate records them)."""

    def compare(self, kept: Any, other: Any) -> str | None:
        """None when two configs' results agree under the task's tolerance."""
        found = correctness.compare_one(kept, other, mode=self.request.tolerance_mode, override=self.request.task.tolerance, label="output")
        return None if found.ok else found.message

    def extras(self) -> HookReport | None:
        """Sent after every trial (and at the end): the configs checked, and which ran in each trial so far."""
        if not self.autotune.checked:
            return None
        self.trial_configs.append(dict(self.autotune.last))
        return HookReport(autotune=self.autotune.checked, autotune_trials=list(self.trial_configs))

    def finish(self, event: Event) -> Event:
        found = self.fault()
        if found is not None:
            found.hook = (found.hook or HookReport()).merged(self.extras())
            return found
        if isinstance(event, Fail):
            event = self.with_version_note(event)
        if isinstance(event, (Fail, CandidateDone)):
            event.hook = (event.hook or HookReport()).merged(self.extras())
        return event

    def fault(self) -> Fail | None:
        """The fault found, if any; at a shape variant it is `incorrect` there,
        as every failure at sizes the kernel was not written for is."""
        oob = self.bounds.violation
        if oob is not None:
            found = Fail(
                status="runtime_error", message=str(oob), diagnostics=[diagnostics.diagnostic("out_of_bounds", str(oob), line=oob.line)]
            )
        elif self.autotune.mismatch is not None:
            bad = str(self.autotune.mismatch)
            found = Fail(status="incorrect", message=bad, diagnostics=[diagnostics.diagnostic("autotune_config", bad)])
        else:
            return None
        if self.variant is not None:
            name, at, declared_at = self.variant
            found.status, found.variant, found.at = "incorrect", name, at
            found.message = changes.failed_at(declared_at, at, name, found.message)
        return found

    def with_version_note(self, event: Fail) -> Fail:
        text = event.message + " ".join(str(d.get("message", "")) for d in event.diagnostics)
        for marker, note in VERSION_NOTES:
            if marker in text:
                extra = f" ({note}; this verdict is for {self.version_note})" if self.version_note else f" ({note})"
                event.message += extra
                for d in event.diagnostics:
                    d["message"] = str(d.get("message", "")) + extra
                break
        return event


class TritonRun(InterpreterChecks):
    """The `triton` backend's hook: upstream Triton's interpreter, with libdevice."""

    def __init__(self, request: Request):
        from triton.runtime import interpreter

        libdevice.install(interpreter)
        super().__init__(request)
