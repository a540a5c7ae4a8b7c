"""The npu backend. No NPU exists on the machines these tests run on: the
control-flow tests use a TEST DOUBLE (tests/evaluation/backends/doubles/npu/
torch_npu) that maps the `npu` device to the CPU and backs NPU events and the
profiler with perf_counter. They prove the real backend code path (checks,
probe, sandbox child, device runner, cache-flushing event timer, profiler CSV
parsing, results naming the device); they measure nothing on hardware."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sage_engine.config import Config
from sage_engine.errors import BackendUnavailable
from sage_engine.evaluation.harness import Harness
from sage_engine.evaluation.backends.base import get_backend
from sage_engine.evaluation.child.device import op_statistic_rows, op_statistic_us
from sage_engine.evaluation.backends.device import NpuBackend
from sage_engine.evaluation.host.tasks import load_task
from tests.support.engine import share_calibration

from backend_support import SUITE

DOUBLES = Path(__file__).parent / "doubles"
GELU = SUITE / "gelu"


def device_config(tmp_path: Path, calibration: Path | None = None) -> Config:
    """Small budgets; `calibration`: the session's calibration folder, so the
    double's host is measured once (seconds), not once a test."""
    return Config(
        db_path=tmp_path / "m.db",
        cache_dir=share_calibration(tmp_path / "cache", calibration) if calibration else tmp_path / "cache",
        correctness_trials=1,
        timing_budget_s=0.1,
        timing_min_reps=4,
        timing_max_reps=20,
        timing_warmup=1,
    )


@pytest.fixture
def npu_double(monkeypatch, tmp_path, calibration_dir):
    """Put the torch_npu double on the children's path; CANN 'installed' in tmp."""
    paths = [str(DOUBLES / "npu"), str(DOUBLES), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.syspath_prepend(str(DOUBLES / "npu"))  # find_spec only; never imported here
    backend = NpuBackend(device_config(tmp_path, calibration_dir), environ={"ASCEND_HOME_PATH": str(tmp_path / "Ascend")})
    yield backend
    backend.close()


def test_without_cann_the_backend_refuses_and_says_how_to_set_up(tmp_path):
    backend = NpuBackend(device_config(tmp_path), environ={})
    status = backend.status()
    assert not status.ready
    assert "ASCEND_HOME_PATH" in status.reason
    assert "set_env.sh" in status.setup and "torch_npu" in status.setup
    # The harness, the one way in, checks the backend before anything runs (no CANN here either).
    with Harness(device_config(tmp_path)) as harness, pytest.raises(BackendUnavailable, match="CANN is not set up"):
        harness.evaluate(load_task(GELU), (GELU / "solutions" / "cpu_erf.py").read_text(), backend="npu", trials=1)


def test_without_torch_npu_the_backend_refuses_and_setup_installs_nothing(tmp_path):
    backend = NpuBackend(device_config(tmp_path), environ={"ASCEND_TOOLKIT_HOME": str(tmp_path)})
    status = backend.status()
    assert not status.ready and "torch_npu is not installed" in status.reason
    with pytest.raises(BackendUnavailable, match="never on a machine without CANN"):
        backend.setup()
    assert not (tmp_path / "cache").exists()


def test_registry_builds_the_npu_backend(tmp_path):
    backend = get_backend("npu", device_config(tmp_path))
    assert isinstance(backend, NpuBackend)


def test_profiler_csv_total_is_the_sum_over_op_types(tmp_path):
    out = tmp_path / "w_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / "op_statistic.csv").write_text(
        "Device_id,OP Type,Core Type,Count,Total Time(us),Avg Time(us),Min Time(us),Max Time(us),Ratio(%)\n"
        "0,triton_softmax,AI_VECTOR_CORE,20,400.0,20.0,19.0,21.0,80\n"
        "0,Cast,AI_VECTOR_CORE,20,100.0,5.0,5.0,5.0,20\n"
    )
    assert op_statistic_us(str(tmp_path)) == pytest.approx(500.0)
    assert op_statistic_us(str(tmp_path / "nowhere")) is None
    assert op_statistic_rows(str(tmp_path)) == [("triton_softmax", 20.0, 400.0), ("Cast", 20.0, 100.0)]


@pytest.mark.slow
def test_double_runs_the_whole_npu_path_and_names_the_device(npu_double):
    status = npu_double.status()
    assert status.ready and status.hardware == "Ascend910B3 (test double on CPU)"
    result = npu_double.evaluate(load_task(GELU), (GELU / "solutions" / "cpu_erf.py").read_text(), trials=1)
    assert result.status == "correct", (result.message, result.stdout_tail[-2000:])
    assert result.backend == "npu" and result.hardware == "Ascend910B3 (test double on CPU)"
    assert result.timing_representative and result.speedup and result.speedup > 0
    assert result.compile_info.timer.endswith("child.device:npu_timer")
    device_time = result.compile_info.device_time_us
    assert device_time.reference > 0 and device_time.candidate > 0
    # The profile reads the same op statistics per op type (the double writes one row, its own).
    p = result.profile
    assert p.source == "npu-ops" and [k.name for k in p.candidate.kernels] == ["DoubleForward"]
    assert p.candidate.launches == 1 and p.candidate.kernel_us > 0 and p.bytes == 2 * 64 * 16384 * 4
    assert p.own_kernels is False  # the same op as the reference's: no kernel of its own


@pytest.mark.slow
def test_double_reports_a_wrong_candidate_as_incorrect(npu_double):
    wrong = (GELU / "solutions" / "cpu_erf.py").read_text().replace("mul_(0.5)", "mul_(0.49)")
    assert wrong != (GELU / "solutions" / "cpu_erf.py").read_text()
    result = npu_double.evaluate(load_task(GELU), wrong, trials=1)
    assert result.status == "incorrect" and result.mismatch
