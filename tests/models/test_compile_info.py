"""`EvalResult.compile_info` is typed, yet reads on the wire as the free-form
dict it was: the same keys, none added, so clients and stored attempts keep
working."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from sage_engine.evaluation.host.results import compile_info
from sage_engine.evaluation.protocol import Report, TimingReport, TimingStats
from sage_engine.models import CompileInfo, EvalResult
from sage_engine.services.episodes import attempt_result

BASE = {"task": "relu", "backend": "cpu", "hardware": "x86_64-avx2", "candidate_hash": "0" * 16, "status": "correct"}
STATS = TimingStats(median_ms=1.0, iqr_ms=0.1, mean_ms=1.0, min_ms=0.9, reps=10)

# As SAGE stored them before compile_info was typed: a timed cpu result (its
# checks from a worker that reported `fresh_inputs_checked` as a bool, and a
# key this SAGE does not know), an npu result whose device profile failed, and
# an ascend-compile failure with the front end's details on its kernel.
STORED = [
    {
        "timed_case": {"batch_size": 64, "dim": 8192},
        "timer": "sage_engine.evaluation.common.timing:perf_counter",
        "checks": {
            "threads": [1, 1],
            "inputs": {"via": "shared memory", "shared_bytes": 4096, "pipe_bytes": 300, "on_device": False},
            "cpus": [0, 1],
            "inner_calls": {"reference": 8, "candidate": 8},
            "fresh_inputs_checked": True,
            "fresh_inputs": {"ratio": 1.02, "credited": 1.0, "by_own_clock": {"candidate": 1.0, "reference": 0.98}},
            "a_check_from_another_version": [1, None],
        },
    },
    {"timed_case": {}, "timer": "sage_engine.evaluation.child.device:npu_timer", "device_time_us": {"error": "device profile failed: x"}},
    {
        "chip": "Ascend910B3",
        "kernels": [
            {
                "kernel": "add_kernel",
                "grid": [4],
                "config": None,
                "front_end": "ub_overflow",
                "required_bits": 10486016,
                "available_bits": 1572864,
            }
        ],
        "autotune": {"add_kernel": {"configs": 2, "checked": ["BLOCK=64", "BLOCK=65536"]}},
        "front_end": "failed",
        "category": "ub_overflow",
        "tags": ["ub_overflow", "Ascend910B3"],
    },
    {},
]


@pytest.mark.parametrize("info", STORED, ids=["cpu", "npu", "ascend-compile", "empty"])
def test_a_stored_attempt_loads_and_goes_back_on_the_wire_as_it_was_stored(info):
    row = {"id": 7, "episode_id": None, "created_at": 1.0, "result": json.dumps({**BASE, "compile_info": info})}
    result = attempt_result(row)
    assert isinstance(result.compile_info, CompileInfo)
    assert result.model_dump(mode="json")["compile_info"] == info
    assert json.loads(result.model_dump_json())["compile_info"] == info
    # exclude_none (the MCP tasks' wire) drops only what was null before too.
    assert result.model_dump(mode="json", exclude_none=True)["compile_info"] == _without_nulls(info)


def test_the_surfaces_read_compile_info_by_field():
    result = EvalResult.model_validate({**BASE, "compile_info": STORED[0] | STORED[2]})
    info = result.compile_info
    assert info.timed_case == {"batch_size": 64, "dim": 8192}
    assert info.checks is not None and info.checks.inputs is not None and info.checks.inputs.via == "shared memory"
    assert info.checks.fresh_inputs is not None and info.checks.fresh_inputs.credited == 1.0
    assert info.kernels is not None and info.kernels[0].front_end == "ub_overflow"
    assert info.autotune is not None and info.autotune["add_kernel"].checked == ["BLOCK=64", "BLOCK=65536"]
    assert info.chip == "Ascend910B3" and info.front_end == "failed" and info.tags == ["ub_overflow", "Ascend910B3"]


def test_a_result_without_timing_carries_only_the_keys_its_worker_reported():
    report = Report("correct", checks={"threads": [1, 1]})
    assert compile_info(report).model_dump(mode="json") == {"checks": {"threads": [1, 1]}}
    assert compile_info(Report("incorrect")).model_dump(mode="json") == {}


def test_a_timed_result_names_its_case_and_timer_and_no_device_time_it_did_not_measure():
    timing = TimingReport(reference=STATS, candidate=STATS, case={"n": 4}, timer="t:clock")
    info = compile_info(Report("correct", timing=timing)).model_dump(mode="json")
    assert info == {"timed_case": {"n": 4}, "timer": "t:clock"}
    timing.device_time_us = {"reference": 3.5, "candidate": 2.0}
    assert compile_info(Report("correct", timing=timing)).device_time_us.candidate == 2.0


def test_a_misspelt_compile_info_key_is_refused():
    with pytest.raises(ValidationError):
        CompileInfo.model_validate({"frontend": "passed"})


def test_the_output_schema_describes_compile_info_field_by_field():
    schema = EvalResult.model_json_schema(mode="serialization")
    fields = schema["$defs"]["CompileInfo"]["properties"]
    assert {"timed_case", "timer", "checks", "device_time_us", "interpreter", "autotune", "chip", "front_end", "kernels"} <= set(fields)


def _without_nulls(value):
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value
