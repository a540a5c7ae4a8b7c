"""Catching candidates that pass by cheating rather than by computing: the
static checks, which read the candidate's source with `ast` on the host
before anything runs (the dynamic ones run in the children:
`child/guards.py`). Together they
catch the shortcuts KernelBench-style evaluations have seen: calling or
importing the reference, reading files (the task, cached outputs),
monkeypatching torch so the reference gets slower or the comparison lies,
swapping in the torch op the task asks to implement, digging reference
objects out of the interpreter (gc, inspect, frames), returning cached
outputs, aliasing or mutating inputs.

This is defence in depth, not a security boundary: the candidate runs in the
same child process as the checker, and a determined adversary with ctypes can
subvert anything in-process. The sandbox contains accidents and the common
cheats; run SAGE as an unprivileged user when candidates are untrusted.

Standard library only.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterable, Sequence
from sage_engine import syntax

# Modules a kernel has no business importing: they read files, run programs,
# or find objects (the reference, its outputs) inside the interpreter.
FORBIDDEN_MODULES = {
    "gc": "introspection",
    "inspect": "introspection",
    "tracemalloc": "introspection",
    "linecache": "file-access",
    "importlib": "dynamic-code",
    "builtins": "dynamic-code",
    "runpy": "dynamic-code",
    "code": "dynamic-code",
    "codeop": "dynamic-code",
    "subprocess": "process",
    "shutil": "file-access",
    "glob": "file-access",
    "fnmatch": "file-access",
    "pickle": "file-access",
    "marshal": "file-access",
    "shelve": "file-access",
    "dill": "file-access",
    "socket": "network",
    "urllib": "network",
    "http": "network",
    "requests": "network",
    "sage_engine": "reference",
    "sage_mcp": "reference",
    "__main__": "reference",
}
# Calls (canonical dotted names) that read files, run programs or signal processes.
FORBIDDEN_CALLS = {
    "open": "file-access",
    "io.open": "file-access",
    "codecs.open": "file-access",
    "os.open": "file-access",
    "os.fdopen": "file-access",
    "os.read": "file-access",
    "os.listdir": "file-access",
    "os.scandir": "file-access",
    "os.walk": "file-access",
    "os.system": "process",
    "os.popen": "process",
    "os.kill": "process",
    "os.killpg": "process",
    "numpy.load": "file-access",
    "numpy.fromfile": "file-access",
    "numpy.loadtxt": "file-access",
    "numpy.genfromtxt": "file-access",
    "numpy.memmap": "file-access",
    "torch.load": "file-access",
    "torch.from_file": "file-access",
    "torch.set_num_threads": "threads",
    "torch.set_num_interop_threads": "threads",
    "os.sched_setaffinity": "threads",
    "exec": "dynamic-code",
    "eval": "dynamic-code",
    "compile": "dynamic-code",
    "__import__": "dynamic-code",
}
FORBIDDEN_CALL_PREFIXES = {"os.exec": "process", "os.spawn": "process", "os.posix_spawn": "process"}
# Attribute names that reach frames, globals or every live object.
FORBIDDEN_ATTRS = {
    "_getframe",
    "_current_frames",
    "f_back",
    "f_globals",
    "f_locals",
    "tb_frame",
    "gi_frame",
    "cr_frame",
    "ag_frame",
    "__subclasses__",
    "__globals__",
    "__builtins__",
    "get_referrers",
    "get_referents",
    "get_objects",
    "modules",
}
FILE_METHODS = {"read_text", "read_bytes", "iterdir", "rglob"}
# Methods that point a tensor at other memory: the harness's inputs keep theirs.
REPOINT_METHODS = {"set_", "_set_storage", "swap_tensors"}
# Harmless global switches a CUDA candidate may flip.
PATCH_ALLOWED = {"torch.backends.cudnn.benchmark"}
# A forbidden matmul also forbids the `@` operator, which is torch.matmul.
MATMUL_NAMES = {"matmul", "mm", "bmm"}
_CPP_FILE_RE = re.compile(r"\b(fopen|freopen|popen|system|ifstream|fstream|opendir|std::filesystem)\b")
_SHORT = {"F": "torch.nn.functional", "nn": "torch.nn"}


@dataclass(frozen=True)
class Finding:
    rule: str
    message: str
    line: int | None = None
    column: int | None = None


def canonical_forbid(name: str) -> str:
    head, _, rest = name.partition(".")
    if head in _SHORT:
        return f"{_SHORT[head]}.{rest}" if rest else _SHORT[head]
    return name


def check_source(source: str, *, forbid: Iterable[str] = (), reference_names: Iterable[str] = ()) -> list[Finding]:
    """Static findings, in source order. Raises SyntaxError for unparsable
    source (a compile error, reported by the caller)."""
    tree = syntax.parse(source, filename="candidate.py")
    return _Checker(tree, forbid, reference_names).run()


class _Checker:
    def __init__(self, tree: ast.Module, forbid: Iterable[str], reference_names: Iterable[str]):
        self.tree = tree
        self.forbid = {canonical_forbid(f) for f in forbid if f.strip()}
        self.forbid_ops = {f.rsplit(".", 1)[-1] for f in self.forbid if f.startswith("torch")}
        self.reference_names = {"reference"} | {n for n in reference_names if n}
        self.aliases: dict[str, str] = {}
        self.bound: set[str] = set()
        self.module_names = _module_level_names(tree)
        self.forward_args = _forward_args(tree)
        self.findings: list[Finding] = []

    def run(self) -> list[Finding]:
        self._collect_aliases()
        for node in ast.walk(self.tree):
            self._visit(node)
        self._check_cpp_strings()
        seen: set[tuple] = set()
        unique = []
        for f in sorted(self.findings, key=lambda f: (f.line or 0, f.column or 0)):
            key = (f.rule, f.message, f.line)
            if key not in seen:
                seen.add(key)
                unique.append(f)
        return unique

    def _add(self, rule: str, message: str, node: ast.AST | None) -> None:
        line = getattr(node, "lineno", None)
        col = getattr(node, "col_offset", None)
        self.findings.append(Finding(rule, message, line, col + 1 if col is not None else None))

    # ------------------------------------------------------------ names

    def _collect_aliases(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        head = a.name.split(".")[0]
                        self.aliases[head] = head
                    self.bound.add(a.asname or a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                    self.bound.add(a.asname or a.name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(node.name)
            elif isinstance(node, ast.arg):
                self.bound.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.bound.add(node.id)
        # `T = torch.Tensor` style aliases, so `T.add = f` is seen as a patch.
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                resolved = self.resolve(node.value)
                if resolved and resolved.split(".")[0] in ("torch", "os", "pathlib", "io", "numpy"):
                    self.aliases[node.targets[0].id] = resolved

    def resolve(self, node: ast.AST) -> str | None:
        """Dotted name an expression refers to, through import aliases."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call) and _is_getattr(node):
            base = self.resolve(node.args[0])
            name = node.args[1]
            if base and isinstance(name, ast.Constant) and isinstance(name.value, str):
                return f"{base}.{name.value}"
        return None

    # ------------------------------------------------------------ checks

    def _visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for a in node.names:
                self._check_module(a.name, node)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                self._add("reference", "relative imports are not allowed (the candidate is a single module)", node)
            elif node.module:
                self._check_module(node.module, node)
                for a in node.names:
                    self._check_name(f"{node.module}.{a.name}", node)
                    if a.name == "Model":
                        self._add("reference", "imports a class named Model: the reference is off limits", node)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id == "Model" and "Model" not in self.bound:
                self._add("reference", "refers to the reference class Model; implement ModelNew yourself", node)
            elif node.id == "__builtins__":
                self._add("dynamic-code", "accesses __builtins__", node)
        elif isinstance(node, ast.Attribute):
            self._check_attribute(node)
        elif isinstance(node, ast.Call):
            self._check_call(node)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in _assign_targets(targets):
                if isinstance(target, ast.Attribute):
                    self._check_patch(target, node)
                    self._check_identity(target, node)
                elif isinstance(target, ast.Subscript):
                    self._check_patch(target.value, node)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            if self.forbid_ops & MATMUL_NAMES:
                self._add("forbidden-op", "uses the @ operator (torch.matmul), which this task forbids", node)

    def _check_identity(self, target: ast.Attribute, stmt: ast.AST) -> None:
        """`x.__class__ = ...` anywhere, `x.data = ...` on a forward argument: an input relabelled or re-pointed."""
        if target.attr == "__class__":
            self._add("identity", "assigns __class__: a kernel may not change what its inputs (or outputs) are", stmt)
        elif target.attr == "data" and isinstance(target.value, ast.Name) and target.value.id in self.forward_args:
            self._add("identity", f"assigns {target.value.id}.data: a kernel may not point its inputs at other memory", stmt)

    def _check_module(self, module: str, node: ast.AST) -> None:
        parts = module.split(".")
        if parts[0] in FORBIDDEN_MODULES:
            rule = FORBIDDEN_MODULES[parts[0]]
            self._add(rule, f"imports {module}, which candidates may not use ({rule.replace('-', ' ')})", node)
        elif any(p in self.reference_names for p in parts):
            self._add("reference", f"imports {module}: the reference module is off limits", node)

    def _check_name(self, name: str, node: ast.AST) -> None:
        """A dotted name the candidate refers to (attribute chain or import)."""
        if name in FORBIDDEN_CALLS and "." in name:
            rule = FORBIDDEN_CALLS[name]
            self._add(rule, f"uses {name}, which candidates may not use ({rule.replace('-', ' ')})", node)
        for prefix, rule in FORBIDDEN_CALL_PREFIXES.items():
            if name.startswith(prefix):
                self._add(rule, f"uses {name}, which candidates may not use ({rule})", node)
        if self._is_forbidden_op(name):
            self._add("forbidden-op", f"uses {name}, which this task forbids (it is the operator to implement)", node)

    def _is_forbidden_op(self, name: str) -> bool:
        if name in self.forbid:
            return True
        if not name.startswith("torch."):
            return False
        last = name.rsplit(".", 1)[-1]
        # Same op under another torch path: torch.special.softmax, torch.ops.aten._softmax.
        return bool(last) and last[0].islower() and (last in self.forbid_ops or last.lstrip("_") in self.forbid_ops)

    def _check_attribute(self, node: ast.Attribute) -> None:
        if node.attr in FORBIDDEN_ATTRS:
            base = self.resolve(node.value)
            if node.attr != "modules" or base == "sys":
                self._add("introspection", f"accesses .{node.attr}, which can reach the reference's objects", node)
        if node.attr in FILE_METHODS:
            self._add("file-access", f"calls .{node.attr}(), which reads the file system", node)
        if node.attr in REPOINT_METHODS:
            self._add("identity", f"calls .{node.attr}(), which points a tensor at other memory: kernels may not re-point inputs", node)
        if node.attr == "open":
            base = self.resolve(node.value.func if isinstance(node.value, ast.Call) else node.value) or ""
            if base.split(".")[0] in ("pathlib", "io", "os", "codecs", "tarfile", "zipfile"):
                self._add("file-access", f"calls {base}.open(), which reads the file system", node)
        root = node.value
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in self.aliases:
            name = self.resolve(node)
            if name:
                self._check_name(name, node)
        elif (
            node.attr in self.forbid_ops
            and node.attr[:1].islower()
            and not isinstance(node.ctx, ast.Store)
            and not (isinstance(root, ast.Name) and root.id in self.module_names)
        ):
            # x.softmax(...) on a tensor: the forbidden op as a Tensor method.
            # Module-level names (`_ext = load_inline(...)`) hold the
            # candidate's own functions, which may share the op's name.
            self._add("forbidden-op", f"calls the Tensor method .{node.attr}(), which this task forbids", node)

    def _check_call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id in FORBIDDEN_CALLS and func.id not in self.bound and func.id not in self.aliases:
                rule = FORBIDDEN_CALLS[func.id]
                self._add(rule, f"calls {func.id}(), which candidates may not use ({rule.replace('-', ' ')})", node)
            elif func.id in self.aliases:
                self._check_name(self.aliases[func.id], node)
        if isinstance(func, ast.Name) and func.id in ("getattr", "setattr", "delattr", "hasattr") and len(node.args) >= 2:
            self._check_named_attribute(func.id, node)
        called = func.id if isinstance(func, ast.Name) else None
        if _is_getattr(node) or called in ("setattr", "delattr"):
            base = self.resolve(node.args[0]) if node.args else None
            if base and base.split(".")[0] == "torch":
                if called in ("setattr", "delattr"):
                    self._add("monkeypatch", f"{called}() on {base}: candidates may not patch torch", node)
                elif len(node.args) > 1 and not isinstance(node.args[1], ast.Constant) and self.forbid:
                    self._add("forbidden-op", f"getattr() on {base} with a computed name cannot be checked", node)
                elif resolved := self.resolve(node):
                    self._check_name(resolved, node)

    def _check_named_attribute(self, fn: str, node: ast.Call) -> None:
        """`getattr(sys, "modules")`, `setattr(x, "__class__", C)`: the attribute
        rules for a name given as a constant string. A computed name is not
        readable here: these checks are early feedback, not the boundary."""
        name = node.args[1]
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            return
        attr, base = name.value, self.resolve(node.args[0])
        if attr in FORBIDDEN_ATTRS and (attr != "modules" or base == "sys"):
            self._add("introspection", f"{fn}() of .{attr}, which can reach the reference's objects", node)
        if attr in REPOINT_METHODS:
            self._add("identity", f"{fn}() of .{attr}, which points a tensor at other memory", node)
        if fn == "setattr" and attr == "__class__":
            self._add("identity", "setattr() of __class__: a kernel may not change what its inputs (or outputs) are", node)
        if fn == "setattr" and attr == "data" and isinstance(node.args[0], ast.Name) and node.args[0].id in self.forward_args:
            self._add("identity", f"setattr() of {node.args[0].id}.data: a kernel may not point its inputs at other memory", node)

    def _check_patch(self, target: ast.AST, stmt: ast.AST) -> None:
        name = self.resolve(target)
        if not name or name.split(".")[0] != "torch" or name in PATCH_ALLOWED:
            return
        if isinstance(target, ast.Name):
            return  # rebinding a local name, not patching the module
        self._add("monkeypatch", f"assigns to {name}: candidates may not patch torch", stmt)

    def _check_cpp_strings(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                if "#include" not in text and "torch::" not in text and "at::Tensor" not in text:
                    continue
                for m in _CPP_FILE_RE.finditer(text):
                    line = node.lineno + text.count("\n", 0, m.start())
                    self.findings.append(Finding("file-access", f"C++ source uses {m.group(1)}, which reads files or runs programs", line))


def _module_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in _assign_targets(targets) if isinstance(t, ast.Name))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _forward_args(tree: ast.Module) -> set[str]:
    """Parameter names of every `forward` (but `self`): the inputs the harness hands a kernel."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "forward":
            args = node.args
            names.update(a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if a.arg != "self")
            names.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
    return names


def _assign_targets(targets: Sequence[ast.expr]) -> Iterable[ast.expr]:
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            yield from _assign_targets(list(target.elts))
        elif isinstance(target, ast.Starred):
            yield from _assign_targets([target.value])
        else:
            yield target


def _is_getattr(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2
