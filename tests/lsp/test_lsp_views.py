"""Lens wording, staleness, diagnostics placement and hover markdown (pure)."""

from __future__ import annotations

from lsprotocol import types

from sage_engine.kernels import find_kernels
from sage_engine.models import Diagnostic, EvalResult, ScoredItem
from sage_mcp.lsp_views import ago, content_hash, hover_markdown, is_stale, result_summary, to_lsp_diagnostics

SOURCE = '''import triton

@triton.jit
def add_kernel(x, y):
    pass

class ModelNew:
    pass
'''


def _result(**kw) -> EvalResult:
    base = dict(status="correct", task="t", backend="cpu", hardware="x86_64", candidate_hash=content_hash(SOURCE), correct=True)
    base.update(kw)
    return EvalResult(**base)


def test_correct_result_reads_as_speedup_status_backend_age_and_adoptions():
    text = result_summary(_result(speedup=2.314), adopted=2, created_at=1000.0, now=1000.0 + 185)
    assert text == "2.31x vs reference · correct · cpu · 3 min ago · 2 rules adopted"


def test_incorrect_result_shows_the_max_abs_error():
    text = result_summary(_result(status="incorrect", correct=False, max_abs_error=0.0312))
    assert text == "incorrect · max abs err 3.1e-02 · cpu"


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
    result = _result(status="compile_error", correct=False, diagnostics=[
        Diagnostic(line=4, category="syntax", message="bad token"),
        Diagnostic(category="ub_overflow", message="UB overflow: 300 KB > 192 KB", kernel="add_kernel"),
        Diagnostic(category="cc_overflow", message="cube core count exceeded"),
    ])
    out = to_lsp_diagnostics(result, kernels, len(SOURCE.splitlines()))
    assert [(d.range.start.line, d.code, d.source) for d in out] == [
        (3, "syntax", "sage"), (3, "ub_overflow", "sage"), (3, "cc_overflow", "sage"),
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
    item = ScoredItem(id=7, kind="experience", title="Use `tl.max` [fast]", content="c", utility=0.42, n_adopted=3,
                      adoption_rate=0.5, similarity=0.9, exploration=0.0, score=1.1, rank=1)
    md = hover_markdown(kernel, "gelu", [], [item])
    assert "`add_kernel` (Triton kernel) · task `gelu`" in md
    assert "Use \\`tl.max\\` \\[fast\\] (#7) · utility +0.42 · adopted 3×" in md
    assert "- none yet" in md
