"""Tasks: one operator to implement, in the KernelBench convention.

A task is a reference module (`class Model`, `get_inputs()`,
`get_init_inputs()`, module-level size constants) plus metadata from
`task.json` (or a `SAGE_TASK = {...}` dict in a single-file task). Loading a
task never executes the reference: it is parsed with `ast`, because the
process that loads tasks is the long-lived server, and reference code runs
only inside the evaluation sandbox.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sage_engine.errors import InvalidInput, NotFound
from sage_engine.evaluation.protocol import TaskSpec
from sage_engine.models import TaskSummary
from sage_engine import syntax

# Strings in a case row that name one of these become a torch dtype in the child.
DTYPE_NAMES: tuple[str, ...] = (
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
    "complex64",
)
TASK_KEYS: tuple[str, ...] = (
    "name",
    "operator",
    "family",
    "level",
    "description",
    "cases",
    "tolerance",
    "forbid",
    "seed",
    "import_roots",
    "origin",
)
REQUIRED_JSON_KEYS: tuple[str, ...] = ("name", "operator", "family", "level")
# MultiKernelBench's seed; any fixed value works, it only has to be the same
# for reference and candidate.
DEFAULT_SEED = 1024
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
# A task with import roots (folders inside its directory holding a benchmark's
# own helper package) has this line in reference.py; loading the task writes
# the roots' absolute paths into it, on the same line, so line numbers hold.
IMPORT_ROOTS_LINE = re.compile(r"^SAGE_IMPORT_ROOTS = \[[^\n]*\]", re.MULTILINE)


def default_suite_dir() -> Path:
    """The bundled tasks: data (reference.py, task.json, solutions) in the
    suite's folder, found by path, so the evaluation imports none of the
    suite's code (the suite imports the evaluation)."""
    return Path(__file__).resolve().parents[2] / "suite" / "tasks"


@dataclass(frozen=True)
class Task:
    id: str
    name: str
    operator: str
    family: str
    level: int
    description: str
    reference_source: str
    reference_path: Path | None
    cases: tuple[dict, ...] = ()
    tolerance: dict = field(default_factory=dict, hash=False)
    forbid: tuple[str, ...] = ()
    seed: int = DEFAULT_SEED
    examples: dict[str, Path] = field(default_factory=dict, hash=False)
    # Absolute folders the reference imports from (read-only), from task.json "import_roots".
    import_roots: tuple[str, ...] = ()
    # Where an imported task came from (benchmark, path, commit, original sizes); informational.
    origin: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def case_rows(self) -> tuple[dict, ...]:
        """The cases actually evaluated: an empty list means the module defaults."""
        return self.cases or ({},)

    def spec(self) -> TaskSpec:
        """The part the evaluation children need."""
        return TaskSpec(
            id=self.id,
            reference_source=self.reference_source,
            reference_path=str(self.reference_path) if self.reference_path else None,
            cases=[dict(c) for c in self.case_rows],
            tolerance=dict(self.tolerance),
            forbid=list(self.forbid),
            seed=self.seed,
            import_roots=list(self.import_roots),
        )


# ----------------------------------------------------------------- loading


def load_task(spec: str | Path, *, suite_dir: Path | None = None) -> Task:
    """A bundled task id, a task directory, a single reference .py file, or
    inline reference source (anything containing `class Model`)."""
    if isinstance(spec, Path):
        return _load_path(spec)
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidInput("task must be a bundled task id, a path, or reference source code; got an empty value")
    if "class Model" in spec and "\n" in spec:
        return _load_inline(spec)
    suite = suite_dir or default_suite_dir()
    if _ID_RE.match(spec) and not spec.endswith(".py") and (suite / spec).is_dir():
        return _load_dir(suite / spec)
    path = Path(spec).expanduser()
    if path.exists():
        return _load_path(path)
    if _ID_RE.match(spec) and not spec.endswith(".py") and "/" not in spec:
        ids = _suite_ids(suite)
        close = difflib.get_close_matches(spec, ids, n=5, cutoff=0.5)
        hint = f"; close ids: {', '.join(close)}" if close else ""
        known = f" ({len(ids)} bundled tasks; `sage suite list` lists them)" if ids else " (no bundled tasks found)"
        raise NotFound(f"unknown task id {spec!r}{hint}{known}")
    raise NotFound(f"task path {spec!r} does not exist")


