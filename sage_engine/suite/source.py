"""Source transformations of imported references, all through `ast`.

- `strip_imports`: drop NPU-only imports (torch_npu, the benchmark's compiled
  `kernel_gen_ops`) and imports nothing uses any more;
- `requirements`: what a reference needs beyond a CPU (an NPU, a GPU);
- `self_candidate`: the reference's `Model` and only what it needs, renamed
  `ModelNew` (the candidate `sage suite check` evaluates).

Random draws are `randomness.py`'s.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterable
from sage_engine import syntax

NPU_ONLY_MODULES = ("torch_npu", "kernel_gen_ops")
# Import names kept even when unused: importing them is the point (device registration).
_KEEP_UNUSED = {"torch", "__future__"}
_DEVICES = ("npu", "cuda")
# torch.cuda.is_available() and friends are how CPU fallbacks are written.
_DEVICE_QUERIES = {"is_available", "device_count", "is_initialized"}


@dataclass(frozen=True)
class Requirement:
    kind: str  # "npu", "cuda" or "network"
    reason: str
    line: int | None = None


# ------------------------------------------------------------------ imports


def _import_names(node: ast.Import | ast.ImportFrom) -> list[tuple[ast.alias, str, str]]:
    """(alias, bound name, module) for every name an import binds."""
    out = []
    for alias in node.names:
        if isinstance(node, ast.Import):
            out.append((alias, alias.asname or alias.name.split(".")[0], alias.name))
        else:
            out.append((alias, alias.asname or alias.name, node.module or ""))
    return out


def used_names(nodes: Iterable[ast.AST]) -> set[str]:
    used: set[str] = set()
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                used.add(sub.id)
    return used


def strip_imports(tree: ast.Module, *, drop_unused: bool = True) -> ast.Module:
    """Without NPU-only imports (top level and inside functions they stay:
    calling them is what makes a task need an NPU) and, when `drop_unused`,
    without top-level imports whose names nothing uses."""
    others = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))]
    used = used_names(others)
    body = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            keep = []
            for alias, bound, module in _import_names(node):
                if module.split(".")[0] in NPU_ONLY_MODULES or alias.name.split(".")[0] in NPU_ONLY_MODULES:
                    continue
                if drop_unused and bound not in used and module.split(".")[0] not in _KEEP_UNUSED:
                    continue
                keep.append(alias)
            if not keep:
                continue
            node.names = keep
        body.append(node)
    tree.body = body
    return tree


def ensure_torch_import(tree: ast.Module) -> ast.Module:
    for node in tree.body:
        if isinstance(node, ast.Import) and any(a.name == "torch" and a.asname is None for a in node.names):
            return tree
    tree.body.insert(_after_docstring(tree), ast.Import(names=[ast.alias(name="torch")]))
    return tree


def _after_docstring(tree: ast.Module) -> int:
    first = tree.body[0] if tree.body else None
    return 1 if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str) else 0


def benchmark_imports(tree: ast.Module, packages: set[str]) -> set[str]:
    """Top-level packages among `packages` that the module still imports."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for _, _, module in _import_names(node):
                if module.split(".")[0] in packages:
                    found.add(module.split(".")[0])
    return found


# ------------------------------------------------------------ requirements


def requirements(tree: ast.Module) -> list[Requirement]:
    """What the reference needs beyond a CPU, from its code (not its comments)."""
    out: list[Requirement] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", None)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch_npu":
            out.append(Requirement("npu", f"calls torch_npu.{node.attr}", line))
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any(m.split(".")[0] == "torch_npu" for _, _, m in _import_names(node)):
            out.append(Requirement("npu", "imports torch_npu", line))
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "torch"
            and node.value.attr in _DEVICES
            and node.attr not in _DEVICE_QUERIES
        ):
            out.append(Requirement(node.value.attr, f"calls torch.{node.value.attr}.{node.attr}", line))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _DEVICES
            and not node.args
            and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "torch")
        ):
            out.append(Requirement(node.func.attr, f"moves tensors with .{node.func.attr}()", line))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "from_pretrained":
            out.append(Requirement("network", "downloads a pretrained model (from_pretrained)", line))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.fullmatch(r"(npu|cuda)(:\d+)?", node.value)
            and _device_argument(tree, node)
        ):
            out.append(Requirement(node.value.split(":")[0], f"creates tensors on device {node.value!r}", line))
    seen, unique = set(), []
    for r in sorted(out, key=lambda r: r.line or 0):
        if (r.kind, r.reason) not in seen:
            seen.add((r.kind, r.reason))
            unique.append(r)
    return unique


def _device_argument(tree: ast.Module, constant: ast.Constant) -> bool:
    """Whether the string is a `device=` argument or the argument of torch.device / .to()."""
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "device" and node.value is constant:
            return True
        if (
            isinstance(node, ast.Call)
            and constant in node.args
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("device", "to")
        ):
            return True
    return False


# ----------------------------------------------------------- self candidate


def _definitions(tree: ast.Module) -> dict[str, list[ast.stmt]]:
    defs: dict[str, list[ast.stmt]] = {}
    for node in tree.body:
        names: list[str] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [bound for _, bound, _ in _import_names(node)]
        for name in names:
            defs.setdefault(name, []).append(node)
    return defs


class _Renamer(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == "Model":
            node.id = "ModelNew"
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        if node.name == "Model":
            node.name = "ModelNew"
        self.generic_visit(node)
        return node


def self_candidate(source: str, *, import_roots: Iterable[str] = ()) -> str:
    """The reference's Model and what it needs (imports, helpers, constants),
    in source order, with Model renamed ModelNew. Raises ValueError without a Model."""
    tree = syntax.parse(source)
    defs = _definitions(tree)
    if "Model" not in defs:
        raise ValueError("the reference defines no class Model")
    needed: list[ast.stmt] = []
    seen_nodes: set[int] = set()
    queue = ["Model"]
    done: set[str] = set()
    while queue:
        name = queue.pop()
        if name in done:
            continue
        done.add(name)
        for node in defs.get(name, []):
            if id(node) in seen_nodes:
                continue
            seen_nodes.add(id(node))
            needed.append(node)
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            queue.extend(n for n in used_names([node]) if n in defs and n not in done)
    order = {id(n): i for i, n in enumerate(tree.body)}
    body = []
    for node in sorted(needed, key=lambda n: order[id(n)]):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            # Only the names the closure uses from a multi-name import.
            keep = [a for a, bound, _ in _import_names(node) if bound in done]
            node = ast.ImportFrom(node.module, keep, node.level) if isinstance(node, ast.ImportFrom) else ast.Import(keep)
        body.append(node)
    module = ast.Module(body=body, type_ignores=[])
    module = _Renamer().visit(module)
    ast.fix_missing_locations(module)
    header = '"""The reference\'s Model, renamed ModelNew (`sage suite check`)."""\n'
    roots = list(import_roots)
    if roots:
        header += f"import sys\nsys.path[:0] = {roots!r}  # the benchmark's helper package, read-only\n"
    return header + ast.unparse(module) + "\n"
