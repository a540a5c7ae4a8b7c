"""A backend's measured limits on this host (`SandboxBackend.calibration`):
read from the cache, else measured by the calibration runner, which runs as
an evaluation's candidate process does (same sandbox, limits, device nodes
and thread count) and inside the host's timing turn, so no evaluation is
timed while the machine is measured and none disturbs the measurement."""

from __future__ import annotations

import secrets
import threading
from typing import Any

from sage_engine.evaluation.host import calibration, machine
from sage_engine.evaluation.protocol import Request
from sage_engine.models import MachineLimits

# `backend` below is a SandboxBackend (base.py imports this module).
_measuring = threading.Lock()  # one measurement at a time in this process: two would halve each other's figures


def key_for(backend: Any) -> calibration.Key:
    return calibration.Key(backend.name, backend.hardware(), backend.config.eval_threads,
                           machine.host_versions().get("torch", "unknown"))


def cached(backend: Any) -> MachineLimits | None:
    return calibration.load(backend.config.cache_dir, key_for(backend))


def measured(backend: Any, *, force: bool = False) -> MachineLimits:
    """The cached limits, or limits measured now and cached (always measured with `force`)."""
    found = None if force else cached(backend)
    if found is not None:
        return found
    with _measuring:
        found = None if force else cached(backend)  # another thread may have measured meanwhile
        if found is not None:
            return found
        key, c = key_for(backend), backend.config
        request = Request(token=secrets.token_hex(16), task=calibration.TASK, timeout_s=calibration.TIMEOUT_S,
                          limits=backend.limits(), runner=calibration.RUNNER, device=backend.device,
                          preload=list(getattr(backend, "preload", ())), threads=c.eval_threads, measures_host=True)
        outcome = backend.pool.run(request, backend.launch(), lambda _event: None)
        limits = calibration.from_runner(key, outcome.runner_result, calibration.runner_failure(outcome))
        return calibration.save(c.cache_dir, limits)
