"""What the language server shows, as pure functions of engine values:
lens titles, diagnostics and hover markdown. Kept apart from the protocol
code so each wording can be tested without a server."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any, Sequence

from lsprotocol import types

from sage_engine.engine import Engine
from sage_engine.kernels import Kernel
from sage_engine.models import Diagnostic, EvalResult, Item, ScoredItem, TaskSummary

SOURCE = "sage"
# Compile-gate failures that belong to a whole kernel rather than one line.
KERNEL_CATEGORIES = frozenset({"ub_overflow", "cc_overflow", "grid_too_large"})
_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "info": types.DiagnosticSeverity.Information,
}
# A lens and a diagnostic share the kernel's line in editors that draw both
# as end-of-line text (neovim): each quotes at most this much of an error, and
# the whole text goes to the diagnostic's related information and the hover.
SHORT_CHARS = 90
CASE_CHARS = 40  # the case's parameters inside that quote
HOVER_DETAIL_CHARS = 4_000  # the hover's copy of the full error
# "(atol=0.0001, rtol=0.0001, kernelbench)": settings, not the error.
_SETTINGS = re.compile(r"\s*\([^()]*=[^()]*\)")


def content_hash(text: str) -> str:
    """The hash the harness stores as EvalResult.candidate_hash."""
    return Engine.candidate_hash(text)


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


def shorten(text: str, limit: int = SHORT_CHARS) -> str:
    """The first line of `text`, whitespace collapsed, cut to `limit` characters with an ellipsis."""
    line = " ".join((text.strip().splitlines() or [""])[0].split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def failing_case(result: EvalResult) -> str | None:
    """The first failing case, named as a user finds it in the task:
    "case 2/3 (batch_size=512, dim=4096)", or "the default inputs"."""
    first = next((c for c in result.cases if not c.ok), None)
    if first is None:
        return None
    distinct: list[dict] = []
    for c in result.cases:
        if c.case not in distinct:
            distinct.append(c.case)
    params = ", ".join(f"{k}={v}" for k, v in first.case.items())
    if not params and len(distinct) == 1:
        return "the default inputs"
    label = f"case {distinct.index(first.case) + 1}/{len(distinct)}"
    return f"{label} ({shorten(params, CASE_CHARS)})" if params else label


def primary_diagnostic(result: EvalResult) -> Diagnostic | None:
    """The error a failed result is about: its first error diagnostic."""
    return next((d for d in result.diagnostics if d.severity == "error"), None)


def failure_headline(result: EvalResult) -> str | None:
    """The short error that the lens and the diagnostic both quote, naming
    the failing case: "incorrect on case 2/3 (dim=4096): output: 2048 of 2048
    elements exceed tolerance". None for a correct result."""
    if result.correct:
        return None
    status = result.status.replace("_", " ")
    if result.status == "incorrect":
        clause = shorten(_SETTINGS.sub("", (result.mismatch or result.message).split("; ")[0]))
        if not clause and result.max_abs_error is not None:
            clause = f"max abs err {result.max_abs_error:.1e}"
        case = failing_case(result)
        head = f"incorrect on {case}" if case else "incorrect"
        return f"{head}: {clause}" if clause else head
    primary = primary_diagnostic(result)
    detail = primary.message if primary is not None else result.message
    return f"{status}: {shorten(detail)}" if detail.strip() and shorten(detail) != status else status


def result_summary(
    result: EvalResult,
    *,
    stale: bool = False,
    adopted: int = 0,
    created_at: float | None = None,
    now: float | None = None,
) -> str:
    """One line for a lens or a status bar, e.g.
    "2.31x vs reference · correct · cpu · 3 min ago · 2 rules adopted" or
    "incorrect on case 1/3 (dim=1000): output: 16000 of 16000 elements exceed tolerance · cpu"."""
    if result.correct:
        head = f"{result.speedup:.2f}x vs reference · correct" if result.speedup is not None else "correct"
        if result.speedup is not None and result.speedup_trusted is False:
            head = f"{result.speedup:.2f}x vs reference (unverified) · correct"
        parts = [head]
    else:
        parts = [failure_headline(result) or result.status]
    parts.append(result.backend)
    if (when := ago(created_at, now)) is not None:
        parts.append(when)
    if adopted:
        parts.append(f"{adopted} rule{'s' if adopted != 1 else ''} adopted")
    if result.suspicious_speedup and result.speedup_trusted is not False:
        parts.append("suspicious speedup")
    if stale:
        parts.append("stale")
    return " · ".join(parts)


def code_lenses(uri: str, kernels: Sequence[Kernel], task: str | None, summary: str | None) -> list[types.CodeLens]:
    """The lenses over a document's kernels: the last result's `summary`
    over each (clicking benchmarks again), "benchmark vs <task>" before any
    result, and "Set task…" over the first when the file has no task."""
    if summary is not None:
        title = "SAGE: " + summary
    elif task is not None:
        title = f"SAGE: benchmark vs {Path(task).name if os.sep in task else task}"
    else:
        title = ""  # no result and no task: only "Set task…"
    lenses = []
    for n, kernel in enumerate(kernels):
        if summary is not None or task is not None:
            lenses.append(lens(kernel.start_line, title, "sage.benchmark", [uri, kernel.line]))
        if task is None and n == 0:
            lenses.append(lens(kernel.start_line, "SAGE: Set task…", "sage.setTask", [uri]))
    return lenses


