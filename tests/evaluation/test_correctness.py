from __future__ import annotations

import pytest
import torch

from sage_engine.evaluation.child.correctness import as_output_list, compare_outputs, tolerance_for


def test_close_float32_outputs_pass_and_report_errors():
    ref = torch.randn(4, 5)
    result = compare_outputs([ref], [ref + 1e-6], mode="kernelbench")
    assert result.ok and 0 < result.max_abs_error < 1e-5


def test_mismatch_names_the_first_bad_index_and_values():
    ref = torch.zeros(3, 4)
    cand = ref.clone()
    cand[1, 2] = 0.5
    result = compare_outputs([ref], [cand], mode="kernelbench")
    assert not result.ok
    assert "index (1, 2)" in result.message and "got 0.5" in result.message
    assert result.max_abs_error == 0.5


def test_shape_and_dtype_must_match():
    ref = torch.zeros(2, 3)
    assert "shape" in compare_outputs([ref], [torch.zeros(3, 2)], mode="kernelbench").message
    assert "dtype" in compare_outputs([ref], [ref.double()], mode="kernelbench").message


def test_non_finite_candidate_fails_where_reference_is_finite():
    ref = torch.ones(4)
    cand = ref.clone()
    cand[2] = float("nan")
    result = compare_outputs([ref], [cand], mode="kernelbench")
    assert not result.ok and "non-finite" in result.message


def test_matching_nan_and_inf_positions_pass():
    ref = torch.tensor([1.0, float("nan"), float("inf")])
    assert compare_outputs([ref], [ref.clone()], mode="kernelbench").ok


def test_fp16_gets_a_looser_tolerance_than_fp32():
    assert tolerance_for(torch.float16, "kernelbench") == (1e-2, 1e-2)
    assert tolerance_for(torch.float32, "kernelbench") == (1e-4, 1e-4)
    assert tolerance_for(torch.int32, "kernelbench") is None


def test_npukernelbench_fails_only_when_both_abs_and_rel_errors_are_large():
    ref = torch.tensor([1000.0, 1e-6])
    # 0.5 abs error on 1000 is 5e-4 relative: fine in npukernelbench mode, not in kernelbench mode.
    cand = ref + torch.tensor([0.5, 0.0])
    assert compare_outputs([ref], [cand], mode="npukernelbench").ok
    assert not compare_outputs([ref], [cand], mode="kernelbench").ok
    # tiny reference, abs error 5e-3 (> 1e-3) and rel error huge: fails.
    cand = ref + torch.tensor([0.0, 5e-3])
    assert not compare_outputs([ref], [cand], mode="npukernelbench").ok


def test_task_override_replaces_the_default_tolerance():
    ref = torch.zeros(3)
    cand = ref + 5e-4
    assert not compare_outputs([ref], [cand], mode="kernelbench").ok
    assert compare_outputs([ref], [cand], mode="kernelbench", override={"float32": {"atol": 1e-3}}).ok


def test_integer_outputs_compare_exactly():
    ref = torch.tensor([1, 2, 3])
    result = compare_outputs([ref], [torch.tensor([1, 2, 4])], mode="kernelbench")
    assert not result.ok and "exact" in result.message


def test_tuples_of_outputs_are_compared_one_by_one():
    a, b = torch.ones(2), torch.zeros(2)
    assert as_output_list((a, (b,))) == [a, b]
    result = compare_outputs([a, b], [a, a], mode="kernelbench")
    assert not result.ok and result.message.startswith("output 1")
    assert "expected 2 output(s), got 1" in compare_outputs([a, b], [a], mode="kernelbench").message


def test_outputs_far_under_atol_are_compared_relative_to_their_scale():
    ref = torch.softmax(torch.rand(2, 393216), dim=1)  # every value about 2.5e-6
    zeros = torch.zeros_like(ref)
    assert compare_outputs([ref], [zeros], mode="kernelbench").ok  # the plain tolerance lets zeros through
    judged = compare_outputs([ref], [zeros], mode="kernelbench", small_output_factor=10.0)
    assert not judged.ok and "relative to the output's scale" in judged.message
    assert not compare_outputs([ref], [torch.full_like(ref, 1 / 393216)], mode="kernelbench", small_output_factor=10.0).ok
    close = compare_outputs([ref], [ref * (1 + 1e-6)], mode="kernelbench", small_output_factor=10.0)
    assert close.ok and close.scale == pytest.approx(float(ref.max())) and close.atol == pytest.approx(1e-4 * close.scale)
    npu = compare_outputs([ref], [zeros], mode="npukernelbench", small_output_factor=10.0)
    assert not npu.ok


