"""Inputs cross once: the reference process makes each trial's inputs and the
candidate process gets its own copy in shared memory, with only a small
header through the inputs pipe. Whatever the candidate does to its copy, the
reference sees it there itself, not from the candidate's word."""

from __future__ import annotations

import pytest

from sage_engine.evaluation.host.tasks import load_task

TRIALS = 2
ROWS, COLS = 1024, 1024  # 4 MiB of float32: a pipe copy would show
TASK = f"""import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn({ROWS}, {COLS})]


def get_init_inputs():
    return []
"""
RELU = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp(min=0)
"""
# In place, and with its own process's reports of changed and aliased inputs
# silenced, by names no static check knows.
RELU_IN_PLACE_QUIETLY = """import sys as _s

import torch
import torch.nn as nn

_checks = getattr(_s, "mod" + "ules")["sage_engine.evaluation.child." + "guards"]
setattr(_checks, "mut" + "ated", lambda before, after: [])
setattr(_checks, "ali" + "ased", lambda outputs, inputs: [])


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu_(x)
"""


@pytest.fixture(scope="module")
def task():
    return load_task(TASK)


def test_inputs_reach_the_candidate_in_shared_memory_with_only_headers_through_the_pipe(harness, task):
    result = harness.evaluate(task, RELU, trials=TRIALS)
    assert result.status == "correct", result.message
    inputs = result.compile_info.checks.inputs
    size = ROWS * COLS * 4
    assert inputs.via == "shared memory"
    assert inputs.shared_bytes >= TRIALS * size
    assert inputs.pipe_bytes < 16 << 10  # headers: a few hundred bytes a trial


def test_a_candidate_that_changes_its_input_and_silences_its_own_process_is_caught(harness, task):
    result = harness.evaluate(task, RELU_IN_PLACE_QUIETLY, trials=TRIALS)
    assert result.status == "rejected", (result.status, result.message)
    assert "modifies input 0 in place" in result.message
