"""NPUKernelBench task directories (`tasks/levelN/<Category>/<Op>/`) as SAGE tasks.

    api_desc.md                  operator description (becomes description.md)
    validation/module.py         `class Model` (and a ModelNew calling the
                                 compiled op, dropped); imports torch_npu
    validation/prepare_inputs.py `get_inputs(param, device)`,
                                 `get_init_inputs(param, device)`, optional
                                 `custom_check_precision(...)` (dropped, with
                                 the imports only it used, e.g. `framework`)
    validation/test_cases.csv    `;`-separated, a `case_id` column, then one
                                 parameter per column as text

The benchmark reads the table with pandas and hands each row to the builders;
a column's values get one type for the whole column (all integers, all
numbers, all True/False, else text), as pandas infers them. Each column
becomes a module-level variable of the generated reference and each row a
case. A builder that still imports the benchmark's own helper package gets
a read-only copy of it under `lib/`, named in task.json's `import_roots`.
"""

from __future__ import annotations

import ast
import csv
import re
from pathlib import Path
from typing import Any

from sage_engine.errors import InvalidInput
from sage_engine.suite import randomness
from sage_engine.suite import source as src
from sage_engine.suite.common import Converted, level_of, snake
from sage_engine import syntax

_TRUE, _FALSE = {"True", "true", "TRUE"}, {"False", "false", "FALSE"}


def is_task_dir(path: Path) -> bool:
    return path.is_dir() and (path / "validation" / "module.py").is_file()


