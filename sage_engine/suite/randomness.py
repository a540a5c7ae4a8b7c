"""Making an imported reference's random draws work and repeat on a CPU, through `ast`.

- `shim_random_inputs`: input builders that draw `torch.rand`/`randn`/
  `uniform_`/`normal_` values in an integer or boolean dtype (which CPU torch
  refuses) get valid values of that dtype instead;
- `seed_random_forward`: a `Model` whose forward draws random numbers draws
  them from a generator seeded at every call, so the reference is a function
  of its inputs (`random_in_forward` finds the draws).
"""

from __future__ import annotations

import ast
import re

from sage_engine.suite.source import used_names
from sage_engine import syntax

_RANDOM_FACTORIES = {"rand", "randn", "rand_like", "randn_like"}
_RANDOM_METHODS = {"uniform_", "normal_"}
# Calls that draw random numbers (torch.X, F.X, nn.X, Tensor.X).
_RANDOM_CALLS = {
    "rand",
    "randn",
    "randint",
    "randperm",
    "rand_like",
    "randn_like",
    "randint_like",
    "bernoulli",
    "multinomial",
    "normal",
    "poisson",
    "dropout",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "alpha_dropout",
    "feature_alpha_dropout",
    "Dropout",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "AlphaDropout",
    "FeatureAlphaDropout",
    "rrelu",
    "RReLU",
    "uniform_",
    "normal_",
    "bernoulli_",
    "random_",
    "exponential_",
    "geometric_",
    "cauchy_",
    "log_normal_",
    "gumbel_softmax",
}
# nn modules whose construction draws random initial weights: built inside
# forward, each call (and each process) gets different ones.
_RANDOM_INIT_MODULE = re.compile(
    r"(Lazy)?(Linear|Bilinear|Conv(Transpose)?[123]d|Embedding(Bag)?|(RNN|LSTM|GRU)(Cell)?|MultiheadAttention"
    r"|Transformer((Encoder|Decoder)(Layer)?)?)"
)
SHIM_SOURCE = """

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
"""
SEED_SOURCE = """

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
"""


# ------------------------------------------------------------- input shims


_FLOAT_DTYPES = {"float", "float16", "float32", "float64", "half", "double", "bfloat16", "complex64", "complex128", "cfloat", "cdouble"}


def _may_be_integer(call: ast.Call) -> bool:
    """Whether a factory call's dtype can be an integer one: a dtype is given
    and is not literally a floating-point torch dtype."""
    for kw in call.keywords:
        if kw.arg == "dtype":
            value = kw.value
            return not (
                isinstance(value, ast.Attribute)
                and isinstance(value.value, ast.Name)
                and value.value.id == "torch"
                and value.attr in _FLOAT_DTYPES
            )
    return False


class _RandomRewriter(ast.NodeTransformer):
    def __init__(self) -> None:
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "torch"
            and func.attr in _RANDOM_FACTORIES
            and _may_be_integer(node)
        ):
            self.changed = True
            return ast.copy_location(
                ast.Call(func=ast.Name(f"_sage_{func.attr}", ast.Load()), args=node.args, keywords=node.keywords), node
            )
        receiver = func.value if isinstance(func, ast.Attribute) else None
        if (
            isinstance(func, ast.Attribute)
            and func.attr in _RANDOM_METHODS
            and not (isinstance(receiver, ast.Name) and receiver.id in ("torch", "nn", "init"))
            and not (isinstance(receiver, ast.Call) and not _may_be_integer(receiver))
        ):
            # x.uniform_() on a tensor made here with a float dtype (or none) is left alone.
            self.changed = True
            return ast.copy_location(
                ast.Call(func=ast.Name(f"_sage_{func.attr}", ast.Load()), args=[func.value, *node.args], keywords=node.keywords), node
            )
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
        tree.body.extend(syntax.parse(SHIM_SOURCE).body)
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
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) and func.value.attr == "random":
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
    return bool(values) and isinstance(values[0], ast.Constant) and values[0].value in (0, 0.0) and not isinstance(values[0].value, bool)


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
        for part in [node, *(functions[name] for name in sorted(used_names([node]) & set(functions)))]:
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
    return [
        sub
        for sub in ast.walk(node)
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and _RANDOM_INIT_MODULE.fullmatch(sub.func.attr)
    ]


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
    tree.body[index:index] = syntax.parse(SEED_SOURCE.replace("{seed}", str(int(seed)))).body
    return True
