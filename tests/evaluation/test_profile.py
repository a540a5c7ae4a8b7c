"""Where the time goes, end to end on the cpu backend: torch's real profiler
in the sandboxed reference and candidate processes, the call's bytes and
FLOPs from the reference, judged against this host's real calibration."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sage_engine.evaluation.host import results
from sage_engine.evaluation.backends.base import _ProgressRelay
from sage_engine.evaluation.host import roofline
from sage_engine.evaluation.host.tasks import load_task

from tests.evaluation.support import as_own_candidate, fast_config

SUITE = Path(__file__).resolve().parents[2] / "sage_engine" / "suite" / "tasks"
TINY = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2 + 1


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
"""


def bundled(task_id: str, solution: str):
    task = load_task(task_id)
    return task, (SUITE / task_id / "solutions" / solution).read_text()


def test_a_memory_bound_bundled_example_reports_its_share_of_measured_bandwidth(harness):
    task, source = bundled("leaky_relu", "cpu_clamp_parts.py")
    result = harness.evaluate(task, source)
    assert result.status == "correct", result.message
    p = result.profile
    assert p is not None and p.source == "cpu-ops"
    assert p.bytes == 2 * 64 * 32768 * 4  # the timed (largest) case: its input and its output, float32
    assert p.flops is None  # an element-wise op does no work torch's FLOP formulas count
    for side in (p.reference, p.candidate):
        assert 0 < side.bandwidth_share <= 1.2, side
        assert side.bound == "memory"
    assert [k.name for k in p.reference.kernels] == ["aten::leaky_relu"]
    assert p.candidate.launches > p.reference.launches  # the example clamps both halves and adds them
    assert p.summary.startswith("memory-bound at ") and "of measured bandwidth" in p.summary
    assert "the reference launches 1 torch op a call" in p.summary
    assert p.impossible is None and not result.suspicious_speedup
    assert result.phases["profile"] > 0
    # Each side's kernels are held against its timed median: the same calls clocked
    # without the profiler, its own cost measured (and out of the kernel times).
    for side, timing in ((p.reference, result.reference_timing), (p.candidate, result.candidate_timing)):
        assert side.bare_us > 0 and 0 < side.overhead_us < side.kernel_us, side
        assert side.agreement == pytest.approx(side.kernel_us / (timing.median_ms * 1000))
        assert (abs(side.agreement - 1) <= roofline.AGREEMENT) == (side.agreement_note == "")
    assert p.limits is not None and p.limits.backend == "cpu"  # what its chart draws, kept with it


def test_a_matmul_reports_its_flops_and_is_compute_bound(harness):
    task, source = bundled("matmul", "cpu_k_panels.py")
    result = harness.evaluate(task, source)
    assert result.status == "correct", result.message
    p = result.profile
    assert p.flops == 2 * 512**3  # the timed 512 x 512 x 512 case, by torch's formula
    assert p.peak_flops and p.reference.achieved_flops > 0 and p.candidate.achieved_flops > 0
    assert p.reference.bound == p.candidate.bound == "compute"
    assert p.summary.startswith("compute-bound at ") and "GFLOP/s" in p.summary
    assert p.reference.compute_share > p.reference.bandwidth_share


def test_a_tiny_task_is_launch_latency_bound(harness):
    task = load_task(TINY)
    result = harness.evaluate(task, as_own_candidate(task))
    assert result.status == "correct", result.message
    p = result.profile
    assert p.bytes == 2 * 64 * 4
    assert p.reference.bound == p.candidate.bound == "latency"
    assert p.summary.startswith("launch/latency-bound: ")
    assert "the reference launches 2 torch ops a call, the candidate 2: nothing was fused" in p.summary


def test_a_candidate_whose_time_is_impossible_is_flagged_by_the_bandwidth_check(harness):
    task, source = bundled("leaky_relu", "cpu_clamp_parts.py")
    backend = harness.backend("cpu")
    _, outcome = backend.run_sandbox(task, source, 1, _ProgressRelay(None, 1))
    timing = outcome.report.timing
    # The candidate's measured median, made a thousand times shorter than it was.
    timing.candidate = dataclasses.replace(timing.candidate, median_ms=timing.candidate.median_ms / 1000)
    result = results.from_outcome(
        outcome,
        base=backend.base_fields(task, source),
        timeout_s=60,
        max_tasks=128,
        timing_representative=True,
        suspicious_speedup=1e9,
        limits=backend.calibration(),
        rules=roofline.Rules(),
    )
    p = result.profile
    assert p.candidate.bandwidth_share > 1.1 >= p.reference.bandwidth_share
    assert p.impossible and "GB/s" in p.impossible and "cannot have read every input byte" in p.impossible
    assert result.suspicious_speedup  # flagged although the speedup is below suspicious_speedup
    assert any(d.severity == "warning" and d.message.startswith("physically impossible time") for d in result.diagnostics)
    assert p.summary.startswith("impossible: ")


def test_a_candidate_that_fails_only_while_profiled_keeps_its_result(harness):
    source = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        if torch.autograd._profiler_enabled():
            raise RuntimeError("not while profiled")
        return torch.clamp(x, min=0)
"""
    task = load_task(str(Path(__file__).parent / "fixtures" / "tasks" / "relu"))
    result = harness.evaluate(task, source)
    assert result.status == "correct" and result.speedup, result.message
    p = result.profile
    assert p.candidate.kernels == [] and p.reference.kernels
    assert any(n.startswith("candidate: ") and "not while profiled" in n for n in p.notes), p.notes


def test_with_the_profile_off_results_carry_none_and_nothing_is_calibrated(tmp_path):
    from sage_engine.evaluation.harness import Harness

    config = fast_config(tmp_path, profile=False)
    task, source = bundled("leaky_relu", "cpu_clamp_parts.py")
    with Harness(config) as h:
        result = h.evaluate(task, source)
    assert result.status == "correct" and result.profile is None and "profile" not in result.phases
    # The folder is made (and hidden from sandboxes) at start; nothing is measured into it.
    assert not any((tmp_path / "calibration").iterdir())
