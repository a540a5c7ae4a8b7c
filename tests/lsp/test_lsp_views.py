"""Lens wording, staleness, diagnostics placement and hover markdown (pure)."""

from __future__ import annotations

from lsprotocol import types

from sage_engine.kernels import find_kernels
from sage_engine.models import CaseResult, Diagnostic, EvalResult, Profile, ScoredItem, TaskSummary
from sage_mcp.lsp.views import (
    SHORT_CHARS,
    ago,
    code_lenses,
    content_hash,
    failure_headline,
    hover_markdown,
    is_stale,
    order_tasks,
    result_summary,
    to_lsp_diagnostics,
)

SOURCE = """import triton

@triton.jit
def add_kernel(x, y):
    pass

class ModelNew:
    pass
"""


def _result(**kw) -> EvalResult:
    base = dict(status="correct", task="t", backend="cpu", hardware="x86_64", candidate_hash=content_hash(SOURCE), correct=True)
    base.update(kw)
    return EvalResult(**base)


def test_lenses_show_the_result_over_every_kernel_or_offer_to_set_the_task_once():
    kernels = find_kernels(SOURCE)
    shown = code_lenses("file:///k.py", kernels, "softmax", "correct")
    assert [(lens.range.start.line, lens.command.title, lens.command.arguments) for lens in shown] == [
        (k.start_line, "SAGE: correct", ["file:///k.py", k.line]) for k in kernels
    ]
    before = code_lenses("file:///k.py", kernels, "/tasks/softmax/reference.py", None)
    assert {lens.command.title for lens in before} == {"SAGE: benchmark vs reference.py"}
    untasked = code_lenses("file:///k.py", kernels, None, None)
    assert [(lens.range.start.line, lens.command.command) for lens in untasked] == [(kernels[0].start_line, "sage.setTask")]


def test_correct_result_reads_as_speedup_status_backend_age_and_adoptions():
    text = result_summary(_result(speedup=2.314), adopted=2, created_at=1000.0, now=1000.0 + 185)
    assert text == "2.31x vs reference · correct · cpu · 3 min ago · 2 rules adopted"


def test_an_unverified_speedup_reads_as_unverified():
    text = result_summary(
        _result(
            speedup=52.5, speedup_trusted=False, suspicious_speedup=True, speedup_note="unverified: the candidate skipped reading inputs"
        )
    )
    assert text == "52.50x vs reference (unverified) · correct · cpu"


def test_incorrect_result_without_a_message_shows_the_max_abs_error():
    text = result_summary(_result(status="incorrect", correct=False, max_abs_error=0.0312))
    assert text == "incorrect: max abs err 3.1e-02 · cpu"


# As the harness words it: the failing case's first output clause, then the detail.
LONG_MISMATCH = (
    "output: 16000 of 16000 elements exceed tolerance (atol=0.0001, rtol=0.0001, kernelbench); "
    "first at index (0, 0): got 0.0100005, expected 4.57766e-07; max abs error 0.01, max rel error 9.99e+04"
)
CASES = [{"batch_size": 16, "dim": 1000}, {"batch_size": 512, "dim": 4096}, {"batch_size": 32, "dim": 4096, "dtype": "float16"}]


def _mismatch(fail_at: int) -> EvalResult:
    rows = [
        CaseResult(case=c, trial=t, ok=i < fail_at, message="" if i < fail_at else LONG_MISMATCH)
        for i, c in enumerate(CASES)
        for t in range(2)
    ]
    return _result(
        status="incorrect",
        correct=False,
        mismatch=LONG_MISMATCH,
        cases=rows,
        message=f"case {CASES[fail_at]} trial 0: {LONG_MISMATCH}",
        diagnostics=[Diagnostic(category="mismatch", message=LONG_MISMATCH)],
    )


def test_the_lens_and_the_diagnostic_quote_one_short_error_naming_the_failing_case():
    result = _mismatch(fail_at=1)
    headline = failure_headline(result)
    assert headline == "incorrect on case 2/3 (batch_size=512, dim=4096): output: 16000 of 16000 elements exceed tolerance"
    (d,) = to_lsp_diagnostics(result, find_kernels(SOURCE), len(SOURCE.splitlines()), "file:///k.py")
    assert d.message == headline and result_summary(result).startswith(headline + " · cpu")
    # The detail the line leaves out is in the related information, whole.
    (related,) = d.related_information
    assert related.message == result.message and related.location.uri == "file:///k.py"


def test_a_long_error_is_cut_on_the_line_and_kept_whole_beside_it():
    message = "RuntimeError: " + "shape mismatch " * 30
    result = _result(
        status="runtime_error", correct=False, message=message, diagnostics=[Diagnostic(line=8, category="runtime", message=message)]
    )
    (d,) = to_lsp_diagnostics(result, find_kernels(SOURCE), 8, "file:///k.py")
    assert len(d.message) <= SHORT_CHARS and d.message.endswith("…")
    assert d.related_information[0].message == message.strip()
    assert failure_headline(result) == f"runtime error: {d.message}"
    assert len(result_summary(result)) < 2 * SHORT_CHARS