def list_suite(suite_dir: Path | None = None, *, level: int | None = None, family: str | None = None) -> list[Task]:
    suite = suite_dir or default_suite_dir()
    tasks = [_load_dir(suite / tid) for tid in _suite_ids(suite)]
    return [t for t in tasks if (level is None or t.level == level) and (family is None or t.family == family)]


def task_summary(task: Task) -> TaskSummary:
    return TaskSummary(
        id=task.id,
        name=task.name,
        operator=task.operator,
        family=task.family,
        level=task.level,
        description=task.description,
        cases=len(task.case_rows),
        examples=sorted(task.examples),
    )


def _suite_ids(suite: Path) -> list[str]:
    if not suite.is_dir():
        return []
    return sorted(p.name for p in suite.iterdir() if p.is_dir() and (p / "reference.py").is_file())


def _load_path(path: Path) -> Task:
    path = path.expanduser().resolve()
    if path.is_dir():
        return _load_dir(path)
    if path.is_file() and path.suffix == ".py":
        source = _read(path)
        meta = _sage_task_dict(source, path.name)
        return _build(path.stem, source, path, meta, where=f"SAGE_TASK in {path.name}", examples={})
    raise InvalidInput(f"{path} is neither a task directory nor a .py reference file")


def _load_dir(path: Path) -> Task:
    ref = path / "reference.py"
    if not ref.is_file():
        raise InvalidInput(f"task directory {path} has no reference.py")
    source = _read(ref)
    meta_path = path / "task.json"
    meta: dict[str, Any] = {}
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{meta_path} is not valid JSON: {exc}") from exc
        if not isinstance(meta, dict):
            raise InvalidInput(f"{meta_path} must hold a JSON object")
        missing = [k for k in REQUIRED_JSON_KEYS if k not in meta]
        if missing:
            raise InvalidInput(f"{meta_path} is missing required key(s): {', '.join(missing)}")
    else:
        meta = _sage_task_dict(source, "reference.py")
    long_desc = path / "description.md"
    if long_desc.is_file():
        text = long_desc.read_text(encoding="utf-8").strip()
        short = str(meta.get("description", "")).strip()
        meta = {**meta, "description": f"{short}\n\n{text}".strip() if short else text}
    solutions = path / "solutions"
    examples = {p.stem: p for p in sorted(solutions.glob("*.py"))} if solutions.is_dir() else {}
    where = str(meta_path) if meta_path.is_file() else "SAGE_TASK in reference.py"
    roots = _import_roots(meta.get("import_roots", []), path, where)
    if roots:
        if not IMPORT_ROOTS_LINE.search(source):
            raise InvalidInput(
                f"{where} names import_roots, so {ref} needs the line `SAGE_IMPORT_ROOTS = []` "
                "followed by `sys.path[:0] = SAGE_IMPORT_ROOTS`"
            )
        source = IMPORT_ROOTS_LINE.sub(lambda _: f"SAGE_IMPORT_ROOTS = {list(roots)!r}", source, count=1)
    return _build(path.name, source, ref, meta, where=where, examples=examples, import_roots=roots)


def _load_inline(source: str) -> Task:
    meta = _sage_task_dict(source, "inline reference")
    tid = "inline-" + hashlib.sha256(source.encode()).hexdigest()[:10]
    return _build(tid, source, None, meta, where="SAGE_TASK in the inline reference", examples={})


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from exc


# -------------------------------------------------------------- validation


def _parse_reference(source: str, where: str) -> ast.Module:
    try:
        tree = syntax.parse(source, filename=where)
    except SyntaxError as exc:
        raise InvalidInput(f"{where} has a syntax error at line {exc.lineno}: {exc.msg}") from exc
    names = _module_names(tree)
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in names]
    if missing:
        raise InvalidInput(f"{where} must define class Model, get_inputs() and get_init_inputs(); missing: {', '.join(missing)}")
    return tree


def _module_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _sage_task_dict(source: str, where: str) -> dict[str, Any]:
    tree = _parse_reference(source, where)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SAGE_TASK" for t in node.targets):
            try:
                value = syntax.literal_eval(node.value)
            except ValueError as exc:
                raise InvalidInput(f"SAGE_TASK in {where} must be a literal dict: {exc}") from exc
            if not isinstance(value, dict):
                raise InvalidInput(f"SAGE_TASK in {where} must be a dict")
            return value
    return {}


