"""The cuda backend. On a GPU host the `real_gpu` tests run a Triton and a
PyTorch candidate for real; elsewhere they skip. The control-flow tests use a
TEST DOUBLE (tests/evaluation/backends/doubles/cuda/sitecustomize.py) that
maps the `cuda` device to the CPU in the evaluation children; they measure
nothing on a GPU."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from sage_engine.config import Config
from sage_engine.errors import BackendUnavailable
from sage_engine.evaluation.harness import Harness
from sage_engine.evaluation.backends.device import CudaBackend
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


def gpu_available() -> bool:
    import torch

    return torch.cuda.is_available()


real_gpu = pytest.mark.skipif("not gpu_available()", reason="torch.cuda.is_available() is False: no GPU here")


@pytest.fixture
def cuda_double(monkeypatch, tmp_path, calibration_dir):
    paths = [str(DOUBLES / "cuda"), str(DOUBLES), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    backend = CudaBackend(device_config(tmp_path, calibration_dir))
    yield backend
    backend.close()


@pytest.mark.skipif("gpu_available()", reason="a GPU is present; the refusal path cannot be shown here")
def test_without_a_gpu_the_backend_refuses_with_a_reason(tmp_path):
    backend = CudaBackend(device_config(tmp_path))
    status = backend.status()
    assert not status.ready and "is_available() is False" in status.reason
    assert "CUDA build of torch" in status.setup
    # The harness, the one way in, checks the backend before anything runs.
    with Harness(device_config(tmp_path)) as harness, pytest.raises(BackendUnavailable, match="cuda"):
        harness.evaluate(load_task(GELU), (GELU / "solutions" / "cpu_erf.py").read_text(), backend="cuda", trials=1)


def test_a_limit_that_breaks_device_start_up_leaves_the_backend_not_ready_saying_why(monkeypatch, tmp_path):
    # The probe starts the device as an evaluation would: in the sandbox, under
    # the evaluation's memory cap, which here leaves no room for the driver's state.
    paths = [str(DOUBLES / "cuda"), str(DOUBLES), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    backend = CudaBackend(device_config(tmp_path).replace(eval_memory_mb=64))
    try:
        status = backend.status()
    finally:
        backend.close()
    assert not status.ready
    # What failed, in the runtime's words: the driver's state (caught by the probe: "device start-up failed"),
    # or a library's segment the child still had to load (the probe process failed: "device probe failed").
    assert re.match(r"device (start-up|probe) failed: .*(Memory|Import)Error", status.reason), status.reason


@pytest.mark.slow
def test_double_runs_the_whole_cuda_path_and_names_the_device(cuda_double):
    status = cuda_double.status()
    assert status.ready and status.hardware == "NVIDIA H200 (test double on CPU)"
    result = cuda_double.evaluate(load_task(GELU), (GELU / "solutions" / "cpu_erf.py").read_text(), trials=1)
    assert result.status == "correct", (result.message, result.stdout_tail[-2000:])
    assert result.backend == "cuda" and result.hardware == "NVIDIA H200 (test double on CPU)"
    assert result.timing_representative and result.speedup and result.speedup > 0
    assert result.compile_info.timer.endswith("child.device:cuda_timer")
    assert result.compile_info.device_time_us is None  # the profiler path is NPU-only
    assert "device_time_us" not in result.model_dump(mode="json")["compile_info"]


@real_gpu
@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("task_id,solution", [("softmax", "triton_softmax.py"), ("gelu", "cpu_erf.py")])
def test_real_gpu_checks_and_times_a_candidate(tmp_path, task_id, solution):
    backend = CudaBackend(device_config(tmp_path))
    try:
        result = backend.evaluate(load_task(SUITE / task_id), (SUITE / task_id / "solutions" / solution).read_text(), trials=2)
    finally:
        backend.close()
    assert result.status == "correct", (result.message, result.stdout_tail[-2000:])
    assert "test double" not in result.hardware
    assert result.candidate_timing and result.candidate_timing.reps >= 4


@real_gpu
@pytest.mark.gpu
def test_real_gpu_timer_counts_side_stream_work_and_leaves_out_the_round_trip():
    import torch
    from triton.testing import do_bench

    from sage_engine.evaluation.common.timing import event_timer

    a = torch.randn(4096, 4096, device="cuda")
    stream = torch.cuda.Stream()

    def on_side_stream(_i):
        with torch.cuda.stream(stream):
            a @ a

    plain, side = event_timer("cuda", 256), event_timer("cuda", 256)
    t_plain = min(plain(lambda _i: a @ a, 5) for _ in range(3))
    t_side = min(side(on_side_stream, 5) for _ in range(3))
    assert side.all_streams and not plain.all_streams
    assert 0.8 < t_side / t_plain < 1.3  # the side stream's matmul counted in full
    assert abs(t_plain * 1e3 / do_bench(lambda: a @ a, return_mode="median") - 1) < 0.05


def _worker_process(launcher_pid: int) -> int:
    """The worker's interpreter below the process the pool started (bubblewrap, a shell)."""
    from sage_engine.evaluation.common import processes

    table, frontier = processes.proc_table(), [launcher_pid]
    while frontier:
        pid = frontier.pop()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if argv[1:3] == [b"-m", b"sage_engine.evaluation.worker"]:
            return pid
        frontier += [p for p, info in table.items() if info.ppid == pid]
    raise AssertionError(f"no worker below {launcher_pid}")