def test_hover_shows_the_whole_error_of_the_last_result():
    result = _mismatch(fail_at=0)
    md = hover_markdown(find_kernels(SOURCE)[1], "softmax", [], [], (result_summary(result), result))
    assert "**Last result**: incorrect on case 1/3" in md and result.message in md


def test_task_picker_puts_tasks_named_like_the_file_first():
    tasks = [
        TaskSummary(id=i, name=i, operator=i, family="f", level=1) for i in ("gelu", "log_softmax", "matmul", "softmax", "masked_softmax")
    ]
    assert [t.id for t in order_tasks("softmax_v2.py", tasks)][:3] == ["softmax", "log_softmax", "masked_softmax"]
    assert [t.id for t in order_tasks("kernel.py", tasks)] == sorted(t.id for t in tasks)


def test_edited_source_is_stale():
    assert not is_stale(_result(), SOURCE)
    assert is_stale(_result(), SOURCE + "\n# edit\n")
    assert "stale" in result_summary(_result(speedup=1.0), stale=True)


def test_ages_round_down_to_the_largest_unit():
    assert ago(None) is None
    assert ago(100.0, now=130.0) == "just now"
    assert ago(0.0, now=2 * 3600 + 5) == "2 h ago"
    assert ago(0.0, now=3 * 86400) == "3 d ago"


def test_diagnostics_keep_their_line_and_compile_gate_errors_go_to_the_kernel_def():
    kernels = find_kernels(SOURCE)
    result = _result(
        status="compile_error",
        correct=False,
        diagnostics=[
            Diagnostic(line=4, category="syntax", message="bad token"),
            Diagnostic(category="ub_overflow", message="UB overflow: 300 KB > 192 KB", kernel="add_kernel"),
            Diagnostic(category="cc_overflow", message="cube core count exceeded"),
        ],
    )
    out = to_lsp_diagnostics(result, kernels, len(SOURCE.splitlines()))
    assert [(d.range.start.line, d.code, d.source) for d in out] == [
        (3, "syntax", "sage"),
        (3, "ub_overflow", "sage"),
        (3, "cc_overflow", "sage"),
    ]
    assert all(d.severity == types.DiagnosticSeverity.Error for d in out)


def test_a_mismatch_without_lines_lands_on_model_new():
    kernels = find_kernels(SOURCE)
    result = _result(status="incorrect", correct=False, mismatch="case 0 trial 1: max abs err 0.5 at [3, 7]")
    (d,) = to_lsp_diagnostics(result, kernels, len(SOURCE.splitlines()))
    assert d.range.start.line == 6 and "max abs err 0.5" in d.message


def test_a_correct_result_has_no_diagnostics():
    assert to_lsp_diagnostics(_result(), find_kernels(SOURCE), 8) == []


def test_hover_lists_rules_and_items_with_utility_and_adoptions_and_escapes_titles():
    kernel = find_kernels(SOURCE)[0]
    item = ScoredItem(
        id=7,
        kind="experience",
        title="Use `tl.max` [fast]",
        content="c",
        utility=0.42,
        n_adopted=3,
        adoption_rate=0.5,
        similarity=0.9,
        exploration=0.0,
        score=1.1,
        rank=1,
    )
    md = hover_markdown(kernel, "gelu", [], [item])
    assert "`add_kernel` (Triton kernel) · task `gelu`" in md
    assert "Use \\`tl.max\\` \\[fast\\] (#7) · utility +0.42 · adopted 3×" in md
    assert "- none yet" in md


def test_hover_says_where_the_last_results_time_went():
    profile = Profile(
        source="cpu-ops",
        bytes=16 << 20,
        bound="memory",
        summary="memory-bound at 38% of measured bandwidth; the reference launches 7 torch ops a call, the candidate 7: nothing was fused",
    )
    result = _result(speedup=0.63, profile=profile)
    md = hover_markdown(find_kernels(SOURCE)[1], "softmax", [], [], (result_summary(result), result))
    assert (
        "**Where the time goes** (memory-bound): memory-bound at 38% of measured bandwidth; the reference "
        "launches 7 torch ops a call, the candidate 7: nothing was fused"
    ) in md


def test_hover_marks_a_physically_impossible_time():
    profile = Profile(
        source="cpu-ops", bound="memory", summary="impossible: its time implies 900 GB/s", impossible="its time implies 900 GB/s"
    )
    result = _result(speedup=3.0, suspicious_speedup=True, profile=profile)
    md = hover_markdown(find_kernels(SOURCE)[1], "softmax", [], [], (result_summary(result), result))
    assert "(memory-bound) · **physically impossible time**: impossible: its time implies 900 GB/s" in md
