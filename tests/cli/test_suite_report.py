"""`sage suite run --report`: the example solutions' results as one page."""

from __future__ import annotations

import re

from click.testing import CliRunner

from sage_mcp.cli import cli


def test_suite_run_writes_a_report_page_with_each_solutions_row_and_roofline(tmp_path, calibration_dir):
    from tests.support.engine import share_calibration

    report = tmp_path / "out" / "run.html"
    env = {
        "SAGE_CACHE_DIR": str(share_calibration(tmp_path / "cache", calibration_dir)),
        "SAGE_CORRECTNESS_TRIALS": "1",
        "SAGE_TIMING_BUDGET_S": "0.05",
        "SAGE_TIMING_MIN_REPS": "3",
    }
    result = CliRunner().invoke(
        cli,
        ["--db", str(tmp_path / "m.db"), "suite", "run", "--tasks", "leaky_relu", "--report", str(report)],
        env=env,
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert f"report: {report}" in result.stderr
    page = report.read_text()
    assert "<h1>SAGE suite run on cpu</h1>" in page and "complete: 1 row" in page
    row = re.search(r"<tr><td>leaky_relu<br>.*?</tr>", page, re.S).group(0)
    assert "cpu_clamp_parts" in row and '<span class="badge correct">correct</span>' in row
    assert 'class="roofline compact"' in row and 'class="point candidate"' in row
    assert "memory" in row  # its binding limit


def test_a_report_must_be_an_html_file(tmp_path):
    result = CliRunner().invoke(
        cli,
        ["--db", str(tmp_path / "m.db"), "suite", "run", "--tasks", "leaky_relu", "--report", str(tmp_path / "run.txt")],
        catch_exceptions=False,
    )
    assert result.exit_code == 2 and "a suite report is an .html file" in result.output
