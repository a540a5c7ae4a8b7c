"""The entry point of a forked child: the reference side, the candidate
side, or a backend's runner routine (which has no reference)."""

from __future__ import annotations

import os
import sys

from sage_engine.evaluation import diagnostics
from sage_engine.evaluation.child.side import Channels, Emitter, prepare, resolve
from sage_engine.evaluation.protocol import Fail, Request, RunnerResult


def child_main(role: str, request: Request, channels: Channels, workdir: str) -> None:
    """Runs one side in a forked child; never returns."""
    emit = Emitter(channels.evt, request.token)
    code = 0
    try:
        prepare(request, workdir)
        if role == "reference":
            from sage_engine.evaluation.child.reference import ReferenceSide

            ReferenceSide(request, emit, channels).main()
        elif request.runner:
            # A backend's own routine with no reference (the Ascend compile step, the device probe).
            emit.send(RunnerResult(result=resolve(request.runner)(request, emit)))
        else:
            from sage_engine.evaluation.child.candidate import CandidateSide

            CandidateSide(request, emit, channels).main()
    except BaseException as exc:  # each side reports its own failures; this is a harness fault
        text = diagnostics.exception_text(exc)
        emit.send(Fail(status="runtime_error", message=f"the {role} process failed inside the sandbox: {text}",
                       diagnostics=[diagnostics.diagnostic("harness", text)], harness=True))
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)
