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
    env = {"SAGE_CANDIDATE_ROOTS": None, "SAGE_CACHE_DIR": str(tmp_path / "cache"), "SAGE_CORRECTNESS_TRIALS": "1",
           "SAGE_TIMING_BUDGET_S": "0.05", "SAGE_TIMING_MIN_REPS": "3"}
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "m.db"), "--json", "bench", str(candidate),
                                      "--task", "leaky_relu"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "correct"
    # A server's client naming the same file is still held to the roots.
    with Engine(Config(db_path=tmp_path / "m.db", cache_dir=tmp_path / "cache")) as engine:
        with pytest.raises(InvalidInput, match="outside the allowed directories"):
            engine.evaluate(str(candidate), "leaky_relu")
