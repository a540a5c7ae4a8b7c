"""Turning failures into diagnostics at candidate line numbers.

Pure functions over exceptions and compiler output; standard library only
(they run in the sandbox child). A diagnostic here is a plain dict with the
fields of `sage_engine.models.Diagnostic`.
"""

from __future__ import annotations

import ast
import re
import traceback
from pathlib import Path
from typing import Any
from sage_engine import syntax

MAX_MESSAGE = 2000
MAX_COMPILER_DIAGNOSTICS = 8
CANDIDATE_FILE = "candidate.py"
# gcc/clang/nvcc style: path:line:col: error: message
_COMPILER_RE = re.compile(
    r"^(?P<path>[^\s:][^:\n]*?):(?P<line>\d+):(?:(?P<col>\d+):)?\s*(?P<sev>fatal error|error|warning)\s*:\s*(?P<msg>.*)$",
    re.MULTILINE,
)


def diagnostic(
    category: str,
    message: str,
    line: int | None = None,
    column: int | None = None,
    severity: str = "error",
    kernel: str | None = None,
) -> dict[str, Any]:
    return {
        "category": category,
        "message": message[:MAX_MESSAGE],
        "line": line,
        "column": column,
        "severity": severity,
        "kernel": kernel,
    }


def exception_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 15] + " ...[truncated]"


# What an allocator says when it runs out: torch's CPU allocator, Python's
# MemoryError, CUDA's and Ascend's caching allocators.
_HOST_OOM = ("can't allocate memory", "Cannot allocate memory", "std::bad_alloc")
_DEVICE_OOM = ("CUDA out of memory", "NPU out of memory", "OutOfMemoryError")


def out_of_memory(exc: BaseException) -> str | None:
    """ "host" when the process ran out of its memory cap, "device" when the
    accelerator's memory ran out, else None."""
    text = f"{type(exc).__name__}: {exc}"
    if any(marker in text for marker in _DEVICE_OOM):
        return "device"
    if isinstance(exc, MemoryError) or any(marker in text for marker in _HOST_OOM) or "out of memory" in text:
        return "host"
    return None


def memory_cap_note(memory_mb: int | None) -> str:
    """Names the setting that raises the cap an allocation just hit."""
    if not memory_mb:
        return ""
    return f" (each evaluation process may use {memory_mb} MB: raise Config.eval_memory_mb, e.g. SAGE_EVAL_MEMORY_MB, to allow more)"


def candidate_frames(exc: BaseException, candidate_path: str) -> list[traceback.FrameSummary]:
    """Frames of the traceback that lie in the candidate file, outermost first;
    chained exceptions (raise ... from, during handling) are followed."""
    frames: list[traceback.FrameSummary] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    chain = []
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or current.__context__
    for e in reversed(chain):
        frames.extend(f for f in traceback.extract_tb(e.__traceback__) if _same_file(f.filename, candidate_path))
    return frames


def _same_file(filename: str, candidate_path: str) -> bool:
    return filename == candidate_path or Path(filename).name == CANDIDATE_FILE and filename.endswith(candidate_path)


def from_exception(exc: BaseException, category: str, candidate_path: str) -> dict[str, Any]:
    """One diagnostic at the deepest candidate frame of the traceback."""
    if isinstance(exc, SyntaxError) and _same_file(exc.filename or "", candidate_path):
        return from_syntax_error(exc)
    frames = candidate_frames(exc, candidate_path)
    line = frames[-1].lineno if frames else None
    where = f" (in {frames[-1].name})" if frames and frames[-1].name != "<module>" else ""
    return diagnostic(category, exception_text(exc) + where, line=line)


def from_syntax_error(exc: SyntaxError) -> dict[str, Any]:
    return diagnostic("syntax", f"SyntaxError: {exc.msg}", line=exc.lineno, column=exc.offset)


def compiler_errors(output: str, source: str, *, fallback_line: int | None = None) -> list[dict[str, Any]]:
    """Diagnostics for C++/CUDA compiler errors in a torch cpp_extension build
    log. Each error line is mapped back to the line of the Python string
    literal that holds that C++ source, when the offending line can be found
    there; otherwise it lands on `fallback_line` (the load_inline call)."""
    strings = _string_constants(source)
    diags = []
    for m in _COMPILER_RE.finditer(output):
        if m.group("sev") == "warning":
            continue
        path, lineno = m.group("path"), int(m.group("line"))
        mapped = _map_generated_line(Path(path), lineno, strings)
        name = Path(path).name
        msg = f"{name}:{lineno}: {m.group('sev')}: {m.group('msg').strip()}"
        diags.append(diagnostic("cpp", msg, line=mapped or fallback_line, column=int(m.group("col") or 0) or None))
        if len(diags) >= MAX_COMPILER_DIAGNOSTICS:
            break
    return diags


def _string_constants(source: str) -> list[tuple[int, str]]:
    try:
        tree = syntax.parse(source)
    except SyntaxError:
        return []
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and "\n" in n.value]


def _map_generated_line(path: Path, lineno: int, strings: list[tuple[int, str]]) -> int | None:
    """Find the generated file's line (with a line of context either side, to
    tell apart repeated lines like `}`) inside a candidate string literal."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    if not 1 <= lineno <= len(lines):
        return None
    target = lines[lineno - 1].strip()
    if not target:
        return None
    before = lines[lineno - 2].strip() if lineno >= 2 else None
    after = lines[lineno].strip() if lineno < len(lines) else None
    best: tuple[int, int] | None = None
    for start, text in strings:
        body = text.split("\n")
        for i, row in enumerate(body):
            if row.strip() != target:
                continue
            score = 1
            score += before is not None and i > 0 and body[i - 1].strip() == before
            score += after is not None and i + 1 < len(body) and body[i + 1].strip() == after
            if best is None or score > best[0]:
                best = (score, start + i)
    return best[1] if best else None
