"""Converting public NPU benchmark tasks into SAGE's task format
(`sage suite import PATH`).

Two layouts are understood, as published by their repositories:

NPUKernelBench: one directory per operator, e.g. `tasks/level2/Norm/RmsNorm/`,
  api_desc.md                  operator description (becomes description.md)
  validation/module.py         `class Model` (and a ModelNew calling the
                               compiled op, dropped), imports torch_npu
  validation/prepare_inputs.py `get_inputs(param, device)`,
                               `get_init_inputs(param, device)`, optional
                               `custom_check_precision(...)`
  validation/test_cases.csv    one row per case; `;`-separated, a `case_id`
                               column, then parameters as text ("[128, 256]",
                               "float16", "1e-6")
  question/, answer/           Ascend C sources (not imported)
Each CSV column becomes a module-level variable of the generated reference
and each row a case; `get_inputs()` hands the row back to the original
builders as the dict they expect.

MultiKernelBench (its `npukernelbench_level*` sets): one file per operator,
`N_name.py` with `class Model`, `get_init_inputs()` and `get_input_groups()`
that reads `N_name.json` beside it (JSON lines, one input group each:
`{"inputs": [{"name", "type": "tensor"|"attr", "dtype", "shape"|"value"}]}`).
Each JSON line becomes a case (`case_inputs`), and the original
`get_input_groups()` runs unchanged on that one line. Files without a JSON
file (KernelBench style: `get_inputs()`) are imported as they are.

Levels map onto SAGE's 1..3 (level 0 -> 1, level 4 -> 3). Tolerances stay
SAGE's (choose `tolerance_mode = "npukernelbench"` for that benchmark's rule);
a task-specific precision checker is named in the description, not run.
"""

from __future__ import annotations

import ast
import csv
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sage_engine.errors import Conflict, InvalidInput
from sage_engine.evaluation.tasks import load_task

_LEVEL_RE = re.compile(r"level_?(\d+)", re.IGNORECASE)
_DROP_IMPORTS = ("torch_npu", "kernel_gen_ops")


@dataclass
class ImportedTask:
    id: str
    path: Path
    source: Path
    layout: str
    cases: int
    notes: list[str] = field(default_factory=list)


# ------------------------------------------------------------------- discovery


def detect_layout(path: Path) -> str | None:
    """`npukernelbench`, `multikernelbench`, `kernelbench`, or None."""
    if path.is_dir() and (path / "validation" / "module.py").is_file():
        return "npukernelbench"
    if path.is_file() and path.suffix == ".py":
        text = path.read_text(encoding="utf-8", errors="replace")
        if "class Model" not in text:
            return None
        if "def get_input_groups" in text:
            return "multikernelbench"
        if "def get_inputs" in text:
            return "kernelbench"
    return None


def find_tasks(root: Path) -> list[tuple[Path, str]]:
    """Every importable task at or under `root`, in path order."""
    root = root.expanduser().resolve()
    if not root.exists():
        raise InvalidInput(f"{root} does not exist")
    layout = detect_layout(root)
    if layout:
        return [(root, layout)]
    found: list[tuple[Path, str]] = []
    if root.is_dir():
        for module in sorted(root.rglob("validation/module.py")):
            found.append((module.parent.parent, "npukernelbench"))
        taken = {p for p, _ in found}
        for py in sorted(root.rglob("*.py")):
            if any(t in py.parents for t in taken):
                continue
            kind = detect_layout(py)
            if kind in ("multikernelbench", "kernelbench"):
                found.append((py, kind))
    return found


def import_tasks(src: Path, dest: Path, *, overwrite: bool = False,
                 max_cases: int | None = None) -> list[ImportedTask]:
    """Convert every task found at `src` into a task directory under `dest`."""
    tasks = find_tasks(Path(src))
    if not tasks:
        raise InvalidInput(
            f"no NPUKernelBench task directory (validation/module.py) or MultiKernelBench/KernelBench "
            f"task file (class Model + get_inputs or get_input_groups) found at {src}"
        )
    dest = Path(dest).expanduser()
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for path, layout in tasks:
        convert = _npukernelbench if layout == "npukernelbench" else _multikernelbench
        out.append(convert(path, dest, overwrite=overwrite, max_cases=max_cases, layout=layout))
    return out


# ------------------------------------------------------------- NPUKernelBench