def _build(
    tid: str,
    source: str,
    path: Path | None,
    meta: dict[str, Any],
    *,
    where: str,
    examples: dict[str, Path],
    import_roots: tuple[str, ...] = (),
) -> Task:
    tree = _parse_reference(source, path.name if path else "inline reference")
    unknown = sorted(set(meta) - set(TASK_KEYS))
    if unknown:
        raise InvalidInput(f"{where}: unknown key(s) {', '.join(unknown)}; known keys: {', '.join(TASK_KEYS)}")
    operator = _str(meta, "operator", where, default=tid)
    level = meta.get("level", 1)
    if not isinstance(level, int) or isinstance(level, bool) or level not in (1, 2, 3):
        raise InvalidInput(f"{where}: 'level' must be 1, 2 or 3, got {level!r}")
    if meta.get("import_roots") and not import_roots:
        raise InvalidInput(f"{where}: 'import_roots' need a task directory (task.json beside reference.py)")
    seed = meta.get("seed", DEFAULT_SEED)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise InvalidInput(f"{where}: 'seed' must be an integer, got {seed!r}")
    return Task(
        id=tid,
        name=_str(meta, "name", where, default=tid),
        operator=operator,
        family=_str(meta, "family", where, default=operator),
        level=level,
        description=_str(meta, "description", where, default=""),
        reference_source=source,
        reference_path=path,
        cases=_cases(meta.get("cases", []), where, _module_names(tree)),
        tolerance=_tolerance(meta.get("tolerance", {}), where),
        forbid=_forbid(meta.get("forbid", []), where),
        seed=seed,
        examples=examples,
        import_roots=import_roots,
        origin=_origin(meta.get("origin", {}), where),
    )


def _str(meta: dict[str, Any], key: str, where: str, *, default: str) -> str:
    value = meta.get(key, default)
    if not isinstance(value, str) or (key != "description" and not value.strip()):
        raise InvalidInput(f"{where}: {key!r} must be a non-empty string, got {value!r}")
    return value.strip()


def _cases(value: Any, where: str, module_names: set[str]) -> tuple[dict, ...]:
    if not isinstance(value, list):
        raise InvalidInput(f"{where}: 'cases' must be a list of objects")
    rows = []
    for i, row in enumerate(value):
        if not isinstance(row, dict):
            raise InvalidInput(f"{where}: 'cases'[{i}] must be an object like {{\"batch_size\": 8}}")
        for key, v in row.items():
            if key not in module_names:
                raise InvalidInput(f"{where}: 'cases'[{i}] sets {key!r}, which the reference does not define at module level")
            if not isinstance(v, (int, float, str, bool, list)) and v is not None:
                raise InvalidInput(f"{where}: 'cases'[{i}][{key!r}] must be a JSON scalar or list")
        rows.append(dict(row))
    return tuple(rows)


def _tolerance(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise InvalidInput(f'{where}: \'tolerance\' must map dtype names to {{"atol": .., "rtol": ..}}')
    out = {}
    for dtype, tol in value.items():
        if dtype not in DTYPE_NAMES:
            raise InvalidInput(f"{where}: 'tolerance' key {dtype!r} is not a dtype name ({', '.join(DTYPE_NAMES)})")
        if not isinstance(tol, dict) or set(tol) - {"atol", "rtol"} or not tol:
            raise InvalidInput(f'{where}: \'tolerance\'[{dtype!r}] must be {{"atol": float, "rtol": float}}')
        for k, v in tol.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise InvalidInput(f"{where}: 'tolerance'[{dtype!r}][{k!r}] must be a number >= 0")
        out[dtype] = {k: float(v) for k, v in tol.items()}
    return out


def _import_roots(value: Any, task_dir: Path, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise InvalidInput(f"{where}: 'import_roots' must be a list of folders inside the task directory")
    roots = []
    base = task_dir.resolve()
    for rel in value:
        root = (base / rel).resolve()
        if base not in root.parents or not root.is_dir():
            raise InvalidInput(f"{where}: import root {rel!r} must be an existing folder inside {base}")
        roots.append(str(root))
    return tuple(roots)


def _origin(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise InvalidInput(f"{where}: 'origin' must be an object (benchmark, path, commit, sizes)")
    return value


def _forbid(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise InvalidInput(f"{where}: 'forbid' must be a list of dotted names like \"torch.softmax\"")
    return tuple(v.strip() for v in value)
