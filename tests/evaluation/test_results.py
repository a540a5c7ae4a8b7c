"""Mapping what the supervisor saw to statuses, and compiler output to lines."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from sage_engine.evaluation.common.diagnostics import compiler_errors
from sage_engine.evaluation.host.results import from_outcome
from sage_engine.evaluation.common.processes import TailBuffer
from sage_engine.evaluation.protocol import CaseResult, Outcome, Report

BASE = {"task": "t", "backend": "cpu", "hardware": "x86_64-avx2", "candidate_hash": "0" * 16}


def status_of(outcome: Outcome) -> tuple[str, str]:
    result = from_outcome(
        outcome,
        base=BASE,
        timeout_s=5,
        max_tasks=128,
        timing_representative=True,
        suspicious_speedup=20.0,
        last_progress="checking case 1/1",
    )
    return result.status, result.message


def test_no_report_is_never_a_pass_whatever_the_exit_code():
    assert status_of(Outcome(exit_code=0))[0] == "crashed"


def test_cpu_time_signal_is_a_timeout_and_sigkill_suggests_memory():
    assert status_of(Outcome(exit_code=-signal.SIGXCPU))[0] == "timeout"
    status, message = status_of(Outcome(exit_code=-signal.SIGKILL))
    assert status == "crashed" and "out-of-memory" in message


def test_a_report_that_comes_with_too_many_processes_is_still_crashed():
    outcome = Outcome(report=Report("correct"), killed="processes")
    assert status_of(outcome)[0] == "crashed"


def test_timeout_says_how_far_correctness_got():
    status, message = status_of(Outcome(killed="timeout", cases=[CaseResult({}, 0, True)]))
    assert status == "timeout" and "while checking case 1/1" in message and "1 correctness trial" in message


def test_tail_buffer_keeps_the_end_and_counts_the_rest():
    tail = TailBuffer(cap=10)
    for _ in range(100):
        tail.add(b"0123456789")
    assert tail.total == 1000 and tail.text().endswith("0123456789") and "990 earlier bytes" in tail.text()


def test_compiler_error_maps_to_the_line_of_the_python_string(tmp_path: Path):
    source = 'import torch\n\nSRC = r"""\nint f(int a) {\n    return a + missing;\n}\n"""\n'
    generated = tmp_path / "main.cpp"
    generated.write_text("#include <torch/extension.h>\n\nint f(int a) {\n    return a + missing;\n}\n")
    log = f"{generated}:4:16: error: 'missing' was not declared in this scope\n"
    (diag,) = compiler_errors(log, source, fallback_line=99)
    assert diag["line"] == 5 and diag["column"] == 16 and "missing" in diag["message"]


def test_unmappable_compiler_error_falls_back_to_the_load_inline_line(tmp_path: Path):
    (diag,) = compiler_errors(f"{tmp_path}/gone.cpp:3:1: error: boom\n", "x = 1\n", fallback_line=7)
    assert diag["line"] == 7


def test_a_speedup_is_trusted_only_where_nothing_says_it_cannot_be():
    from sage_engine.evaluation.host.results import speedup_trust
    from sage_engine.models import Profile

    def trust(speedup, profile=None, degenerate=None, fresh=True):
        return speedup_trust(speedup, profile, degenerate, 20.0, fresh_confirmed=fresh)

    assert trust(None) == (None, None)
    assert trust(3.0) == (True, None)
    trusted, why = trust(50.0)  # no profile to confirm it moved its bytes
    assert trusted is False and why.startswith("unverified: 50.0x is past 20x")
    confirmed = Profile(source="cpu-ops", bytes=1 << 20, peak_gbps=20.0, fewer_flops="an algebraic shortcut")
    assert trust(50.0, profile=confirmed) == (True, None)
    skipped = confirmed.model_copy(update={"impossible": "its time implies 90 GB/s"})
    trusted, why = trust(3.0, profile=skipped)
    assert trusted is False and "skipped reading inputs" in why
    trusted, why = trust(3.0, degenerate="the output was the same for all 3 input sets")
    assert trusted is False and "a constant passes" in why


def test_a_speedup_past_the_suspicious_one_needs_the_fresh_input_re_measurement_too():
    from sage_engine.evaluation.host.results import speedup_trust
    from sage_engine.models import Profile

    moved_its_bytes = Profile(source="cpu-ops", bytes=1 << 20, peak_gbps=20.0)
    trusted, why = speedup_trust(45.0, moved_its_bytes, None, 20.0)
    assert trusted is False and "not re-measured on inputs the candidate had never seen" in why
    assert speedup_trust(45.0, moved_its_bytes, None, 20.0, fresh_confirmed=True) == (True, None)
    assert speedup_trust(3.0, None, None, 20.0) == (True, None)  # below it the timed medians stand


def timed_outcome(fresh_ratio):
    from sage_engine.evaluation.protocol import TimingReport, TimingStats

    stats = lambda ms: TimingStats(median_ms=ms, iqr_ms=0.0, mean_ms=ms, min_ms=ms, reps=10)  # noqa: E731
    timing = TimingReport(reference=stats(4.0), candidate=stats(1.0), case={}, timer="perf_counter")
    checks = {} if fresh_ratio is None else {"fresh_inputs": {"ratio": fresh_ratio, "credited": fresh_ratio}}
    return Outcome(report=Report("correct", timing=timing, checks=checks))


def credited(outcome):
    return from_outcome(outcome, base=BASE, timeout_s=5, max_tasks=128, timing_representative=True, suspicious_speedup=20.0).speedup


def test_the_credited_speedup_is_the_fresh_input_one_where_that_is_lower():
    assert credited(timed_outcome(None)) == 4.0
    assert credited(timed_outcome(1.25)) == 3.2
    assert credited(timed_outcome(0.9)) == 4.0  # faster on new inputs: the timed medians stand


def test_the_credited_speedup_stays_near_what_the_processes_cpu_times_say():
    outcome = timed_outcome(None)
    outcome.report.checks["cpu_bound"] = {"by_timer": 4.0, "by_cpu": 2.9, "credited": 4.0 / (1.15 * 2.9)}
    assert credited(outcome) == pytest.approx(1.15 * 2.9)
    outcome.report.checks["cpu_bound"] = {"by_timer": 4.0, "by_cpu": 4.1, "credited": 1.0}
    assert credited(outcome) == 4.0  # within the bound the timers' medians stand
    outcome = timed_outcome(1.25)
    outcome.report.checks["cpu_bound"] = {"by_timer": 4.0, "by_cpu": 2.9, "credited": 4.0 / (1.15 * 2.9)}
    assert credited(outcome) == pytest.approx(1.15 * 2.9 / 1.25)  # and the fresh inputs' share on top
