"""Source transformations of imported references, all through `ast`.

- `strip_imports`: drop NPU-only imports (torch_npu, the benchmark's compiled
  `kernel_gen_ops`) and imports nothing uses any more;
- `shim_random_inputs`: input builders that draw `torch.rand`/`randn`/
  `uniform_`/`normal_` values in an integer or boolean dtype (which CPU torch
  refuses) get valid values of that dtype instead;
- `seed_random_forward`: a `Model` whose forward draws random numbers draws
  them from a generator seeded at every call, so the reference is a function
  of its inputs;
- `requirements`: what a reference needs beyond a CPU (an NPU, a GPU);
- `self_candidate`: the reference's `Model` and only what it needs, renamed
  `ModelNew` (the candidate `sage suite check` evaluates).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterable

NPU_ONLY_MODULES = ("torch_npu", "kernel_gen_ops")
# Import names kept even when unused: importing them is the point (device registration).
_KEEP_UNUSED = {"torch", "__future__"}
_DEVICES = ("npu", "cuda")
# torch.cuda.is_available() and friends are how CPU fallbacks are written.
_DEVICE_QUERIES = {"is_available", "device_count", "is_initialized"}
_RANDOM_FACTORIES = {"rand", "randn", "rand_like", "randn_like"}
_RANDOM_METHODS = {"uniform_", "normal_"}
# Calls that draw random numbers (torch.X, F.X, nn.X, Tensor.X).
_RANDOM_CALLS = {
    "rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "bernoulli",
    "multinomial", "normal", "poisson", "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
    "feature_alpha_dropout", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
    "FeatureAlphaDropout", "rrelu", "RReLU", "uniform_", "normal_", "bernoulli_", "random_", "exponential_",
    "geometric_", "cauchy_", "log_normal_", "gumbel_softmax",
}
# nn modules whose construction draws random initial weights: built inside
# forward, each call (and each process) gets different ones.
_RANDOM_INIT_MODULE = re.compile(
    r"(Lazy)?(Linear|Bilinear|Conv(Transpose)?[123]d|Embedding(Bag)?|(RNN|LSTM|GRU)(Cell)?|MultiheadAttention"
    r"|Transformer((Encoder|Decoder)(Layer)?)?)")
SHIM_SOURCE = '''

# --- added by `sage suite import`: CPU torch cannot draw uniform/normal values
# in integer or boolean dtypes; these draw float values and map them to valid
# values of the requested dtype (float dtypes are unchanged).
def _sage_int_like(values, dtype, normal):
    if dtype == torch.bool:
        return values > (0.0 if normal else 0.5)
    if normal:
        values = values * 3.0
    else:
        values = values * 8.0
    if not dtype.is_signed:
        values = values.abs()
    return values.floor().clamp(torch.iinfo(dtype).min, torch.iinfo(dtype).max).to(dtype)


def _sage_draw(factory, normal, args, kwargs):
    dtype = kwargs.get("dtype")
    if dtype is None or dtype.is_floating_point or dtype.is_complex:
        return factory(*args, **kwargs)
    kwargs = {**kwargs, "dtype": torch.float32}
    requires_grad = kwargs.pop("requires_grad", False)
    return _sage_int_like(factory(*args, **kwargs), dtype, normal).requires_grad_(requires_grad)


def _sage_rand(*args, **kwargs):
    return _sage_draw(torch.rand, False, args, kwargs)


def _sage_randn(*args, **kwargs):
    return _sage_draw(torch.randn, True, args, kwargs)


def _sage_like(factory, normal, other, kwargs):
    dtype = kwargs.get("dtype", other.dtype)
    if dtype.is_floating_point or dtype.is_complex:
        return factory(other, **kwargs)
    return _sage_int_like(factory(other, **{**kwargs, "dtype": torch.float32}), dtype, normal)


def _sage_rand_like(other, **kwargs):
    return _sage_like(torch.rand_like, False, other, kwargs)


def _sage_randn_like(other, **kwargs):
    return _sage_like(torch.randn_like, True, other, kwargs)


def _sage_fill(tensor, method, args, kwargs):
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
        return getattr(tensor, method)(*args, **kwargs)
    drawn = torch.empty(tensor.shape, dtype=torch.float32, device=tensor.device)
    if tensor.dtype == torch.bool:
        return tensor.copy_(drawn.uniform_() > 0.5)
    drawn = getattr(drawn, method)(*args, **kwargs).floor()
    info = torch.iinfo(tensor.dtype)
    return tensor.copy_(drawn.clamp(info.min, info.max).to(tensor.dtype))


def _sage_uniform_(tensor, *args, **kwargs):
    return _sage_fill(tensor, "uniform_", args, kwargs)


def _sage_normal_(tensor, *args, **kwargs):
    return _sage_fill(tensor, "normal_", args, kwargs)
'''
SEED_SOURCE = '''

# --- added by `sage suite import`: forward draws random numbers; drawing them
# from a generator seeded at every call makes the output a function of the inputs.
def _sage_seeded_forward(forward):
    import functools

    @functools.wraps(forward)
    def seeded(*args, **kwargs):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed({seed})
            return forward(*args, **kwargs)

    return seeded
'''


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


def _used_names(nodes: Iterable[ast.AST]) -> set[str]:
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
    used = _used_names(others)
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
    return 1 if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) \
        and isinstance(first.value.value, str) else 0


def benchmark_imports(tree: ast.Module, packages: set[str]) -> set[str]:
    """Top-level packages among `packages` that the module still imports."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for _, _, module in _import_names(node):
                if module.split(".")[0] in packages:
                    found.add(module.split(".")[0])
    return found


