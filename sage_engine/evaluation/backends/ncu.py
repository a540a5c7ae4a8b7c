"""Nsight Compute metrics in a result's profile, on request
(`Config.profile_ncu`, `sage bench --ncu`): on the cuda backend with `ncu`
on this host's PATH, a second sandboxed run (`child/ncu.py`) profiles the
candidate's kernels on the timed case. Anywhere else the profile says why
there are none. The evaluation's status, timing and profile are unchanged."""

from __future__ import annotations

import dataclasses
import shutil
from typing import Any

from sage_engine.evaluation.host.calibration import runner_failure
from sage_engine.evaluation.tasks import Task
from sage_engine.models import EvalResult

RUNNER = "sage_engine.evaluation.child.ncu:run"


def with_ncu(backend: Any, task: Task, source: str, result: EvalResult) -> EvalResult:
    """`result` with `profile.ncu` filled, or a note saying why it is not."""
    profile = result.profile.model_copy(deep=True)
    ncu = shutil.which("ncu")
    if backend.name != "cuda":
        profile.notes.append(f"ncu metrics were asked for, but they are read on the cuda backend only, not {backend.name}")
    elif ncu is None:
        profile.notes.append("ncu metrics were asked for, but ncu is not on PATH: install Nsight Compute and put the "
                             "folder holding ncu on PATH")
    else:
        request = backend.build_request(task, source, 1)
        cases = request.task.cases
        timed = result.compile_info.get("timed_case")
        request = dataclasses.replace(request, runner=RUNNER, timing=None, profile=None, candidate_hook=None,
                                      runner_args={"ncu": ncu, "case": cases.index(timed) if timed in cases else 0})
        outcome = backend.pool.run(request, backend.launch_for(task), lambda _event: None)
        found = outcome.runner_result or {}
        if isinstance(found.get("kernels"), list):
            profile.ncu = found["kernels"]
        else:
            profile.notes.append(f"ncu failed: {found.get('error') or runner_failure(outcome)}")
    return result.model_copy(update={"profile": profile})
