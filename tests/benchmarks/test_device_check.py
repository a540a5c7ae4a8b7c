"""The device check itself, on a CPU: its hostile stage runs end to end
through the cuda TEST DOUBLE (tests/evaluation/backends/doubles/cuda), on
small inputs, and its summary reads what the stage wrote. This checks the
check (arguments, stages, files, verdicts); it measures nothing on a GPU,
and the double has no streams, so the side-stream candidate cannot be told
apart from an honest one here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOUBLES = ROOT / "tests" / "evaluation" / "backends" / "doubles"


def run_check(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(DOUBLES / "cuda"), str(DOUBLES), str(ROOT)]))
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.device_check", *args, "--out", str(tmp_path), "--scratch", str(tmp_path / "scratch")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )


@pytest.mark.slow
def test_the_hostile_stage_runs_through_the_double_and_the_summary_reports_it(tmp_path):
    proc = run_check("hostile", "--small", tmp_path=tmp_path)
    data = json.loads((tmp_path / "device-check-hostile.json").read_text())
    verdicts = {row["candidate"]: row for row in data["rows"]}
    assert data["device"] == "NVIDIA H200 (test double on CPU)"
    for name in ("patches_event_timer", "caches_output", "mutates_input"):
        assert verdicts[name]["verdict"] == "rejected", verdicts[name]
    assert verdicts["side_stream"]["status"] == "correct", verdicts["side_stream"]
    assert proc.returncode == 1  # the side stream is not flagged without real streams: that goal is not met
    summary = run_check("summary", tmp_path=tmp_path)
    assert "## hostile" in summary.stdout and "goal: every hostile GPU candidate" in summary.stdout
    assert "## timing: no result" in summary.stdout and summary.returncode == 1


@pytest.mark.slow
def test_the_profile_stage_runs_through_the_double_and_reports_the_matmuls_work(tmp_path):
    proc = run_check("profile", "--small", tmp_path=tmp_path)
    data = json.loads((tmp_path / "device-check-profile.json").read_text())
    rows = {row["case"]: row for row in data["rows"]}
    assert rows["calibration"]["gbps_largest"] > 0 and rows["calibration"]["float32_tflops"] > 0
    cublas = rows["cublas matmul"]
    assert cublas["status"] == "correct", cublas
    assert cublas["flops"] == 2 * 256**3 and cublas["bytes"] == 3 * 256 * 256 * 4 and cublas["summary"]
    # The double runs torch ops on the CPU: no device kernels to name, said in a note, so the own-kernel goal is open.
    assert cublas["source"] == "cpu-ops" and cublas["own_kernels"] is None
    assert any("no device kernel" in note for note in cublas["notes"])
    assert "fused triton gelu" in rows  # the Triton kernel needs a real GPU; its row says how it ended
    assert proc.returncode == 1 and [g["met"] for g in data["goals"]] == [False, False]