# ------------------------------------------------------------- input shims


_FLOAT_DTYPES = {"float", "float16", "float32", "float64", "half", "double", "bfloat16", "complex64",
                 "complex128", "cfloat", "cdouble"}


def _may_be_integer(call: ast.Call) -> bool:
    """Whether a factory call's dtype can be an integer one: a dtype is given
    and is not literally a floating-point torch dtype."""
    for kw in call.keywords:
        if kw.arg == "dtype":
            value = kw.value
            return not (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)
                        and value.value.id == "torch" and value.attr in _FLOAT_DTYPES)
    return False


class _RandomRewriter(ast.NodeTransformer):
    def __init__(self) -> None:
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "torch" \
                and func.attr in _RANDOM_FACTORIES and _may_be_integer(node):
            self.changed = True
            return ast.copy_location(ast.Call(func=ast.Name(f"_sage_{func.attr}", ast.Load()), args=node.args,
                                              keywords=node.keywords), node)
        receiver = func.value if isinstance(func, ast.Attribute) else None
        if isinstance(func, ast.Attribute) and func.attr in _RANDOM_METHODS and not (
                isinstance(receiver, ast.Name) and receiver.id in ("torch", "nn", "init")) and not (
                isinstance(receiver, ast.Call) and not _may_be_integer(receiver)):
            # x.uniform_() on a tensor made here with a float dtype (or none) is left alone.
            self.changed = True
            return ast.copy_location(ast.Call(func=ast.Name(f"_sage_{func.attr}", ast.Load()),
                                              args=[func.value, *node.args], keywords=node.keywords), node)
        return node


def shim_random_inputs(tree: ast.Module, functions: set[str]) -> bool:
    """Rewrite the random draws of the named top-level functions (and every
    function nested in them) to the dtype-aware shims; append the shims.
    Returns whether anything changed."""
    rewriter = _RandomRewriter()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in functions:
            rewriter.visit(node)
    if rewriter.changed:
        tree.body.extend(ast.parse(SHIM_SOURCE).body)
    return rewriter.changed


# ---------------------------------------------------------- random forward


def _random_calls(node: ast.AST) -> list[ast.Call]:
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in _RANDOM_CALLS:
                if "ropout" in name and _zero_probability(sub):
                    continue  # Dropout(p=0.0) draws nothing
                found.append(sub)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "random":
                found.append(sub)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) \
                    and func.value.attr == "random":
                found.append(sub)  # np.random.x
    return found


def _zero_probability(call: ast.Call) -> bool:
    """nn.Dropout(0.0) / nn.Dropout(p=0) / F.dropout(x, p=0.0): a literal zero."""
    values = [kw.value for kw in call.keywords if kw.arg == "p"]
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    position = 0 if name[:1].isupper() else 1  # nn.Dropout(p) vs F.dropout(input, p)
    if not values and len(call.args) > position:
        values = [call.args[position]]
    return bool(values) and isinstance(values[0], ast.Constant) and values[0].value in (0, 0.0) \
        and not isinstance(values[0].value, bool)


