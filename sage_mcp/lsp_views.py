"""What the language server shows, as pure functions of engine values:
lens titles, diagnostics and hover markdown. Kept apart from the protocol
code so each wording can be tested without a server."""

from __future__ import annotations

import time

from lsprotocol import types

from sage_engine.evaluation.hostinfo import candidate_hash
from sage_engine.kernels import Kernel
from sage_engine.models import Diagnostic, EvalResult, Item, ScoredItem

SOURCE = "sage"
# Compile-gate failures that belong to a whole kernel rather than one line.
KERNEL_CATEGORIES = frozenset({"ub_overflow", "cc_overflow", "grid_too_large"})
_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "info": types.DiagnosticSeverity.Information,
}


def content_hash(text: str) -> str:
    """The hash the harness stores as EvalResult.candidate_hash."""
    return candidate_hash(text)


def is_stale(result: EvalResult, text: str) -> bool:
    """True when the buffer is no longer the source that was evaluated."""
    return content_hash(text) != result.candidate_hash


def ago(then: float | None, now: float | None = None) -> str | None:
    if then is None:
        return None
    seconds = max(0.0, (time.time() if now is None else now) - then)
    if seconds < 60:
        return "just now"
    for size, unit in ((86_400, "d"), (3_600, "h"), (60, "min")):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return None  # unreachable: seconds >= 60 here


def result_summary(
    result: EvalResult, *, stale: bool = False, adopted: int = 0, created_at: float | None = None,
    now: float | None = None,
) -> str:
    """One line for a lens or a status bar, e.g.
    "2.31x vs reference · correct · cpu · 3 min ago · 2 rules adopted"."""
    if result.correct:
        head = f"{result.speedup:.2f}x vs reference · correct" if result.speedup is not None else "correct"
        parts = [head]
    elif result.status == "incorrect":
        err = f" · max abs err {result.max_abs_error:.1e}" if result.max_abs_error is not None else ""
        parts = [f"incorrect{err}"]
    else:
        parts = [result.status.replace("_", " ")]
    parts.append(result.backend)
    if (when := ago(created_at, now)) is not None:
        parts.append(when)
    if adopted:
        parts.append(f"{adopted} rule{'s' if adopted != 1 else ''} adopted")
    if result.suspicious_speedup:
        parts.append("suspicious speedup")
    if stale:
        parts.append("stale")
    return " · ".join(parts)


def to_lsp_diagnostics(result: EvalResult, kernels: list[Kernel], line_count: int) -> list[types.Diagnostic]:
    """EvalResult diagnostics as LSP diagnostics. Lines are 1-based in the
    result; a compile-gate error that names a kernel but no line goes on that
    kernel's def line; anything else without a line goes on the first kernel
    (or the top of the file) so it is never silently dropped."""
    out = []
    for d in result.diagnostics:
        line = _diagnostic_line(d, kernels, line_count)
        end_line = max(line, min((d.end_line or d.line or line + 1) - 1, line_count - 1)) if d.line else line
        start_char = max(0, (d.column or 1) - 1) if d.line else 0
        out.append(
            types.Diagnostic(
                range=types.Range(
                    start=types.Position(line=line, character=start_char),
                    # Character 10_000: to the end of the line without knowing its length.
                    end=types.Position(line=end_line, character=10_000),
                ),
                message=d.message,
                severity=_SEVERITY.get(d.severity, types.DiagnosticSeverity.Error),
                source=SOURCE,
                code=d.category,
            )
        )
    if not out and not result.correct and result.status in ("incorrect", "runtime_error", "timeout", "crashed", "rejected", "compile_error"):
        # A failure the harness could not pin to a line still belongs in the Problems panel.
        kernel = next((k for k in kernels if k.kind == "model"), kernels[0] if kernels else None)
        line = kernel.line if kernel else 0
        message = result.mismatch or result.message or result.status.replace("_", " ")
        out.append(
            types.Diagnostic(
                range=types.Range(start=types.Position(line=line, character=0), end=types.Position(line=line, character=10_000)),
                message=f"{result.status.replace('_', ' ')}: {message}" if message != result.status.replace("_", " ") else message,
                severity=types.DiagnosticSeverity.Error,
                source=SOURCE,
                code=result.status,
            )
        )
    return out


def _diagnostic_line(d: Diagnostic, kernels: list[Kernel], line_count: int) -> int:
    last = max(0, line_count - 1)
    if d.line is not None:
        return min(max(0, d.line - 1), last)
    if d.kernel:
        for k in kernels:
            if k.name == d.kernel:
                return k.line
    if d.category in KERNEL_CATEGORIES:
        device = [k for k in kernels if k.kind != "model"]
        if device:
            return device[0].line
    return kernels[0].line if kernels else 0


def hover_markdown(kernel: Kernel, task: str | None, rules: list[Item], items: list[ScoredItem]) -> str:
    """Resident rules and the top items for the kernel's task, with the
    numbers that say whether they have helped before."""
    kind = {"model": "candidate module", "triton": "Triton kernel", "ascend_c": "Ascend C kernel"}[kernel.kind]
    lines = [f"**SAGE** · `{kernel.name}` ({kind})" + (f" · task `{task}`" if task else ""), ""]
    if not task:
        lines += ["No task set for this file. Add `# sage: task=<id or path>` at the top, or use *Set task…*.", ""]
    lines.append("**Resident rules**")
    if rules:
        lines += [f"- {_md(r.title)} · utility {r.utility:+.2f} · adopted {r.n_adopted}×" for r in rules]
    else:
        lines.append("- none yet")
    if task:
        lines += ["", "**Top items for this task**"]
        if items:
            lines += [
                f"{i.rank}. {_md(i.title)} (#{i.id}) · utility {i.utility:+.2f} · adopted {i.n_adopted}× · score {i.score:.2f}"
                for i in items
            ]
        else:
            lines.append("- nothing in memory matches yet")
    return "\n".join(lines)


def _md(text: str) -> str:
    """Item titles are written by agents: keep them from turning into markdown or links."""
    out = text.replace("\n", " ")
    for ch in "\\`*_[]<>#|":
        out = out.replace(ch, "\\" + ch)
    return out
