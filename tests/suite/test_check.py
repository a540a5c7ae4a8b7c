"""`sage suite check`: references evaluated as their own candidates through
the real harness, with each failure given a cause."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from sage_engine.config import Config
from sage_engine.errors import InvalidInput, NotFound
from sage_engine.models import EvalResult
from sage_engine.report.causes import classify
from sage_engine.evaluation.host.tasks import list_suite
from sage_engine.suite.check import TaskCheck, check_suite, select_tasks, summarize
from sage_engine.suite.importers import import_tasks
from sage_mcp.cli import cli

import benchmark_trees


def _hand_written(folder: Path, tid: str, forward: str, inputs: str = "[torch.randn(4, 8)]") -> None:
    body = f"""
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def forward(self, x):
                {forward}


        def get_inputs():
            return {inputs}


        def get_init_inputs():
            return []
    """
    (folder / tid).mkdir(parents=True)
    (folder / tid / "reference.py").write_text(textwrap.dedent(body).lstrip())
    (folder / tid / "task.json").write_text(json.dumps({"name": tid, "operator": tid, "family": "test", "level": 1}))


def fast_config(tmp_path: Path) -> Config:
    return Config(
        db_path=tmp_path / "m.db",
        cache_dir=tmp_path / "cache",
        correctness_trials=2,
        timing_budget_s=0.05,
        timing_min_reps=3,
        timing_max_reps=10,
        timing_warmup=1,
    )


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """One suite with a task of every kind, checked once with two jobs."""
    tmp = tmp_path_factory.mktemp("check")
    suite = tmp / "suite"
    trees = tmp / "trees"
    import_tasks(benchmark_trees.multikernelbench(trees / "mkb"), suite)
    import_tasks(benchmark_trees.kernelbench(trees / "kb") / "KernelBench" / "level2", suite)
    import_tasks(trees / "kb" / "KernelBench" / "level3", suite)
    _hand_written(suite, "noisy", "return x + torch.rand_like(x)")
    _hand_written(suite, "broken_inputs", "return x", inputs="[torch.randn(4)[[9]]]")
    # Dies as MultiKernelBench's embedding_dense_backward does, whose builder draws an index one past the table.
    _hand_written(suite, "aborts", "import os; os.abort()")
    # An operator only torch_npu registers, as MultiKernelBench's relu_backward calls it.
    _hand_written(suite, "npu_only_op", "return torch.ops.aten.relu_backward(x, x)")
    # Updates in place, inside a list argument: each side has its own inputs, refreshed in place when timed.
    _hand_written(suite, "scale_list_in_place", "return torch.cat([g.mul_(2.0) for g in x])", inputs="[[torch.randn(4)]]")
    # Its output is the same whatever the input (a layer whose weights are zero): a constant passes.
    _hand_written(suite, "constant_output", "return x.sum(-1, keepdim=True) * 0.0 + 1.5")
    # Its outputs are all far under atol: zeros would pass the plain tolerance, not one relative to their scale.
    _hand_written(suite, "tiny_outputs", "return torch.softmax(x, dim=-1)", inputs="[torch.rand(2, 393216)]")
    calls = []
    report = check_suite(
        list_suite(suite), fast_config(tmp), backend="cpu", jobs=2, progress=lambda done, total, message: calls.append((done, total))
    )
    return report, calls


def test_sound_references_are_correct_against_themselves_with_speedup_near_one(checked):
    report, _ = checked
    by_id = {t.id: t for t in report.tasks}
    for tid in ("relu_mini", "gelu_mini", "gemm_dropout_mini"):
        assert by_id[tid].status == "correct", by_id[tid]
        assert 0.5 < by_id[tid].speedup < 2.0
    assert by_id["gelu_mini"].cases == 3 and by_id["gelu_mini"].benchmark == "MultiKernelBench"


def test_a_task_a_constant_passes_is_named_degenerate_and_tiny_outputs_are_not(checked):
    report, _ = checked
    by_id = {t.id: t for t in report.tasks}
    constant = by_id["constant_output"]
    assert constant.status == "correct" and constant.degenerate
    assert "the same for all" in constant.degenerate or "a constant passes" in constant.degenerate
    assert constant.nulls["constant"] == "correct"
    assert report.summary["degenerate"] == {"constant_output": constant.degenerate}
    tiny = by_id["tiny_outputs"]
    assert tiny.degenerate is None and tiny.nulls == {"zeros": "incorrect", "constant": "incorrect"}
    sound = by_id["relu_mini"]
    assert sound.degenerate is None and set(sound.nulls.values()) == {"incorrect"}
    assert {v["name"] for v in sound.variants} >= {"odd", "small"}


def test_tasks_that_cannot_run_here_say_why_and_are_left_out_of_the_share(checked):
    report, _ = checked
    by_id = {t.id: t for t in report.tasks}
    rotary = by_id["rotary_mini"]
    assert (rotary.status, rotary.cause) == ("cannot_run", "needs NPU")
    assert "torch_npu" in rotary.detail and rotary.seconds == 0.0
    missing = by_id["selective_scan_mini"]
    assert (missing.status, missing.cause) == ("cannot_run", "missing dependency: mamba_ssm")
    unsupported = by_id["npu_only_op"]
    assert (unsupported.status, unsupported.cause) == ("cannot_run", "unsupported on this backend")
    assert unsupported.detail == "this torch has no operator aten.relu_backward"
    summary = report.summary
    assert summary["tasks"] == 12 and summary["runnable"] == 9
    assert summary["cannot_run"]["needs NPU"] == ["rotary_mini"]
    assert summary["cannot_run"]["unsupported on this backend"] == ["npu_only_op"]


def test_failures_are_grouped_by_cause(checked):
    report, _ = checked
    by_id = {t.id: t for t in report.tasks}
    assert by_id["noisy"].cause == "not reproducible: random numbers in forward"
    assert by_id["broken_inputs"].cause == "reference fails: IndexError"
    assert by_id["aborts"].cause == "reference fails: SIGABRT"
    assert by_id["scale_list_in_place"].status == "correct", by_id["scale_list_in_place"]
    assert report.summary["failures"] == {
        "not reproducible: random numbers in forward": ["noisy"],
        "reference fails: IndexError": ["broken_inputs"],
        "reference fails: SIGABRT": ["aborts"],
    }
    assert report.summary["goals"]["correct_pct"]["met"] is False


def test_progress_counts_every_task_once(checked):
    report, calls = checked
    assert sorted(done for done, _ in calls) == list(range(1, len(report.tasks) + 1))
    assert {total for _, total in calls} == {len(report.tasks)}


def test_summary_reports_median_quartiles_and_tenth_percentile_of_self_speedup():
    checks = [TaskCheck(f"t{i}", "b", "correct", speedup=s, seconds=float(i)) for i, s in enumerate([0.8, 1.0, 1.0, 1.1, 1.3])]
    checks.append(TaskCheck("npu", "b", "cannot_run", cause="needs NPU"))
    summary = summarize(checks)
    assert summary["runnable"] == 5 and summary["correct_pct"] == 100.0
    assert summary["self_speedup"]["median"] == 1.0
    assert (summary["self_speedup"]["q1"], summary["self_speedup"]["q3"]) == (1.0, 1.1)
    assert summary["self_speedup"]["p10"] == 0.88 and summary["self_speedup"]["under_0_9"] == 1
    assert summary["slowest"] == {"id": "t4", "seconds": 4.0}
    assert summary["goals"]["median_self_speedup"]["met"] and summary["goals"]["slowest_task_s"]["met"]


def test_bad_selections_are_refused(tmp_path):
    with pytest.raises(NotFound, match="unknown task ids"):
        select_tasks(None, ["no_such_task"])
    with pytest.raises(InvalidInput, match="does not exist"):
        select_tasks(tmp_path / "missing")
    with pytest.raises(InvalidInput, match="jobs must be"):
        check_suite(select_tasks(None, ["softmax"]), fast_config(tmp_path), jobs=0)


def test_cli_check_prints_json_and_exits_one_when_a_runnable_task_fails(tmp_path):
    suite = tmp_path / "suite"
    _hand_written(suite, "double", "return x * 2")
    _hand_written(suite, "noisy", "return x + torch.rand_like(x)")
    # No SAGE_CANDIDATE_ROOTS, and the suite lies outside the working
    # directory: a folder typed on the command line is the user's own choice.
    env = {
        "SAGE_CANDIDATE_ROOTS": None,
        "SAGE_CACHE_DIR": str(tmp_path / "cache"),
        "SAGE_CORRECTNESS_TRIALS": "1",
        "SAGE_TIMING_BUDGET_S": "0.05",
        "SAGE_TIMING_MIN_REPS": "3",
    }
    assert Path.cwd() not in suite.parents
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", str(tmp_path / "m.db"), "suite", "check", str(suite), "--json"], env=env, catch_exceptions=False)
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert [(t["id"], t["status"]) for t in report["tasks"]] == [("double", "correct"), ("noisy", "failed")]
    assert report["summary"]["correct_pct"] == 50.0 and report["backend"] == "cpu"
    table = runner.invoke(
        cli, ["--db", str(tmp_path / "m.db"), "suite", "check", "--suite", str(suite), "--tasks", "double"], env=env, catch_exceptions=False
    )
    assert table.exit_code == 0, table.output
    assert "1 tasks, 1 runnable, 1 correct (100.0%)" in table.stdout


@pytest.mark.parametrize(
    ("status", "message", "cause"),
    [
        # Either process may die first; both run the reference's code.
        ("crashed", "the reference process died (SIGABRT) while checking case 17/30", "reference fails: SIGABRT"),
        ("crashed", "the child died of SIGSEGV (invalid memory access: out-of-bounds pointer or index)", "reference fails: SIGSEGV"),
        ("crashed", "the child was killed (SIGKILL); most often the kernel's out-of-memory killer", "out of memory"),
        (
            "runtime_error",
            "the reference's forward failed: RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. "
            "DefaultCPUAllocator: can't allocate memory: you tried to allocate 1073741824 bytes.",
            "out of memory",
        ),
        ("runtime_error", "the reference's forward failed: IndexError: index 2605 is out of bounds", "reference fails: IndexError"),
        # A fault of the harness itself, as sparse inputs once caused, against an operator the backend lacks.
        (
            "runtime_error",
            "the candidate process failed inside the sandbox: NotImplementedError: Could not run "
            "'aten::equal' with arguments from the 'SparseCPU' backend.",
            "harness: NotImplementedError",
        ),
        (
            "runtime_error",
            "the reference's forward failed: NotImplementedError: Could not run 'aten::_foo' with arguments from the 'SparseCPU' backend.",
            "unsupported on this backend",
        ),
        # Sparse inputs are handled; sparse outputs are not compared yet.
        (
            "incorrect",
            "case default trial 0: output: expected a dense torch.Tensor, got a torch.sparse_coo / cpu tensor",
            "harness: sparse tensor outputs",
        ),
    ],
)
def test_causes_name_what_failed(status, message, cause):
    result = EvalResult(status=status, message=message, task="t", backend="cpu", hardware="cpu", candidate_hash="0")
    assert classify(result)[0] == cause


def test_a_check_killed_mid_run_keeps_the_rows_it_finished(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    suite = tmp_path / "suite"
    _hand_written(suite, "a_quick", "return torch.relu(x)")
    _hand_written(suite, "b_hangs", "import time; time.sleep(3600); return x")
    rows = tmp_path / "rows.jsonl"
    report = tmp_path / "report.html"
    env = {
        **os.environ,
        "SAGE_DB": str(tmp_path / "m.db"),
        "SAGE_CACHE_DIR": str(tmp_path / "cache"),
        "SAGE_CORRECTNESS_TRIALS": "1",
        "SAGE_TIMING_BUDGET_S": "0.05",
        "SAGE_TIMING_MIN_REPS": "3",
    }
    sage = [sys.executable, "-c", "from sage_mcp.cli import main; main()"]
    proc = subprocess.Popen(
        [*sage, "suite", "check", str(suite), "--rows", str(rows), "--report", str(report)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (rows.exists() and rows.read_text().endswith("\n")):
            assert proc.poll() is None, "the check ended on its own; the hanging task should have held it"
            assert time.monotonic() < deadline, "no row within 120 s"
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # cut short, as a lost host or a closed terminal would
        proc.wait(timeout=30)
    (row,) = [json.loads(line) for line in rows.read_text().splitlines()]
    assert row["id"] == "a_quick" and row["status"] == "correct"
    # The report page was rewritten with that row before the row was appended: readable, and marked unfinished.
    page = report.read_text()
    assert "in progress: 1 of 2 rows so far" in page and "<tr><td>a_quick</td>" in page and "b_hangs" not in page
    assert page.rstrip().endswith("</html>")


def test_a_device_suite_checks_several_tasks_at_once_by_default_and_a_cpu_one_one_at_a_time():
    import os

    from sage_engine.suite.check import default_jobs

    assert default_jobs("cpu") == default_jobs("triton") == 1
    assert default_jobs("cuda") == default_jobs("npu") == max(1, min(8, (os.cpu_count() or 2) // 2))
