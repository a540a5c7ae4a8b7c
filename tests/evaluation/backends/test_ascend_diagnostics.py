"""Classifying Ascend compiler output. The outputs are verbatim from
bishengir-compile 1.2.0 and triton-ascend 3.2.0 runs (paths shortened)."""

from __future__ import annotations

from sage_engine.evaluation.backends.ascend_diagnostics import classify_kernel, compiler_errors

HIVMC_MISSING = """\
[ERROR] Cannot find hivmc under $PATH
[ERROR] Failed to run `hivmc --version`.
[WARNING] Failed to detect hivmc version for backward compatibility
[ERROR] Cannot find hivmc under $PATH
loc("/tmp/sage-eval-1/candidate.py":15:0): error: External hivmc run fails, returning module before running external compiler
[ERROR] Failed to run BiShengIR pipeline
"""

UB_OVERFLOW = """\
[ERROR] Cannot find hivmc under $PATH
[NOTE] Ub overflow detected; automatically set enable-code-motion to false and retrying compilation.
[NOTE] Due to Ub overflow, automatically set enable-code-motion to false, set enable-auto-multi-buffer to false; compilation still failed.
loc("/tmp/sage-eval-1/candidate.py":15:0): error: Failed to run BiShengHIR pipeline

loc("/tmp/sage-eval-1/candidate.py":15:0): error: ub overflow, requires 4194304 bits while 1572864 bits available! (possible reason: tiling basic block is too large or block number is more than what user expect due to multi-buffer feature is enabled and some ops need extra local buffer.)
[ERROR] Failed to run BiShengIR pipeline
"""

# Without line info the location is the .ttadapter module, not the candidate.
CC_OVERFLOW_NO_LINE_INFO = """\
[ERROR] Cannot find hivmc under $PATH
loc("/tmp/cache/gQ/mm_kernel.ttadapter":1:1): error: Failed to run BiShengHIR pipeline
loc("/tmp/cache/gQ/mm_kernel.ttadapter":2:3): error: cc overflow, requires 8388608 bits while 1048576 bits available! (possible reason: tiling basic block is too large or block number is more than what user expect due to multi-buffer feature is enabled and some ops need extra local buffer.)
"""

FP64_EXP = """\
at 4:27:
def k_fp64exp(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(o_ptr + offs, tl.exp(x))
                           ^
ValueError("Expected dtype ['bf16', 'fp16', 'fp32', 'fp8e4nv', 'fp8e5'] but got fp64")"""

RESHAPE = """\
at 4:8:
def k_bad(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    y = tl.reshape(x, (3, BLOCK))
        ^
ValueError('reshape() cannot change total number of elements in tensor')"""


def record(stage: str, output: str, **extra) -> dict:
    return {"kernel": "k", "def_line": 12, "stage": stage, "returncode": 1, "output": output, **extra}


def test_reaching_hivmc_means_the_front_end_passed():
    verdict = classify_kernel(record("bishengir", HIVMC_MISSING), "candidate.py")
    assert verdict.passed and verdict.category is None


def test_ub_overflow_is_categorised_with_the_compilers_own_line_and_bits():
    verdict = classify_kernel(record("bishengir", UB_OVERFLOW), "candidate.py")
    assert not verdict.passed
    assert verdict.category == "ub_overflow"
    assert verdict.message.startswith("ub overflow, requires 4194304 bits while 1572864 bits available!")
    assert verdict.line == 15  # the candidate line bishengir-compile named
    assert verdict.details == {"required_bits": 4194304, "available_bits": 1572864}


def test_cc_overflow_outside_the_candidate_falls_back_to_the_kernel_def_line():
    verdict = classify_kernel(record("bishengir", CC_OVERFLOW_NO_LINE_INFO), "candidate.py")
    assert verdict.category == "cc_overflow"
    assert verdict.line == 12
    assert verdict.details["required_bits"] == 8388608


def test_wrapper_errors_are_not_reported_as_compiler_errors():
    assert compiler_errors(HIVMC_MISSING) == []
    assert [m for _p, _l, m in compiler_errors(UB_OVERFLOW)] == [
        "ub overflow, requires 4194304 bits while 1572864 bits available! (possible reason: tiling basic block is "
        "too large or block number is more than what user expect due to multi-buffer feature is enabled and some "
        "ops need extra local buffer.)"
    ]


def test_dtype_the_ascend_front_end_rejects_is_an_unsupported_op_at_its_line():
    verdict = classify_kernel(record("ttir", FP64_EXP, line=15), "candidate.py")
    assert verdict.category == "unsupported_op"
    assert verdict.line == 15
    assert "but got fp64" in verdict.message


def test_other_front_end_errors_are_lowering_failures():
    verdict = classify_kernel(record("ttir", RESHAPE, line=14), "candidate.py")
    assert verdict.category == "lowering_failed"
    assert "reshape()" in verdict.message


def test_a_failure_without_a_recognisable_error_is_other():
    verdict = classify_kernel(record("bishengir", "Segmentation fault (core dumped)\n", returncode=-11), "candidate.py")
    assert verdict.category == "other"
    assert "Segmentation fault" in verdict.message


def test_a_kernel_that_is_not_module_level_cannot_be_lowered():
    verdict = classify_kernel(record("lookup", "kernel f.<locals>.k is not a module-level @triton.jit function"), "candidate.py")
    assert verdict.category == "other" and "module-level" in verdict.message
