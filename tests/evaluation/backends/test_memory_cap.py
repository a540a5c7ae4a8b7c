"""The memory cap counts memory used, not address space reserved.

A device runtime reserves address space by the terabyte when it starts
(PROT_NONE, never touched: cuInit does, and CANN maps device memory into the
process): a candidate doing the same is judged on its output on every
backend, while a hog still stops at the cap with a message that names the
setting. The cuda and npu cases run through the TEST DOUBLES (doubles/),
which map those devices to the CPU and reserve a terabyte at their start-up
as the real drivers do; they measure nothing on a device."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sage_engine.config import Config
from sage_engine.evaluation.backends.base import get_backend
from sage_engine.evaluation.host.tasks import load_task
from tests.support.engine import share_calibration

from backend_support import SUITE

DOUBLES = Path(__file__).parent / "doubles"
GELU = SUITE / "gelu"
RESERVES_A_TERABYTE = """
import mmap

# What a device runtime does when it starts: address space it may never touch.
_RESERVED = mmap.mmap(-1, 1 << 40, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000, prot=0)
""" + (GELU / "solutions" / "cpu_erf.py").read_text()


def quick_config(tmp_path: Path, calibration: Path, **changes) -> Config:
    """Small budgets, and the session's calibration (each backend's host measured once)."""
    base = dict(
        db_path=tmp_path / "m.db",
        cache_dir=share_calibration(tmp_path / "cache", calibration),
        correctness_trials=1,
        timing_budget_s=0.05,
        timing_min_reps=3,
        timing_max_reps=10,
        timing_warmup=1,
    )
    base.update(changes)
    return Config(**base)


@pytest.fixture
def backend_named(monkeypatch, tmp_path, calibration_dir, request):
    """A backend by name on its default memory cap; cuda and npu through their doubles."""
    made = []

    def make(name: str, **changes):
        if name == "ascend-compile":
            config = request.getfixturevalue("ascend_env").replace(correctness_trials=1, **changes)
            backend = get_backend(name, config)
        else:
            if name in ("cuda", "npu"):
                paths = [str(DOUBLES / name), str(DOUBLES), os.environ.get("PYTHONPATH", "")]
                monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
            if name == "npu":
                from sage_engine.evaluation.backends.device import NpuBackend

                monkeypatch.syspath_prepend(str(DOUBLES / "npu"))  # find_spec only
                backend = NpuBackend(quick_config(tmp_path, calibration_dir, **changes), environ={"ASCEND_HOME_PATH": str(tmp_path)})
            else:
                backend = get_backend(name, quick_config(tmp_path, calibration_dir, **changes))
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cpu", "triton", "cuda", "npu", "ascend-compile"])
def test_a_candidate_that_reserves_a_terabyte_of_address_space_is_judged_on_its_output(backend_named, name):
    backend = backend_named(name)
    status = backend.status()
    assert status.ready, status.reason
    result = backend.evaluate(load_task(GELU), RESERVES_A_TERABYTE, trials=1)
    assert result.status == "correct", (result.message, result.stdout_tail[-1500:])


def test_a_hog_stops_at_the_default_cap_and_is_told_which_setting_raises_it(backend_named):
    backend = backend_named("cpu")
    hog = RESERVES_A_TERABYTE.replace("        xf = x.float()", "        hog = torch.ones(3 << 30)  # 12 GiB\n        xf = x.float()")
    result = backend.evaluate(load_task(GELU), hog, trials=1)
    assert result.status == "runtime_error", result.message
    assert result.diagnostics[0].category == "memory"
    assert "eval_memory_mb" in result.message and "SAGE_EVAL_MEMORY_MB" in result.diagnostics[0].message
    assert backend.evaluate(load_task(GELU), RESERVES_A_TERABYTE, trials=1).status == "correct"


def test_shared_memory_the_cap_does_not_count_is_watched(backend_named):
    backend = backend_named("cpu", eval_memory_mb=1024)
    hog = RESERVES_A_TERABYTE.replace(
        "        xf = x.float()",
        (
            "        shared = mmap.mmap(-1, 4 << 30, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)\n"
            "        for at in range(0, 4 << 30, 4096):\n"
            "            shared[at] = 1  # every page: 4 GiB used unless stopped\n"
            "        xf = x.float()"
        ),
    )
    result = backend.evaluate(load_task(GELU), hog, trials=1)
    assert result.status == "runtime_error", result.message
    assert result.diagnostics[0].category == "memory" and "shared memory" in result.message