def _model_class(tree: ast.Module) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)


def random_in_forward(tree: ast.Module) -> list[int]:
    """Lines where the Model draws random numbers after construction: in its
    methods other than __init__ (including modules built there, whose initial
    weights are random), in the modules __init__ creates that are random
    (dropout), and in the top-level functions it calls."""
    model = _model_class(tree)
    if model is None:
        return []
    lines = []
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for node in model.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        constructing = node.name == "__init__"
        # A helper the method calls counts as part of it (`conv_bn(c)` building layers for __init__).
        for part in [node, *(functions[name] for name in sorted(_used_names([node]) & set(functions)))]:
            lines += [c.lineno for c in _drawn(part, constructing)]
    return sorted(set(lines))


def _drawn(node: ast.AST, constructing: bool) -> list[ast.Call]:
    """Calls in `node` that draw random numbers when it runs. While the model
    is constructed, drawing initial weights is deterministic (both processes
    seed before it) and creating random modules (nn.Dropout) is too; only
    using them later is not."""
    calls = _random_calls(node)
    if constructing:
        return [c for c in calls if isinstance(c.func, ast.Attribute) and c.func.attr[:1].isupper()]
    return calls + _weights_drawn(node)


def _weights_drawn(node: ast.AST) -> list[ast.Call]:
    """Constructions of nn modules with random initial weights (`nn.Conv2d(...)`)."""
    return [sub for sub in ast.walk(node) if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)
            and _RANDOM_INIT_MODULE.fullmatch(sub.func.attr)]


def seed_random_forward(tree: ast.Module, seed: int) -> bool:
    """Decorate Model.forward with a per-call seeded generator when the model
    draws random numbers after construction."""
    model = _model_class(tree)
    if model is None or not random_in_forward(tree):
        return False
    forward = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None:
        return False
    forward.decorator_list.insert(0, ast.Name("_sage_seeded_forward", ast.Load()))
    index = tree.body.index(model)
    tree.body[index:index] = ast.parse(SEED_SOURCE.replace("{seed}", str(int(seed)))).body
    return True


# ------------------------------------------------------------ requirements


def requirements(tree: ast.Module) -> list[Requirement]:
    """What the reference needs beyond a CPU, from its code (not its comments)."""
    out: list[Requirement] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", None)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch_npu":
            out.append(Requirement("npu", f"calls torch_npu.{node.attr}", line))
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                m.split(".")[0] == "torch_npu" for _, _, m in _import_names(node)):
            out.append(Requirement("npu", "imports torch_npu", line))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and isinstance(node.value.value, ast.Name) and node.value.value.id == "torch" \
                and node.value.attr in _DEVICES and node.attr not in _DEVICE_QUERIES:
            out.append(Requirement(node.value.attr, f"calls torch.{node.value.attr}.{node.attr}", line))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _DEVICES \
                and not node.args and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
            out.append(Requirement(node.func.attr, f"moves tensors with .{node.func.attr}()", line))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "from_pretrained":
            out.append(Requirement("network", "downloads a pretrained model (from_pretrained)", line))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and re.fullmatch(r"(npu|cuda)(:\d+)?", node.value) and _device_argument(tree, node):
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
        if isinstance(node, ast.Call) and constant in node.args and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("device", "to"):
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
    tree = ast.parse(source)
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
            queue.extend(n for n in _used_names([node]) if n in defs and n not in done)
    order = {id(n): i for i, n in enumerate(tree.body)}
    body = []
    for node in sorted(needed, key=lambda n: order[id(n)]):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            # Only the names the closure uses from a multi-name import.
            keep = [a for a, bound, _ in _import_names(node) if bound in done]
            node = ast.ImportFrom(node.module, keep, node.level) if isinstance(node, ast.ImportFrom) \
                else ast.Import(keep)
        body.append(node)
    module = ast.Module(body=body, type_ignores=[])
    module = _Renamer().visit(module)
    ast.fix_missing_locations(module)
    header = '"""The reference\'s Model, renamed ModelNew (`sage suite check`)."""\n'
    roots = list(import_roots)
    if roots:
        header += f"import sys\nsys.path[:0] = {roots!r}  # the benchmark's helper package, read-only\n"
    return header + ast.unparse(module) + "\n"
