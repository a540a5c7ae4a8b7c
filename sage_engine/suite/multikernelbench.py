"""MultiKernelBench's NPU task files (`reference/npukernelbench_levelN/N_name.py`,
the levels it derived from NPUKernelBench) as SAGE tasks.

Each file has `class Model`, `get_init_inputs()` and `get_input_groups()`,
which reads `N_name.json` beside it: JSON lines, one input group each,
`{"inputs": [{"name", "type": "tensor"|"attr", "dtype", "shape"|"value"}]}`.
Each line becomes a case (`case_inputs`), and the original
`get_input_groups()` runs unchanged on that one line through an `open` that
serves it. MultiKernelBench's other folders (`reference/activation/...`) are
KernelBench-style files, handled by `kernelbench.py`.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from sage_engine import syntax
from sage_engine.errors import InvalidInput
from sage_engine.suite.common import Converted, level_of, snake
from sage_engine.suite.kernelbench import adapt

_APPENDED = """

# --- added by `sage suite import` (MultiKernelBench {where}) ---
# Each line of {json_name} is one case: `case_inputs` holds it, and the
# original get_input_groups() reads it through the `open` below instead of the file.
import io as _sage_io
import json as _sage_json

__file__ = {file_name!r}
case_inputs = {first!r}


def open(path, *args, **kwargs):  # noqa: A001 - shadows builtins.open for get_input_groups only
    if str(path).endswith(".json"):
        return _sage_io.StringIO(_sage_json.dumps({{"inputs": case_inputs}}) + "\\n")
    raise OSError(f"the imported reference reads only its input groups, not {{path}}")


def get_inputs():
    return list(get_input_groups()[0])
"""


def is_task_file(path: Path) -> bool:
    if not (path.is_file() and path.suffix == ".py" and not path.name.startswith("_")):
        return False
    text = path.read_text(encoding="utf-8", errors="replace")
    return "class Model" in text and "def get_input_groups" in text


def convert(path: Path, *, max_cases: int | None, seed: int) -> Converted:
    text = path.read_text(encoding="utf-8")
    tid = snake(re.sub(r"^\d+_", "", path.stem))
    family = snake(path.parent.name) if not re.search(r"level_?\d", path.parent.name, re.I) else tid
    model = next((n for n in syntax.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    doc = (ast.get_docstring(model) if model is not None else None) or ""
    groups_file = path.with_suffix(".json")
    if not groups_file.is_file():
        raise InvalidInput(f"{path.name} reads its input groups from {groups_file.name}, which is missing")
    try:
        lines = [json.loads(line) for line in groups_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{groups_file} is not JSON lines: {exc}") from exc
    if max_cases is not None:
        lines = lines[:max_cases]
    if not lines:
        raise InvalidInput(f"{groups_file} holds no input groups")
    body, notes = adapt(text, seed=seed, where=str(path), builders={"get_input_groups", "get_init_inputs"})
    where = "/".join(path.parts[-3:])
    reference = body.rstrip() + _APPENDED.format(
        where=where, json_name=groups_file.name, file_name=path.name, first=lines[0].get("inputs", [])
    )
    meta = {
        "name": tid.replace("_", " ").capitalize(),
        "operator": tid,
        "family": family,
        "level": level_of(path),
        "description": _first_line(doc) or f"{tid} from MultiKernelBench",
        "cases": [{"case_inputs": line.get("inputs", [])} for line in lines],
    }
    description = ("## Imported notes\n\n" + "\n".join(f"- {n}" for n in notes)) if notes else None
    return Converted(tid, reference, meta, description, notes)


def _first_line(doc: str) -> str:
    for line in doc.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""