def _npukernelbench(path: Path, dest: Path, *, overwrite: bool, max_cases: int | None, layout: str) -> ImportedTask:
    module_py = path / "validation" / "module.py"
    inputs_py = path / "validation" / "prepare_inputs.py"
    cases_csv = path / "validation" / "test_cases.csv"
    for needed in (inputs_py, cases_csv):
        if not needed.is_file():
            raise InvalidInput(f"NPUKernelBench task {path.name}: {needed.relative_to(path)} is missing")
    rows, columns = _read_cases(cases_csv)
    if max_cases is not None:
        rows = rows[:max_cases]
    idents = {c: _identifier(c) for c in columns}
    model_part = _strip_module(module_py.read_text(encoding="utf-8"), drop_names={"ModelNew"})
    inputs_tree = ast.parse(inputs_py.read_text(encoding="utf-8"))
    has_checker = any(isinstance(n, ast.FunctionDef) and n.name == "custom_check_precision" for n in inputs_tree.body)
    builders = _rename_functions(inputs_tree, {"get_inputs": "_source_get_inputs",
                                               "get_init_inputs": "_source_get_init_inputs"},
                                 drop={"custom_check_precision"})
    first = rows[0] if rows else {}
    defaults = "\n".join(f"{idents[c]} = {first.get(c)!r}" for c in columns)
    names = ", ".join(f"{c!r}: {idents[c]!r}" for c in columns)
    reference = f'''"""{path.name}, imported from NPUKernelBench ({_rel(path)}).

The model is validation/module.py's reference; the input builders are
validation/prepare_inputs.py's. Each row of validation/test_cases.csv is a
case that sets the module-level parameters below."""

{model_part}

# --- input builders from validation/prepare_inputs.py ---
{builders}

# --- one test_cases.csv row; the task's cases override these ---
{defaults}

_PARAMS = {{{names}}}


def _param():
    """The row as prepare_inputs expects it: dtypes back to their names."""
    row = {{}}
    for column, name in _PARAMS.items():
        value = globals()[name]
        row[column] = str(value).replace("torch.", "") if isinstance(value, torch.dtype) else value
    return row


def get_inputs():
    return list(_source_get_inputs(_param()))


def get_init_inputs():
    return list(_source_get_init_inputs(_param()))
'''
    api = path / "api_desc.md"
    api_text = api.read_text(encoding="utf-8") if api.is_file() else ""
    notes = []
    if has_checker:
        notes.append("the original task brings its own precision checker (custom_check_precision); SAGE "
                     "compares with its tolerance mode instead")
    # tasks/level2/Norm/RmsNorm: the folder above the task is its category.
    category = path.parent.name
    meta = {
        "name": path.name,
        "operator": _snake(path.name),
        "family": _snake(category) if category and not _LEVEL_RE.search(category) else _snake(path.name),
        "level": _level(path),
        "description": _first_sentence(api_text) or f"{path.name} from NPUKernelBench",
        "cases": [{idents[c]: row[c] for c in columns if c in row} for row in rows],
    }
    description = api_text + ("\n\n## Imported notes\n\n" + "\n".join(f"- {n}" for n in notes) if notes else "")
    return _write(dest, _snake(path.name), reference, meta, description, path, layout, overwrite, notes)


def _read_cases(path: Path) -> tuple[list[dict], list[str]]:
    text = path.read_text(encoding="utf-8")
    delimiter = ";" if text.splitlines()[0].count(";") >= text.splitlines()[0].count(",") else ","
    reader = csv.DictReader(text.splitlines(), delimiter=delimiter)
    columns = [c for c in (reader.fieldnames or []) if c and c.strip().lower() != "case_id"]
    rows = [{c: _scalar(r.get(c)) for c in columns} for r in reader]
    if not rows:
        raise InvalidInput(f"{path} has no case rows")
    return rows, columns


def _scalar(text: str | None):
    if text is None:
        return None
    text = text.strip()
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


# ----------------------------------------------------------- MultiKernelBench


