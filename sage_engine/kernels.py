"""Finding kernels in candidate files and the task each file implements.

Pure functions over source text and the file system, shared by the editor
surfaces (language server) and anything else that is handed a candidate file
without a task (`sage bench kernel.py`).

A file names its task in one of three ways, checked in this order:

1. a header comment in its first lines: `# sage: task=<id or path>`
   (`// sage: task=...` in C/C++);
2. a project file `.sage/tasks.json` in the file's folder or a parent folder:
   `{"tasks": {"<glob>": "<id or path>"}}`, globs relative to the folder that
   holds `.sage/`, first match wins;
3. the suite layout: a file in `<task>/solutions/` next to `<task>/reference.py`.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sage_engine.errors import InvalidInput
from sage_engine import syntax

KernelKind = Literal["model", "triton", "ascend_c"]
LinkSource = Literal["header", "project", "layout"]

# Only the top of a file is searched: a task header buried in the middle is
# almost certainly a string or an example, not the file's own setting.
HEADER_LINES = 20
# Python's parser costs about 1.3 ms per thousand characters and holds the GIL;
# above this size the line scanner (about 40x faster, though it cannot tell
# code from text inside strings) keeps an editor responsive.
PARSE_MAX_CHARS = 64_000
PROJECT_FILE = Path(".sage") / "tasks.json"

_HEADER = re.compile(r"^\s*(?:#|//)\s*sage:\s*task\s*=\s*(?P<task>\S.*?)\s*$")
_MODEL = re.compile(r"^\s*class\s+ModelNew\b")
_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(?P<name>\w+)")
_TRITON_DECORATOR = re.compile(r"^\s*@\s*(?:triton\s*\.\s*)?jit\b")
# Ascend C entry points: `extern "C" __global__ __aicore__ void add_custom(...)`;
# the qualifiers may come in either order and the signature may span lines.
_ASCEND_C = re.compile(
    r"(?:__global__\s+__aicore__|__aicore__\s+__global__)\s+(?:void\s+)?(?P<name>\w+)\s*\(",
)


@dataclass(frozen=True)
class Kernel:
    """A kernel found in a file. Lines are 0-based (LSP positions)."""

    name: str
    kind: KernelKind
    line: int  # the `class` / `def` / signature line
    start_line: int  # first decorator, where a lens goes; equals `line` without decorators


@dataclass(frozen=True)
class TaskLink:
    """Which task a file implements and where that was said."""

    task: str  # a bundled task id or an absolute path, ready for Engine.evaluate
    source: LinkSource
    origin: str  # the file that said it (the candidate itself or .sage/tasks.json)
    line: int | None = None  # 0-based header line when source == "header"


# ----------------------------------------------------------------------- kernels


def find_kernels(text: str, language: str = "python", *, parse_max_chars: int = PARSE_MAX_CHARS) -> list[Kernel]:
    """Kernels in source text: `class ModelNew`, `@triton.jit` functions and
    Ascend C entry points (also inside Python strings, as in load_inline).
    Python longer than `parse_max_chars` is scanned line by line, not parsed."""
    found: list[Kernel] = []
    if language == "python":
        found += _python_kernels(text) if len(text) <= parse_max_chars else _python_kernels_by_lines(text)
    found += _ascend_c_kernels(text)
    return sorted(found, key=lambda k: (k.start_line, k.name))


def kernel_at(kernels: list[Kernel], line: int) -> Kernel | None:
    """The kernel whose definition encloses `line`: the last one starting at or above it."""
    above = [k for k in kernels if k.start_line <= line]
    return max(above, key=lambda k: k.start_line) if above else None


def _python_kernels(text: str) -> list[Kernel]:
    try:
        tree = syntax.parse(text)
    except (SyntaxError, ValueError):
        # Mid-edit files often do not parse; lenses should not vanish while typing.
        return _python_kernels_by_lines(text)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            found.append(Kernel(node.name, "model", node.lineno - 1, start - 1))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(_is_triton_jit(d) for d in node.decorator_list):
            start = min(d.lineno for d in node.decorator_list)
            found.append(Kernel(node.name, "triton", node.lineno - 1, start - 1))
    return found


def _is_triton_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Attribute):
        return target.attr == "jit" and isinstance(target.value, ast.Name) and target.value.id == "triton"
    return isinstance(target, ast.Name) and target.id == "jit"


def _python_kernels_by_lines(text: str) -> list[Kernel]:
    found = []
    decorators_from: int | None = None
    jit = False
    for n, line in enumerate(text.splitlines()):
        stripped = line.strip()
        if _MODEL.match(line):
            found.append(Kernel("ModelNew", "model", n, n if decorators_from is None else decorators_from))
            decorators_from, jit = None, False
        elif stripped.startswith("@"):
            decorators_from = n if decorators_from is None else decorators_from
            jit = jit or bool(_TRITON_DECORATOR.match(line))
        elif (m := _DEF.match(line)) is not None:
            if jit and decorators_from is not None:
                found.append(Kernel(m.group("name"), "triton", n, decorators_from))
            decorators_from, jit = None, False
        elif stripped and not stripped.startswith("#") and decorators_from is not None and line[:1] not in (" ", "\t", ")", "]"):
            # A top-level statement ends a decorator block that never reached a def.
            decorators_from, jit = None, False
    return found


def _ascend_c_kernels(text: str) -> list[Kernel]:
    found = []
    for m in _ASCEND_C.finditer(text):
        line = text.count("\n", 0, m.start("name"))
        start = text.count("\n", 0, m.start())
        found.append(Kernel(m.group("name"), "ascend_c", line, start))
    return found


# ------------------------------------------------------------------ task links


def header_task(text: str) -> tuple[str, int] | None:
    """The `sage: task=` header and its 0-based line, if the file has one."""
    # Split only the top: a large file is not copied line by line for this.
    for n, line in enumerate(text.split("\n", HEADER_LINES)[:HEADER_LINES]):
        if (m := _HEADER.match(line)) is not None:
            return m.group("task").strip("'\""), n
    return None


def find_task(path: Path, text: str, *, stop_at: Path | None = None) -> TaskLink | None:
    """The task `path` implements, by header, project file or suite layout."""
    path = path.expanduser().resolve()
    if (found := header_task(text)) is not None:
        value, line = found
        return TaskLink(resolve_task_value(value, path.parent), "header", str(path), line)
    if (project := find_project_file(path.parent, stop_at)) is not None:
        root = project.parent.parent
        mapping = read_project_file(project)
        try:
            relative = path.relative_to(root).as_posix()
        except ValueError:
            relative = None
        if relative is not None:
            for pattern, value in mapping.items():
                if glob_match(pattern, relative):
                    return TaskLink(resolve_task_value(value, root), "project", str(project))
    if path.parent.name == "solutions" and (path.parent.parent / "reference.py").is_file():
        return TaskLink(str(path.parent.parent), "layout", str(path))
    return None


def find_project_file(start: Path, stop_at: Path | None = None) -> Path | None:
    """The nearest `.sage/tasks.json` from `start` upward, not above `stop_at`."""
    stop = stop_at.expanduser().resolve() if stop_at is not None else None
    for folder in [start, *start.parents]:
        candidate = folder / PROJECT_FILE
        if candidate.is_file():
            return candidate
        if stop is not None and folder == stop:
            break
    return None


def read_project_file(project: Path) -> dict[str, str]:
    try:
        data = json.loads(project.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f'{project} is not readable JSON ({exc}); expected {{"tasks": {{"<glob>": "<task>"}}}}') from exc
    tasks = data.get("tasks") if isinstance(data, dict) else None
    if not isinstance(tasks, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tasks.items()):
        raise InvalidInput(f'{project} must look like {{"tasks": {{"<glob>": "<task id or path>"}}}}')
    return tasks


def write_project_mapping(root: Path, relative: str, task: str) -> Path:
    """Map one file (relative to `root`) to `task` in `root/.sage/tasks.json`,
    keeping the other entries; an exact path goes first so it wins over globs."""
    project = root / PROJECT_FILE
    tasks = read_project_file(project) if project.is_file() else {}
    tasks.pop(relative, None)
    updated = {relative: task, **tasks}
    project.parent.mkdir(parents=True, exist_ok=True)
    tmp = project.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"tasks": updated}, indent=2) + "\n", encoding="utf-8")
    tmp.replace(project)
    return project


def glob_match(pattern: str, relative: str) -> bool:
    """Shell-style globs over '/'-separated paths: `*` stays inside one folder,
    `**/` spans any number of folders."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.fullmatch("".join(out), relative) is not None


def header_line(task: str, language: str = "python") -> str:
    if not task.strip() or any(c in task for c in "\r\n"):
        raise InvalidInput("a task must be a non-empty id or path on one line")
    prefix = "//" if language in ("c", "cpp") else "#"
    return f"{prefix} sage: task={task.strip()}"


def header_insert_line(text: str) -> int:
    """Where a new header goes: after a shebang or an encoding cookie, else the top."""
    line = 0
    for n, content in enumerate(text.splitlines()[:2]):
        if content.startswith("#!") or re.match(r"^#.*coding[:=]", content):
            line = n + 1
    return line


def resolve_task_value(value: str, base: Path) -> str:
    """A path-like value (has a slash or ends in .py) made absolute against `base`; an id unchanged."""
    if "/" in value or "\\" in value or value.endswith(".py"):
        return str((base / Path(value).expanduser()).resolve())
    return value
