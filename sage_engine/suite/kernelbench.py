"""Single-file tasks in the KernelBench convention (`class Model`,
`get_inputs()`, `get_init_inputs()`, sizes as module-level constants), as
found in KernelBench's `KernelBench/levelN/N_Name.py` and MultiKernelBench's
category folders (`reference/activation/relu.py`).

The file is kept as written, except where it would not run or not be a
function of its inputs on a CPU: NPU-only imports are dropped, integer and
boolean draws in the builders get valid values, and a forward that draws
random numbers draws them from a generator seeded at each call. Only the
top-level statements that change are rewritten; the rest keeps its text.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sage_engine.errors import InvalidInput
from sage_engine.suite import randomness
from sage_engine.suite import source as src
from sage_engine.suite.common import Converted, level_of, snake
from sage_engine import syntax

BUILDERS = {"get_inputs", "get_init_inputs", "get_input_groups"}


def is_task_file(path: Path) -> bool:
    if not (path.is_file() and path.suffix == ".py" and not path.name.startswith("_")):
        return False
    text = path.read_text(encoding="utf-8", errors="replace")
    return "class Model" in text and "def get_inputs" in text and "def get_input_groups" not in text


def task_id(path: Path) -> str:
    return snake(re.sub(r"^\d+_", "", path.stem))


def convert(path: Path, *, seed: int) -> Converted:
    text = path.read_text(encoding="utf-8")
    reference, notes = adapt(text, seed=seed, where=str(path))
    tid = task_id(path)
    # reference/activation/gelu.py names its category; KernelBench's level1/ does not.
    family = snake(path.parent.name) if not re.search(r"level_?\d", path.parent.name, re.I) else tid
    model = next((n for n in syntax.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    doc = (ast.get_docstring(model) if model is not None else None) or ""
    meta = {
        "name": re.sub(r"^\d+_", "", path.stem).replace("_", " ").strip(),
        "operator": tid,
        "family": family,
        "level": level_of(path),
        "description": _first_line(doc) or f"{tid} from {path.parent.name}",
        "cases": [],
    }
    description = None
    if notes:
        description = (doc.strip() + "\n\n" if doc.strip() else "") + "## Imported notes\n\n" + "\n".join(f"- {n}" for n in notes)
    return Converted(tid, reference, meta, description, notes)


def adapt(text: str, *, seed: int, where: str, builders: set[str] = BUILDERS) -> tuple[str, list[str]]:
    """The file's text with the CPU adaptations applied, and notes saying which."""
    try:
        tree = syntax.parse(text, filename=where)
    except SyntaxError as exc:
        raise InvalidInput(f"{where} has a syntax error at line {exc.lineno}: {exc.msg}") from exc
    before = [ast.dump(n) for n in tree.body]
    originals = list(tree.body)
    tree = src.strip_imports(tree, drop_unused=False)
    count = len(tree.body)
    notes = []
    if randomness.shim_random_inputs(tree, builders):
        notes.append(
            "input builders draw integer/boolean values through dtype-aware stand-ins for "
            "torch.rand/randn/uniform_/normal_, which CPU torch implements for float dtypes only"
        )
    appended = tree.body[count:]
    tree.body = tree.body[:count]
    if randomness.seed_random_forward(tree, seed):
        notes.append(f"Model.forward draws random numbers; the reference draws them from a generator seeded with {seed} at every call")
    if len(tree.body) == len(originals) and not appended and all(ast.dump(a) == b for a, b in zip(tree.body, before)):
        return text, notes
    return _rewrite(text, originals, before, tree.body, appended), notes


def _rewrite(text: str, originals: list[ast.stmt], before: list[str], body: list[ast.stmt], appended: list[ast.stmt]) -> str:
    """Replace the changed top-level statements' text, leave out dropped ones,
    insert new ones; everything else (comments included) keeps its text."""
    lines = text.splitlines(keepends=True)
    position = {id(n): i for i, n in enumerate(originals)}
    present = {id(n) for n in body}
    out: list[str] = []
    cursor, done = 0, 0  # next line of `text` to copy; originals handled so far

    def span(node: ast.stmt) -> tuple[int, int]:
        decorators = getattr(node, "decorator_list", None)
        # A parsed statement always has its end line (Python 3.8+ fills it in).
        return (decorators[0].lineno if decorators else node.lineno) - 1, node.end_lineno or node.lineno

    def skip_dropped(upto: int) -> None:
        nonlocal cursor, done
        while done < upto:
            node = originals[done]
            if id(node) not in present:
                start, end = span(node)
                out.extend(lines[cursor:start])
                cursor = end
            done += 1

    for node in body:
        if id(node) not in position:
            out.append(ast.unparse(node) + "\n\n")
            continue
        index = position[id(node)]
        skip_dropped(index)
        start, end = span(node)
        out.extend(lines[cursor:start])
        out.extend(lines[start:end] if ast.dump(node) == before[index] else [ast.unparse(node) + "\n"])
        cursor, done = end, index + 1
    skip_dropped(len(originals))
    out.extend(lines[cursor:])
    if appended:
        out.append("\n" + ast.unparse(ast.Module(body=appended, type_ignores=[])) + "\n")
    return "".join(out)


def _first_line(doc: str) -> str:
    for line in doc.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""