def _gone_within(pid: int, limit: float) -> bool:
    """Whether the process ends within `limit` s (a sandbox's PID namespace is torn down after its worker returns)."""
    import time

    from sage_engine.evaluation.common import processes

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        info = processes.proc_table().get(pid)
        if info is None or info.zombie:
            return True
        time.sleep(0.05)
    return False


def _vm_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) << 10
    raise AssertionError("no VmSize")


@pytest.mark.slow
def test_a_warm_device_worker_waits_with_its_libraries_loaded_and_the_device_not_started(cuda_double):
    from tests.evaluation.backends.doubles.device_double import RESERVED_BYTES

    assert cuda_double.status().ready  # the probe ran in a worker of its own; a spare started meanwhile
    (spare,) = cuda_double.pool.ready(cuda_double.launch(), timeout=120)
    pid = _worker_process(spare.proc.pid)
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert "libtriton" in maps  # the backend's libraries, imported ahead
    assert _vm_bytes(pid) < RESERVED_BYTES  # but no device start-up: the double reserves a terabyte there
    result = cuda_double.evaluate(load_task(GELU), (GELU / "solutions" / "cpu_erf.py").read_text(), trials=1)
    assert result.status == "correct", result.message
    assert _gone_within(pid, 10.0)  # it served that one evaluation, then went
    assert cuda_double.pool.ready(cuda_double.launch(), timeout=120)  # and another waits in its place


@pytest.mark.slow
def test_double_carries_a_profile_and_says_why_ncu_metrics_are_missing(monkeypatch, tmp_path, calibration_dir):
    import shutil

    paths = [str(DOUBLES / "cuda"), str(DOUBLES), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    ncu = shutil.which("ncu")
    if ncu is not None:  # this host has Nsight Compute: hide it, the missing-ncu path is under test
        monkeypatch.setenv(
            "PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p).resolve() != Path(ncu).resolve().parent)
        )
    backend = CudaBackend(device_config(tmp_path, calibration_dir).replace(profile_ncu=True))
    try:
        result = backend.evaluate(load_task(GELU), (GELU / "solutions" / "cpu_erf.py").read_text(), trials=1)
    finally:
        backend.close()
    assert result.status == "correct", (result.message, result.stdout_tail[-2000:])
    p = result.profile
    assert p is not None and p.bytes == 2 * 64 * 16384 * 4 and p.ncu is None
    assert p.calibration.startswith("cuda on NVIDIA H200 (test double on CPU), 1 thread")
    assert any("ncu is not on PATH" in n for n in p.notes), p.notes
    # This torch's profiler lists no CUDA activity: it is not asked to record any (it would fail at every op).
    assert any("profiler has no CUPTI" in n for n in p.notes), p.notes