def lens(line: int, title: str, command: str, arguments: list[Any]) -> types.CodeLens:
    at = types.Range(start=types.Position(line=line, character=0), end=types.Position(line=line, character=0))
    return types.CodeLens(range=at, command=types.Command(title=title, command=command, arguments=arguments))


def to_lsp_diagnostics(result: EvalResult, kernels: Sequence[Kernel], line_count: int, uri: str = "") -> list[types.Diagnostic]:
    """EvalResult diagnostics as LSP diagnostics. Lines are 1-based in the
    result; a compile-gate error that names a kernel but no line goes on that
    kernel's def line; anything else without a line goes on the first kernel
    (or the top of the file) so it is never silently dropped. A mismatch reads
    as the lens's headline; a long message is cut, whole in relatedInformation."""
    out = []
    headline = failure_headline(result)
    for d in result.diagnostics:
        line = _diagnostic_line(d, kernels, line_count)
        end_line = max(line, min((d.end_line or d.line or line + 1) - 1, line_count - 1)) if d.line else line
        start_char = max(0, (d.column or 1) - 1) if d.line else 0
        at = types.Range(
            start=types.Position(line=line, character=start_char),
            # Character 10_000: to the end of the line without knowing its length.
            end=types.Position(line=end_line, character=10_000),
        )
        if d.category == "mismatch" and headline:
            message, full = headline, result.message or d.message
        else:
            message, full = shorten(d.message), d.message
        out.append(_diagnostic(at, message, full, uri, _SEVERITY.get(d.severity, types.DiagnosticSeverity.Error), d.category))
    failed = ("incorrect", "runtime_error", "timeout", "crashed", "rejected", "compile_error")
    if not out and not result.correct and result.status in failed:
        # A failure the harness could not pin to a line still belongs in the Problems panel.
        kernel = next((k for k in kernels if k.kind == "model"), kernels[0] if kernels else None)
        line = kernel.line if kernel else 0
        at = types.Range(start=types.Position(line=line, character=0), end=types.Position(line=line, character=10_000))
        out.append(_diagnostic(at, headline or result.status, result.message, uri, types.DiagnosticSeverity.Error, result.status))
    return out


def _diagnostic(at: types.Range, message: str, full: str, uri: str, severity: types.DiagnosticSeverity, code: str) -> types.Diagnostic:
    related = None
    if uri and full.strip() and full.strip() != message:
        related = [types.DiagnosticRelatedInformation(location=types.Location(uri=uri, range=at), message=full.strip())]
    return types.Diagnostic(range=at, message=message, severity=severity, source=SOURCE, code=code, related_information=related)


def _diagnostic_line(d: Diagnostic, kernels: Sequence[Kernel], line_count: int) -> int:
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


def hover_markdown(
    kernel: Kernel, task: str | None, rules: list[Item], items: list[ScoredItem], last: tuple[str, EvalResult] | None = None
) -> str:
    """The last result (the whole error when it failed), then the resident
    rules and the top items for the kernel's task, with the numbers that say
    whether they have helped before. `last` is (summary line, result)."""
    kind = {"model": "candidate module", "triton": "Triton kernel", "ascend_c": "Ascend C kernel"}[kernel.kind]
    lines = [f"**SAGE** · `{kernel.name}` ({kind})" + (f" · task `{task}`" if task else ""), ""]
    if last is not None:
        summary, result = last
        lines.append(f"**Last result**: {_md(summary)}")
        if not result.correct and result.message.strip():
            detail = result.message.strip()
            if len(detail) > HOVER_DETAIL_CHARS:
                detail = detail[:HOVER_DETAIL_CHARS] + " …"
            # A fence longer than any backtick run in the text, so the text cannot end it.
            fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", detail)), default=0))
            lines += ["", f"{fence}text", detail, fence]
        if result.profile is not None:
            lines += ["", profile_markdown(result)]
        lines.append("")
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


def profile_markdown(result: EvalResult) -> str:
    """Where the last result's time went: the binding limit, then the sentence to act on."""
    p = result.profile
    if p is None:
        return ""
    bound = {"memory": "memory-bound", "compute": "compute-bound", "latency": "launch/latency-bound"}.get(
        p.bound or "", "no measured limits"
    )
    flag = " · **physically impossible time**" if p.impossible else ""
    return f"**Where the time goes** ({bound}){flag}: {_md(p.summary)}"


def _md(text: str) -> str:
    """Item titles are written by agents: keep them from turning into markdown or links."""
    out = text.replace("\n", " ")
    for ch in "\\`*_[]<>#|":
        out = out.replace(ch, "\\" + ch)
    return out


def order_tasks(file_name: str, tasks: Sequence[TaskSummary]) -> list[TaskSummary]:
    """Bundled tasks for a picker, the ones whose id shares words with the
    file's name first, closest first ("softmax_v2.py": softmax, then
    log_softmax and masked_softmax), then the rest by id."""
    words = set(re.split(r"[^a-z0-9]+", file_name.lower().rsplit(".", 1)[0])) - {""}

    def key(t: TaskSummary) -> tuple[int, int, str]:
        tokens = set(re.split(r"[^a-z0-9]+", t.id.lower())) - {""}
        shared = len(words & tokens)
        return (-shared, len(tokens - words) if shared else 0, t.id)

    return sorted(tasks, key=key)