def _multikernelbench(path: Path, dest: Path, *, overwrite: bool, max_cases: int | None,
                      layout: str) -> ImportedTask:
    source = path.read_text(encoding="utf-8")
    tid = re.sub(r"^\d+_", "", path.stem)
    # reference/activation/gelu.py names its category; npukernelbench_level1/ does not.
    family = _snake(path.parent.name) if not _LEVEL_RE.search(path.parent.name) else tid
    model = next((n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    doc = (ast.get_docstring(model) if model is not None else None) or ""
    meta = {"name": tid.replace("_", " ").capitalize(), "operator": tid, "family": family, "level": _level(path),
            "description": _first_sentence(doc) or f"{tid} from MultiKernelBench"}
    notes: list[str] = []
    if layout == "kernelbench":
        meta["cases"] = []
        return _write(dest, tid, source, meta, None, path, layout, overwrite, notes)
    groups_file = path.with_suffix(".json")
    if not groups_file.is_file():
        raise InvalidInput(f"{path.name} reads its input groups from {groups_file.name}, which is missing")
    lines = [json.loads(line) for line in groups_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    if max_cases is not None:
        lines = lines[:max_cases]
    if not lines:
        raise InvalidInput(f"{groups_file} holds no input groups")
    reference = f'''{source.rstrip()}


# --- added by `sage suite import` (MultiKernelBench {_rel(path)}) ---
# Each line of {groups_file.name} is one case: `case_inputs` holds it, and the
# original get_input_groups() reads it through the `open` below instead of the file.
import io as _sage_io
import json as _sage_json

__file__ = {path.name!r}
case_inputs = {lines[0].get("inputs", [])!r}


def open(path, *args, **kwargs):  # noqa: A001 - shadows builtins.open for get_input_groups only
    if str(path).endswith(".json"):
        return _sage_io.StringIO(_sage_json.dumps({{"inputs": case_inputs}}) + "\\n")
    raise OSError(f"the imported reference reads only its input groups, not {{path}}")


def get_inputs():
    return list(get_input_groups()[0])
'''
    meta["cases"] = [{"case_inputs": line.get("inputs", [])} for line in lines]
    return _write(dest, tid, reference, meta, None, path, layout, overwrite, notes)


# ---------------------------------------------------------------------- shared


def _write(dest: Path, tid: str, reference: str, meta: dict, description: str | None, source: Path,
           layout: str, overwrite: bool, notes: list[str]) -> ImportedTask:
    target = dest / tid
    if target.exists():
        if not overwrite:
            raise Conflict(f"task directory {target} exists; pass overwrite to replace it")
        shutil.rmtree(target)
    target.mkdir(parents=True)
    (target / "reference.py").write_text(reference, encoding="utf-8")
    (target / "task.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    if description:
        (target / "description.md").write_text(description.strip() + "\n", encoding="utf-8")
    try:
        task = load_task(target)
    except InvalidInput as exc:
        shutil.rmtree(target)
        raise InvalidInput(f"{source}: the converted task is not valid: {exc}") from exc
    return ImportedTask(task.id, target, source, layout, len(task.case_rows), notes)


def _strip_module(source: str, *, drop_names: set[str]) -> str:
    """The module without NPU-only imports and without the named definitions."""
    tree = ast.parse(source)
    body = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                                                  else [])
            if any(m and m.split(".")[0] in _DROP_IMPORTS for m in mods):
                continue
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in drop_names:
            continue
        body.append(node)
    tree.body = body
    text = ast.unparse(tree)
    if not re.search(r"^import torch$", text, re.MULTILINE):
        text = "import torch\n" + text
    return text


def _rename_functions(tree: ast.Module, renames: dict[str, str], *, drop: set[str]) -> str:
    class Renamer(ast.NodeTransformer):
        def visit_FunctionDef(self, node):
            node.name = renames.get(node.name, node.name)
            self.generic_visit(node)
            return node

        def visit_Name(self, node):
            node.id = renames.get(node.id, node.id)
            return node

    tree = ast.Module(body=[n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name in drop)
                            and not (isinstance(n, (ast.Import, ast.ImportFrom))
                                     and any(a.name.split(".")[0] in _DROP_IMPORTS for a in n.names))],
                      type_ignores=[])
    return ast.unparse(Renamer().visit(tree))


def _identifier(column: str) -> str:
    name = re.sub(r"\W+", "_", column.strip()).strip("_") or "param"
    return f"p_{name}" if name[0].isdigit() or name in ("Model", "get_inputs", "get_init_inputs", "torch") else name


def _snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return re.sub(r"\W+", "_", s).strip("_").lower()


def _level(path: Path) -> int:
    for part in reversed(path.parts):
        m = _LEVEL_RE.search(part)
        if m:
            return min(3, max(1, int(m.group(1))))
    return 1


def _first_sentence(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "|", "-", "$", "`", "[")):
            return line[:300]
    return ""


def _rel(path: Path) -> str:
    parts = path.parts
    return "/".join(parts[-4:]) if len(parts) > 4 else str(path)