def test_outputs_of_ordinary_size_keep_the_usual_tolerance():
    ref = torch.randn(64, 64)
    result = compare_outputs([ref], [ref + 5e-5], mode="kernelbench", small_output_factor=10.0)
    assert result.ok and result.scale is None
    all_zero = torch.zeros(8)  # nothing to scale by: a constant output is told apart elsewhere
    assert compare_outputs([all_zero], [all_zero + 1e-6], mode="kernelbench", small_output_factor=10.0).ok


def test_at_large_input_values_the_absolute_tolerance_grows_with_the_outputs_scale():
    # A row sum of values x100 that cancels to near zero: summed in another
    # order it is off by rounding of its terms, not by a wrong kernel.
    torch.manual_seed(0)
    x = torch.randn(64, 129) * 100.0
    ref, other_order = x.sum(1), x.flip(1).sum(1)
    assert not compare_outputs([ref], [other_order + 2e-3], mode="kernelbench").ok
    assert compare_outputs([ref], [other_order + 2e-3], mode="kernelbench", scaled_inputs=True).ok
    off = 0.05 * float(ref.abs().max())  # 5% of the output's scale: no rounding
    assert not compare_outputs([ref], [other_order + off], mode="kernelbench", scaled_inputs=True).ok


def _attention(q, k, v):
    causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
    scores = (q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5).masked_fill(causal, float("-inf"))
    return torch.softmax(scores, -1) @ v


def _flash_attention(q, k, v, block=16):
    """The same attention as a flash kernel computes it: key blocks, an online
    softmax in base 2 with the scale folded into the queries."""
    n = q.shape[-2]
    qs = q * (q.shape[-1] ** -0.5 * 1.4426950408889634)
    top = torch.full((*q.shape[:-1], 1), float("-inf"))
    total, out = torch.zeros_like(top), torch.zeros_like(q)
    rows = torch.arange(n).unsqueeze(1)
    for j in range(0, n, block):
        s = (qs @ k[..., j : j + block, :].transpose(-1, -2)).masked_fill(rows < torch.arange(j, j + block), float("-inf"))
        new = torch.maximum(top, s.amax(-1, keepdim=True))
        p, alpha = torch.exp2(s - new), torch.exp2(top - new)
        total, out, top = total * alpha + p.sum(-1, keepdim=True), out * alpha + p @ v[..., j : j + block, :], new
    return out / total


def test_at_large_input_values_correct_attention_in_another_order_passes_and_overflow_still_fails():
    # Scores x10^4: near-tied scores swap under rounding, so two correct float32
    # kernels differ by far more than rtol x the output's scale.
    failed_before = 0
    for seed in range(40):
        torch.manual_seed(seed)
        q, k, v = (torch.randn(1, 2, 128, 64) * 100.0 for _ in range(3))
        ref, flash = _attention(q, k, v), _flash_attention(q, k, v)
        scale = float(ref.abs().max())
        failed_before += not bool(((flash - ref).abs() <= 1e-4 * scale + 1e-4 * ref.abs()).all())
        assert compare_outputs([ref], [flash], mode="kernelbench", scaled_inputs=True).ok, seed
        scores = torch.exp(q @ k.transpose(-1, -2))  # no maximum subtracted: overflows
        unsafe = scores / scores.sum(-1, keepdim=True) @ v
        assert not compare_outputs([ref], [unsafe], mode="kernelbench", scaled_inputs=True).ok
    assert failed_before > 0  # the draws include ones the old rtol x scale floor failed


@pytest.mark.parametrize("mode", ["kernelbench", "npukernelbench"])
def test_outputs_of_many_blocks_are_judged_whole_and_report_their_largest_errors(mode):
    from sage_engine.evaluation.child.correctness import FAST_BLOCK

    ref = torch.randn(3 * FAST_BLOCK + 17)
    cand = ref.clone()
    cand[2 * FAST_BLOCK + 5] += 3e-6  # the largest error, in the third block
    result = compare_outputs([ref], [cand], mode=mode)
    assert result.ok and result.max_abs_error == pytest.approx(3e-6, rel=0.2)
    cand[-1] += 1.0  # wrong in the last, short block only
    assert not compare_outputs([ref], [cand], mode=mode).ok
    cand[-1] = float("nan")
    assert not compare_outputs([ref], [cand], mode=mode).ok
