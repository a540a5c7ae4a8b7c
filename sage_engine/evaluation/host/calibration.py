"""This host's measured limits per backend, cached as JSON under
`<cache_dir>/calibration/`: one file per backend, hardware string, thread
count and torch version, so every SAGE process on the host (each server,
the CLI) measures once and reads the file after. A new torch, another
thread count or another device measures anew; `sage backends calibrate
--force` too. The measuring itself is `child/calibration.py`, run by the
backend as an evaluation's candidate process would be run."""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sage_engine.errors import BackendUnavailable
from sage_engine.evaluation.host import machine
from sage_engine.evaluation.protocol import Request, TaskSpec
from sage_engine.models import BandwidthPoint, MachineLimits

log = logging.getLogger(__name__)

FOLDER = "calibration"
RUNNER = "sage_engine.evaluation.child.calibration:measure"
TIMEOUT_S = 300.0  # a few seconds on a CPU; device start-up and a slow fp16 matmul need more
# The calibration runs no task: its request carries an empty one.
TASK = TaskSpec(id="calibration", reference_source="", reference_path=None, cases=[{}], tolerance={}, forbid=[], seed=0, import_roots=[])


@dataclass(frozen=True)
class Key:
    """What a calibration holds for: measured anew when any of it changes."""

    backend: str
    hardware: str
    threads: int
    torch: str

    def path(self, cache_dir: Path) -> Path:
        digest = hashlib.sha256(f"{self.backend}|{self.hardware}|{self.threads}|{self.torch}".encode()).hexdigest()
        return Path(cache_dir) / FOLDER / f"{self.backend}-{digest[:16]}.json"


def load(cache_dir: Path, key: Key) -> MachineLimits | None:
    """The cached calibration for `key`, or None (none yet, or a file that no longer reads)."""
    path = key.path(cache_dir)
    try:
        found = MachineLimits.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, ValidationError) as exc:
        log.warning("ignoring the calibration in %s (%s); measuring again", path, exc)
        return None
    if (found.backend, found.hardware, found.threads, found.torch) != (key.backend, key.hardware, key.threads, key.torch):
        return None
    return found.model_copy(update={"cached": True, "path": str(path)})


def save(cache_dir: Path, limits: MachineLimits) -> MachineLimits:
    """Written whole or not at all: a second process reading meanwhile sees the old file or the new."""
    key = Key(limits.backend, limits.hardware, limits.threads, limits.torch)
    path = key.path(cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = limits.model_copy(update={"cached": False, "path": str(path)})
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".calibration-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(saved.model_dump_json(indent=2, exclude={"cached", "path"}))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return saved


def from_runner(key: Key, result: dict[str, Any] | None, failure: str) -> MachineLimits:
    """The runner's answer as limits; BackendUnavailable when it gave none."""
    try:
        if not isinstance(result, dict) or "bandwidth" not in result:
            raise ValueError(failure or "no answer")
        return MachineLimits(
            backend=key.backend,
            hardware=key.hardware,
            threads=key.threads,
            torch=key.torch,
            bandwidth=[BandwidthPoint(**point) for point in result["bandwidth"]],
            matmul_flops={k: float(v) for k, v in result.get("matmul_flops", {}).items() if float(v) > 0},
            launch_us=float(result["launch_us"]),
            measured_at=time.time(),
            seconds=float(result.get("seconds", 0.0)),
            notes=[str(n) for n in result.get("notes", [])],
        )
    except (KeyError, ValueError, TypeError, ValidationError) as exc:
        raise BackendUnavailable(f"measuring the {key.backend} backend's limits on this host failed: {exc}") from exc


def describe(limits: MachineLimits) -> str:
    """`cpu on x86_64-avx2, 1 thread, torch 2.13.0 (measured 2026-12-04 17:07)`."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(limits.measured_at))
    threads = f"{limits.threads} thread{'s' if limits.threads != 1 else ''}"
    return f"{limits.backend} on {limits.hardware}, {threads}, torch {limits.torch} (measured {when})"


def runner_failure(outcome: Any) -> str:
    """What went wrong when the calibration runner gave no answer."""
    why = (outcome.report.message if outcome.report else "") or (
        f"killed ({outcome.killed})" if outcome.killed else f"ended with exit code {outcome.exit_code}"
    )
    said = (outcome.output_tail.strip().splitlines() or [""])[-1]
    return why + (f" ({said})" if said else "")


# ------------------------------------------- a backend's limits, cached or measured

# `backend` below is a SandboxBackend: read from the cache, else measured by the
# calibration runner as an evaluation's candidate process runs.
_measuring = threading.Lock()  # one measurement at a time in this process: two would halve each other's figures


def key_for(backend: Any) -> Key:
    return Key(backend.name, backend.hardware(), backend.config.eval_threads, machine.host_versions().get("torch", "unknown"))


def cached(backend: Any) -> MachineLimits | None:
    return load(backend.config.cache_dir, key_for(backend))


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
        request = Request(
            token=secrets.token_hex(16),
            task=TASK,
            timeout_s=TIMEOUT_S,
            limits=backend.limits(),
            runner=RUNNER,
            device=backend.device,
            preload=list(getattr(backend, "preload", ())),
            threads=c.eval_threads,
            measures_host=True,
        )
        outcome = backend.pool.run(request, backend.launch(), lambda _event: None)
        limits = from_runner(key, outcome.runner_result, runner_failure(outcome))
        return save(c.cache_dir, limits)
