"""This host's measured limits: measured once by the sandboxed runner, cached
under the cache dir, and read by every later process on the host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sage_engine.engine import Engine
from sage_engine.errors import BackendUnavailable
from sage_engine.evaluation.harness import Harness
from sage_engine.evaluation.host import calibration
from sage_engine.evaluation.host.tasks import load_task

from tests.evaluation.support import fast_config

SOLUTION = Path(__file__).resolve().parents[2] / "sage_engine" / "suite" / "tasks" / "leaky_relu" / "solutions" / "cpu_clamp_parts.py"


def sage(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SAGE_CACHE_DIR": str(cache), "SAGE_DB": str(cache / "memory.db")}
    return subprocess.run(
        [str(Path(sys.executable).with_name("sage")), *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_calibration_is_measured_once_and_reused_by_another_process(tmp_path):
    first = sage("--json", "backends", "calibrate", cache=tmp_path)
    assert first.returncode == 0, first.stderr
    measured = json.loads(first.stdout)
    assert measured["cached"] is False and measured["backend"] == "cpu" and measured["threads"] == 1
    sizes = [b["bytes"] for b in measured["bandwidth"]]
    assert sizes == sorted(sizes) and sizes[0] <= 1 << 15 and sizes[-1] >= 1 << 28
    assert all(b["copy_gbps"] > 0 and b["read_gbps"] > 0 for b in measured["bandwidth"])
    assert measured["matmul_flops"]["float32"] > 1e8 and 0 < measured["launch_us"] < 1000
    path = Path(measured["path"])
    assert path.parent == tmp_path / "calibration" and path.exists()
    written = path.stat().st_mtime_ns

    again = sage("--json", "backends", "calibrate", cache=tmp_path)
    cached = json.loads(again.stdout)
    assert cached["cached"] is True and cached["measured_at"] == measured["measured_at"]

    # Another server on this host evaluates against the same file, measuring nothing.
    with Harness(fast_config(tmp_path)) as harness:
        result = harness.evaluate(load_task("leaky_relu"), SOLUTION.read_text())
    assert result.status == "correct", result.message
    limits = calibration.load(tmp_path, calibration.Key("cpu", result.hardware, 1, result.versions["torch"]))
    assert result.profile.calibration == calibration.describe(limits)
    assert path.stat().st_mtime_ns == written


def test_a_forced_or_unreadable_calibration_is_measured_again(tmp_path):
    with Engine(fast_config(tmp_path)) as engine:
        first = engine.calibrate("cpu")
        forced = engine.calibrate("cpu", force=True)
        assert not forced.cached and forced.measured_at > first.measured_at
        Path(forced.path).write_text("{not json")
        remeasured = engine.calibrate("cpu")
        assert not remeasured.cached and remeasured.measured_at > forced.measured_at
        assert engine.calibrate("cpu").cached


def test_another_thread_count_torch_or_device_has_a_calibration_of_its_own(tmp_path):
    key = calibration.Key("cpu", "x86_64-avx2", 1, "2.13.0")
    paths = {
        k.path(tmp_path)
        for k in (
            key,
            calibration.Key("cpu", "x86_64-avx2", 4, "2.13.0"),
            calibration.Key("cpu", "x86_64-avx2", 1, "2.14.0"),
            calibration.Key("cpu", "x86_64-avx512", 1, "2.13.0"),
        )
    }
    assert len(paths) == 4


def test_calibrating_a_backend_that_times_nothing_says_so(tmp_path):
    with Engine(fast_config(tmp_path)) as engine:
        with pytest.raises(BackendUnavailable, match="times nothing representative"):
            engine.calibrate("ascend-compile")