def convert(path: Path, *, max_cases: int | None, seed: int) -> Converted:
    module_py = path / "validation" / "module.py"
    inputs_py = path / "validation" / "prepare_inputs.py"
    cases_csv = path / "validation" / "test_cases.csv"
    for needed in (inputs_py, cases_csv):
        if not needed.is_file():
            raise InvalidInput(f"NPUKernelBench task {path.name}: {needed.relative_to(path)} is missing")
    rows, columns = read_cases(cases_csv)
    if max_cases is not None:
        rows = rows[:max_cases]
    idents = {c: identifier(c) for c in columns}
    model_tree = _parse(module_py)
    model_tree.body = [n for n in model_tree.body if not (isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == "ModelNew")]
    model_tree = src.strip_imports(model_tree)
    inputs_tree = _parse(inputs_py)
    has_checker = any(isinstance(n, ast.FunctionDef) and n.name == "custom_check_precision" for n in inputs_tree.body)
    inputs_tree.body = [n for n in inputs_tree.body if not (isinstance(n, ast.FunctionDef) and n.name == "custom_check_precision")]
    inputs_tree = src.strip_imports(inputs_tree)
    _rename(inputs_tree, {"get_inputs": "_source_get_inputs", "get_init_inputs": "_source_get_init_inputs"})
    builders = {n.name for n in inputs_tree.body if isinstance(n, ast.FunctionDef)}
    shimmed = randomness.shim_random_inputs(inputs_tree, builders)
    seeded = randomness.seed_random_forward(model_tree, seed)
    helpers = _helper_packages(path, [model_tree, inputs_tree])
    notes = []
    if has_checker:
        notes.append(
            "the original task brings its own precision checker (custom_check_precision); SAGE compares with its tolerance mode instead"
        )
    if shimmed:
        notes.append(
            "input builders draw integer/boolean values through dtype-aware stand-ins for "
            "torch.rand/randn/uniform_/normal_, which CPU torch implements for float dtypes only"
        )
    if seeded:
        notes.append(f"Model.forward draws random numbers; the reference draws them from a generator seeded with {seed} at every call")
    first = rows[0] if rows else {}
    defaults = "\n".join(f"{idents[c]} = {first.get(c)!r}" for c in columns)
    names = ", ".join(f"{c!r}: {idents[c]!r}" for c in columns)
    roots_block = (
        "import sys\nSAGE_IMPORT_ROOTS = []  # set from task.json import_roots when the task loads\n"
        "sys.path[:0] = [p for p in SAGE_IMPORT_ROOTS if p not in sys.path]\n\n"
        if helpers
        else ""
    )
    model_text = ast.unparse(src.ensure_torch_import(model_tree))
    reference = f'''"""{path.name}, imported from NPUKernelBench ({"/".join(path.parts[-4:])}).

The model is validation/module.py's reference; the input builders are
validation/prepare_inputs.py's. Each row of validation/test_cases.csv is a
case that sets the module-level parameters below."""
{roots_block}
{model_text}

# --- input builders from validation/prepare_inputs.py ---
{ast.unparse(inputs_tree)}

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
    category = path.parent.name
    meta = {
        "name": path.name,
        "operator": snake(path.name),
        "family": snake(category) if category and not re.search(r"level_?\d", category, re.I) else snake(path.name),
        "level": level_of(path),
        "description": first_sentence(api_text) or f"{path.name} from NPUKernelBench",
        "cases": [{idents[c]: row[c] for c in columns if c in row} for row in rows],
    }
    description = api_text + ("\n\n## Imported notes\n\n" + "\n".join(f"- {n}" for n in notes) if notes else "")
    return Converted(snake(path.name), reference, meta, description, notes, helpers)


def read_cases(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of test_cases.csv with pandas' per-column types."""
    text = path.read_text(encoding="utf-8-sig")
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise InvalidInput(f"{path} is empty")
    delimiter = ";" if lines[0].count(";") >= lines[0].count(",") else ","
    reader = csv.DictReader(lines, delimiter=delimiter)
    columns = [c for c in (reader.fieldnames or []) if c and c.strip().lower() != "case_id"]
    raw = [{c: (r.get(c) or "").strip() for c in columns} for r in reader]
    if not raw:
        raise InvalidInput(f"{path} has no case rows")
    typed = {c: column_values([r[c] for r in raw]) for c in columns}
    return [{c: typed[c][i] for c in columns} for i in range(len(raw))], columns


def column_values(texts: list[str]) -> list[Any]:
    """One type per column, as pandas' read_csv infers it; empty cells are None."""
    present = [t for t in texts if t != ""]
    for cast in (_int, float):
        try:
            values = [cast(t) for t in present]
        except ValueError:
            continue
        it = iter(values)
        return [next(it) if t != "" else None for t in texts]
    if present and all(t in _TRUE | _FALSE for t in present):
        return [None if t == "" else t in _TRUE for t in texts]
    return [t if t != "" else None for t in texts]


def _int(text: str) -> int:
    if re.fullmatch(r"[+-]?\d+", text) is None:
        raise ValueError(text)
    return int(text)


def identifier(column: str) -> str:
    name = re.sub(r"\W+", "_", column.strip()).strip("_") or "param"
    return f"p_{name}" if name[0].isdigit() or name in ("Model", "get_inputs", "get_init_inputs", "torch") else name


def first_sentence(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "|", "-", "$", "`", "[")):
            return line[:300]
    return ""


def _parse(path: Path) -> ast.Module:
    try:
        return syntax.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        raise InvalidInput(f"{path} has a syntax error at line {exc.lineno}: {exc.msg}") from exc


def _rename(tree: ast.Module, renames: dict[str, str]) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in renames:
            node.name = renames[node.name]
        elif isinstance(node, ast.Name) and node.id in renames:
            node.id = renames[node.id]


def _helper_packages(task_dir: Path, trees: list[ast.Module]) -> dict[str, Path]:
    """The benchmark's own packages the task still imports: name -> folder
    (or .py file) found beside the benchmark's top folders, above the task."""
    import importlib.util

    wanted: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                wanted.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                wanted.add(node.module.split(".")[0])
    found: dict[str, Path] = {}
    for name in sorted(wanted):
        if name in src.NPU_ONLY_MODULES or importlib.util.find_spec(name) is not None:
            continue
        for parent in task_dir.resolve().parents:
            package = parent / name
            if (package / "__init__.py").is_file():
                found[name] = package
                break
            if package.with_suffix(".py").is_file():
                found[name] = package.with_suffix(".py")
                break
    return found
