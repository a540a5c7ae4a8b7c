"""The interpreter checks' pure parts: which autotune configs are checked,
and bf16 rounding (against torch's own bf16 conversion)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")

from sage_engine.evaluation.child.fidelity.autotune import describe, sample_configs  # noqa: E402
from sage_engine.evaluation.child.fidelity.bf16 import to_bf16, to_f32  # noqa: E402


def configs(*blocks: tuple[int, int]) -> list:
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}) for m, n in blocks]


def test_few_configs_are_all_checked():
    cs = configs((32, 32), (64, 64), (128, 32))
    assert sample_configs(cs, 4) == cs


def test_many_configs_are_sampled_with_the_first_and_the_largest_tiles():
    cs = configs((32, 32), (64, 32), (32, 64), (64, 64), (128, 64), (256, 128), (128, 128), (64, 128), (16, 16))
    chosen = [describe(c) for c in sample_configs(cs, 4)]
    assert len(chosen) == 4
    assert chosen[0] == "BLOCK_M=32, BLOCK_N=32" and "BLOCK_M=256, BLOCK_N=128" in chosen


def test_bf16_rounds_to_nearest_even_as_torch_does():
    values = torch.randn(10000) * torch.logspace(-30, 30, 10000)
    values = torch.cat([values, torch.tensor([float("inf"), -float("inf"), 0.0, -0.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8])])
    ours = torch.from_numpy(to_bf16(values.numpy()).view(np.int16)).view(torch.bfloat16)
    assert torch.equal(ours, values.to(torch.bfloat16))
    assert torch.equal(torch.from_numpy(to_f32(to_bf16(values.numpy()))), values.to(torch.bfloat16).float())


def test_bf16_keeps_nan_a_nan():
    assert np.isnan(to_f32(to_bf16(np.array([float("nan")], dtype=np.float32)))).all()


def test_a_failure_that_depends_on_the_triton_version_names_the_version():
    from sage_engine.evaluation.child.fidelity.run import InterpreterChecks
    from sage_engine.evaluation.protocol import Fail

    checks = object.__new__(InterpreterChecks)  # only its message rewriting: no interpreter needed
    checks.version_note = "Triton 3.9.0 as installed here, while the team's hosts run 3.7.1"
    text = "ModelNew.forward raised InterpreterError: NotImplementedError('Block pointers have been removed in favor of the tensor descriptor API')"
    event = checks.with_version_note(Fail(status="runtime_error", message=text, diagnostics=[{"message": text}]))
    assert "block pointers (tl.make_block_ptr, tl.advance) were removed in Triton 3.9" in event.message
    assert "this verdict is for Triton 3.9.0 as installed here, while the team's hosts run 3.7.1" in event.message
    assert event.diagnostics[0]["message"] == event.message
