"""`sage bench` on files the user names, wherever they lie."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.errors import InvalidInput
from sage_mcp.cli import cli

SOLUTION = Path(__file__).parents[2] / "sage_engine" / "suite" / "tasks" / "leaky_relu" / "solutions" / "cpu_clamp_parts.py"


def test_a_candidate_named_on_the_command_line_is_benched_outside_the_working_directory(tmp_path):
    candidate = tmp_path / "mine" / "leaky.py"
    candidate.parent.mkdir()
    shutil.copy(SOLUTION, candidate)
    assert Path.cwd() not in candidate.parents
    env = {
        "SAGE_CANDIDATE_ROOTS": None,
        "SAGE_CACHE_DIR": str(tmp_path / "cache"),
        "SAGE_CORRECTNESS_TRIALS": "1",
        "SAGE_TIMING_BUDGET_S": "0.05",
        "SAGE_TIMING_MIN_REPS": "3",
    }
    result = CliRunner().invoke(
        cli, ["--db", str(tmp_path / "m.db"), "--json", "bench", str(candidate), "--task", "leaky_relu"], env=env, catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "correct"
    # A server's client naming the same file is still held to the roots.
    with Engine(Config(db_path=tmp_path / "m.db", cache_dir=tmp_path / "cache")) as engine:
        with pytest.raises(InvalidInput, match="outside the allowed directories"):
            engine.evaluate(str(candidate), "leaky_relu")


def _bench(tmp_path: Path, calibration_dir: Path, *flags: str):
    from tests.support.engine import share_calibration

    env = {
        "SAGE_CANDIDATE_ROOTS": None,
        "SAGE_CACHE_DIR": str(share_calibration(tmp_path / "cache", calibration_dir)),
        "SAGE_CORRECTNESS_TRIALS": "1",
        "SAGE_TIMING_BUDGET_S": "0.05",
        "SAGE_TIMING_MIN_REPS": "3",
    }
    return CliRunner().invoke(
        cli, ["--db", str(tmp_path / "m.db"), "bench", str(SOLUTION), "--task", "leaky_relu", *flags], env=env, catch_exceptions=False
    )


def test_bench_with_profile_prints_where_the_time_goes(tmp_path, calibration_dir):
    result = _bench(tmp_path, calibration_dir, "--profile")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "where the time goes (cpu-ops)" in out and "share of measured bandwidth" in out
    assert "kernel time / timed median" in out
    assert "aten::leaky_relu" in out and "aten::clamp" in out  # the reference's op, the candidate's
    assert "a call moves at least 16.0 MiB (inputs plus outputs)" in out
    assert "where the time goes: memory-bound at " in out


def test_bench_without_profile_prints_only_the_sentence(tmp_path, calibration_dir):
    result = _bench(tmp_path, calibration_dir)
    assert result.exit_code == 0, result.output
    assert "where the time goes: memory-bound at " in result.output, result.output
    assert "share of measured bandwidth" not in result.output


def test_bench_ncu_on_the_cpu_backend_says_why_there_are_no_metrics(tmp_path, calibration_dir):
    result = _bench(tmp_path, calibration_dir, "--ncu")
    assert result.exit_code == 0, result.output
    assert "note: ncu metrics were asked for, but they are read on the cuda backend only, not cpu" in result.output


def test_backends_calibrate_prints_the_measured_limits(tmp_path, calibration_dir):
    from tests.support.engine import share_calibration

    env = {"SAGE_CACHE_DIR": str(share_calibration(tmp_path / "cache", calibration_dir))}
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "m.db"), "backends", "calibrate"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "bandwidth" in result.output and "256.0 MiB" in result.output and "float32" in result.output
    assert "one smallest op, back to back: " in result.output and "cache: " in result.output


def test_bench_plot_writes_the_results_roofline_and_a_png_of_it(tmp_path, calibration_dir):
    import xml.etree.ElementTree as ET

    from sage_engine.report.png import PNG_MAGIC, find_chromium
    from tests.support.parts import require

    chart = tmp_path / "plots" / "leaky.svg"
    result = _bench(tmp_path, calibration_dir, "--plot", str(chart))
    assert result.exit_code == 0, result.output
    assert "where the time goes (cpu-ops)" in result.output  # --plot implies --profile
    assert f"roofline: {chart}" in result.stderr
    root = ET.fromstring(chart.read_text())
    assert root.get("data-mode") == "bandwidth"  # leaky_relu: no FLOP formula, bytes against the envelope
    assert {e.get("class") for e in root.iter("{http://www.w3.org/2000/svg}circle") if e.get("class")} == {
        "point reference",
        "point candidate",
    }
    if find_chromium() is None:
        require("chromium", "chromium is not installed (apt-get install -y chromium)")
    with Engine(Config(db_path=tmp_path / "m.db", cache_dir=tmp_path / "cache")) as engine:
        stored = engine.last_result(str(SOLUTION))
        assert stored is not None and stored.profile is not None
        png = engine.write_roofline(stored, tmp_path / "leaky.png")
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_bench_plot_refuses_a_format_it_cannot_write_before_evaluating(tmp_path, calibration_dir):
    result = _bench(tmp_path, calibration_dir, "--plot", str(tmp_path / "leaky.pdf"))
    assert result.exit_code == 2 and "FILE.svg or FILE.png" in result.output
    assert "correct" not in result.output  # nothing was evaluated
