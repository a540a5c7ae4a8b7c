"""The code's layout keeps the rules that make it readable: evaluation laid
out by the process each part runs in, with imports only downward and no
circles; modules and classes small enough to read; and surfaces that reach
the engine only through its facade (the Engine, its models, errors, config,
the kernel finder and the agent package)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVALUATION = "sage_engine.evaluation"
# Lowest first: a module may import from its own layer or a lower one.
LAYERS = (
    ("protocol", "common"),  # shared by every process: what crosses the pipes, and processes, cgroups, timing, diagnostics
    ("child",),  # the reference and candidate processes
    ("worker",),  # the sandboxed worker that forks them
    ("host",),  # the process that asks for evaluations
    ("backends",),
    ("cluster",),  # evaluations on a Ray cluster
    ("harness",),  # the one way in
)
SURFACE_MAY_IMPORT = ("sage_engine.engine", "sage_engine.models", "sage_engine.errors", "sage_engine.config",
                      "sage_engine.kernels", "sage_engine.agent")
MAX_MODULE_LINES = 600  # a soft limit: files sized by cohesion, not split into slivers
MAX_CLASS_LINES = 250


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: str) -> dict[str, Path]:
    folder = ROOT / package.replace(".", "/")
    return {module_name(p): p for p in sorted(folder.rglob("*.py")) if "suite/tasks" not in p.as_posix()}


def imports(path: Path, name: str) -> set[str]:
    """Every module `path` imports, at any depth (function-level imports included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def graph(package: str) -> dict[str, set[str]]:
    mods = modules(package)
    return {name: {m for m in imports(path, name) if m in mods and m != name} for name, path in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def layer(name: str) -> int | None:
    rest = name[len(EVALUATION) + 1:].split(".")[0] if name.startswith(EVALUATION + ".") else ""
    return next((i for i, names in enumerate(LAYERS) if rest in names), None)


def test_evaluation_has_no_import_circle():
    assert cycles(graph(EVALUATION)) == []


def test_evaluation_imports_only_from_its_own_layer_or_lower():
    edges = graph(EVALUATION)
    unplaced = sorted(n for n in edges if n != EVALUATION and layer(n) is None)
    assert unplaced == [], "every evaluation module belongs to a layer"
    upward = [f"{a} -> {b}" for a, targets in edges.items() for b in sorted(targets)
              if a != EVALUATION and b != EVALUATION and layer(b) > layer(a)]
    assert upward == []


def test_the_surfaces_have_no_import_circle():
    assert cycles(graph("sage_mcp")) == []


def test_the_surfaces_reach_the_engine_only_through_its_facade():
    reached = []
    for name, path in modules("sage_mcp").items():
        for target in imports(path, name):
            if target.startswith("sage_engine") and target != "sage_engine" and not target.startswith(
                    SURFACE_MAY_IMPORT):
                reached.append(f"{name} imports {target}")
    assert reached == []


def test_no_module_is_too_long_to_read():
    long = [f"{path.relative_to(ROOT)}: {n} lines"
            for package in ("sage_engine", "sage_mcp") for path in modules(package).values()
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert long == []


def test_no_evaluation_class_is_too_long_to_read():
    long = []
    for path in modules(EVALUATION).values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                long.append(f"{path.relative_to(ROOT)}: {node.name}, {node.end_lineno - node.lineno + 1} lines")
    assert long == []


def test_the_layout_checks_see_a_circle_and_an_upward_import():
    # The checks above pass only if they can fail: a circle and an upward edge are found.
    assert cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]
    assert layer(f"{EVALUATION}.child.side") < layer(f"{EVALUATION}.worker.evaluation")
