"""The integer sizes in a task, found and rewritten without running it.

A *slot* is one integer that sizes a task: a module-level constant of a
KernelBench-style reference (`batch_size = 4096`, `N = 2048 * 2`, one element
of `input_shape = (3, 240, 240)`), or an integer inside a case row (an
element of NPUKernelBench's `"[128, 256]"` column text, of a MultiKernelBench
`"shape": [1, 128, 4096]`). CPU scaling halves slots; this module finds them,
proposes the halvings and writes the result back. Pure and standard-library
only: the probe in the sandbox child imports it. It sits beside `syntax.py`,
below both the suite (scaling, the probe) and the evaluation (the shape
variants), so that neither has to import the other for it.
"""

from __future__ import annotations

import ast
import copy
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator
from sage_engine import syntax

# Values below this are left alone: they are axes, counts of layers or small
# fixed extents more often than sizes, and halving them gains little.
MIN_SCALABLE = 16
# A halved size never drops below this, so tails and vector widths stay exercised.
MIN_SCALED = 8
# Hyperparameters, not sizes: halving them changes what the operator computes.
STRUCTURAL = re.compile(r"kernel|stride|pad|dilation|group|head|seed|bits", re.IGNORECASE)
# A batch is a count of independent problems: it may go down to 1 (from 2 up).
BATCH = re.compile(r"batch|^bs$|^b$|^num_batches$", re.IGNORECASE)
# Below MIN_SCALABLE a slot is a size only where its name says it measures
# something (or, in a case row, a key on its path does: `"shape"`): small
# integers are axes (`dim = 1`), counts (`step`, `k`), orders and factors
# more often than sizes.
EXTENT = re.compile(r"channel|feature|class|hidden|len|width|height|depth|size|shape|rows|cols|vocab|embed|token", re.IGNORECASE)
# A size of 1 is a broadcast or a kept dimension as often as an extent.
MIN_EXTENT = 2


@dataclass(frozen=True)
class Slot:
    key: tuple  # where the integer lives (see module_slots / case_slots)
    name: str  # the constant or parameter it belongs to
    value: int


def scalable(slot: Slot) -> bool:
    if BATCH.search(slot.name):
        return slot.value >= 2
    return slot.value >= MIN_SCALABLE and not STRUCTURAL.search(slot.name)


def small_extent(slot: Slot) -> bool:
    """A size below MIN_SCALABLE that is one by its name (`out_channels = 7`,
    an element of `input_shape`), never a batch or a structural parameter.
    Scaling leaves these alone; shape variants change them."""
    if BATCH.search(slot.name) or STRUCTURAL.search(slot.name) or not MIN_EXTENT <= slot.value < MIN_SCALABLE:
        return False
    return any(isinstance(part, str) and EXTENT.search(part) for part in (slot.name, *slot.key[1:]))


def halve(value: int, name: str = "") -> int:
    """Half, keeping an odd size odd (odd sizes are there to exercise tails)."""
    if BATCH.search(name):
        return max(1, value // 2)
    half = value // 2
    if value % 2 and half % 2 == 0:
        half += 1
    return max(MIN_SCALED, half)


# ----------------------------------------------------------- module constants


def _int_value(node: ast.AST) -> int | None:
    """An integer literal or arithmetic on integer literals (`2048 * 2`, `2**10`)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_value(node.operand)
        return -inner if inner is not None else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Pow)):
        left, right = _int_value(node.left), _int_value(node.right)
        if left is None or right is None or (isinstance(node.op, ast.Pow) and not 0 <= right <= 64):
            return None
        if isinstance(node.op, ast.FloorDiv) and right == 0:
            return None
        ops: dict[type[ast.operator], Callable[[int, int], int]] = {
            ast.Add: int.__add__,
            ast.Sub: int.__sub__,
            ast.Mult: int.__mul__,
            ast.FloorDiv: int.__floordiv__,
            ast.Pow: int.__pow__,
        }
        return ops[type(node.op)](left, right)
    return None


def _constant_assigns(tree: ast.Module) -> Iterator[tuple[str, ast.expr]]:
    """(name, the node of its value) for each top-level assignment: `n = 4096`,
    `n: int = 4096`, and each name of `batch, seq, dim = 2, 4096, 4096`."""
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if len(names) == len(node.targets):
                yield names[0], node.value
            elif len(node.targets) == 1 and isinstance(node.targets[0], (ast.Tuple, ast.List)):
                elts = node.targets[0].elts
                if not isinstance(node.value, (ast.Tuple, ast.List)):
                    continue
                unpacked = [t.id for t in elts if isinstance(t, ast.Name)]
                if len(unpacked) == len(elts) == len(node.value.elts):
                    yield from zip(unpacked, node.value.elts)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            yield node.target.id, node.value


def _int_items(node: ast.Tuple | ast.List) -> list[int] | None:
    """The elements of a tuple or list literal, when every one is an integer."""
    items = [_int_value(e) for e in node.elts]
    ints = [v for v in items if v is not None]
    return ints if len(ints) == len(items) else None


def module_slots(source: str) -> list[Slot]:
    """Top-level integer constants and the integer elements of top-level
    int tuples/lists. Keys: ("const", name) or ("const", name, i)."""
    slots = []
    for name, node in _constant_assigns(syntax.parse(source)):
        value = _int_value(node)
        if value is not None:
            slots.append(Slot(("const", name), name, value))
        elif isinstance(node, (ast.Tuple, ast.List)):
            items = _int_items(node)
            if items:
                slots.extend(Slot(("const", name, i), name, v) for i, v in enumerate(items))
    return slots


def apply_module(source: str, values: dict[tuple, int]) -> str:
    """The source with the given constant slots set; every other character is kept."""
    if not values:
        return source

    def text(name: str, node: ast.AST) -> str | None:
        if ("const", name) in values:
            return repr(int(values[("const", name)]))
        if isinstance(node, (ast.Tuple, ast.List)) and any(k[:2] == ("const", name) and len(k) == 3 for k in values):
            written = _int_items(node)
            if written is None:
                return None  # not a tuple of sizes: no slot of it can have been chosen
            items = [values.get(("const", name, i), v) for i, v in enumerate(written)]
            inner = ", ".join(repr(int(v)) for v in items)
            return f"[{inner}]" if isinstance(node, ast.List) else f"({inner}{',' if len(items) == 1 else ''})"
        return None

    return _splice(source, text)


Assigns = Callable[[ast.Module], Iterator[tuple[str, ast.expr]]]


def _splice(source: str, text_for: Callable[[str, ast.expr], str | None], assigns: Assigns | None = None) -> str:
    """The source with the value of each assignment that `text_for` answers
    for replaced; `assigns` picks the assignments (the top-level ones by default)."""
    tree = syntax.parse(source)
    offsets = [0]
    for line in source.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line.encode("utf-8")))
    data = source.encode("utf-8")
    edits = []
    for name, value_node in (assigns or _constant_assigns)(tree):
        text = text_for(name, value_node)
        # A parsed node always has its end position (Python 3.8+ fills it in).
        if text is None or value_node.end_lineno is None or value_node.end_col_offset is None:
            continue
        start = offsets[value_node.lineno - 1] + value_node.col_offset
        end = offsets[value_node.end_lineno - 1] + value_node.end_col_offset
        edits.append((start, end, text.encode("utf-8")))
    for start, end, replacement in sorted(edits, reverse=True):
        data = data[:start] + replacement + data[end:]
    return data.decode("utf-8")


def module_values(source: str, names: list[str] | None = None) -> dict[str, Any]:
    """The top-level integer constants as written (for recording original sizes)."""
    out: dict[str, Any] = {}
    for name, node in _constant_assigns(syntax.parse(source)):
        if names is not None and name not in names:
            continue
        value: int | list[int] | None = _int_value(node)
        if value is None and isinstance(node, (ast.Tuple, ast.List)):
            value = _int_items(node)
        if value is not None:
            out[name] = value
    return out


def module_names(source: str) -> set[str]:
    """Names the module assigns at top level."""
    return {name for name, _ in _constant_assigns(syntax.parse(source))}


def set_constants(source: str, values: dict[str, Any]) -> str:
    """The source with the named top-level assignments set to these literal
    values (written with repr); every other character is kept."""
    edits = {("const", name): value for name, value in values.items()}
    return _splice(source, lambda name, node: repr(edits[("const", name)]) if ("const", name) in edits else None)


# ------------------------------------------------------- constructor sizes


def _init_assigns(tree: ast.Module) -> Iterator[tuple[str, ast.expr]]:
    """(name, value node) for each `self.name = <integer>` directly in
    `Model.__init__`, for names the constructor assigns once."""
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    init = next((n for n in (model.body if model else []) if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None:
        return
    assigned: dict[str, int] = {}
    for node in ast.walk(init):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        )
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    assigned[t.attr] = assigned.get(t.attr, 0) + 1
    for node in init.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
            and assigned.get(target.attr) == 1
            and _int_value(value) is not None
        ):
            yield target.attr, value


def init_slots(source: str) -> list[Slot]:
    """Sizes the model fixes in its constructor (`self.vocab_size = 65536`),
    which no case row and no `get_init_inputs` reaches. Keys: ("attr", name)."""
    slots = []
    for name, node in _init_assigns(syntax.parse(source)):
        value = _int_value(node)
        if value is not None:  # always: _init_assigns yields integer values only
            slots.append(Slot(("attr", name), name, value))
    return slots


def apply_init(source: str, values: dict[tuple, int]) -> str:
    """The source with the given constructor slots set; every other character is kept."""
    wanted = {k[1]: v for k, v in values.items() if k[0] == "attr"}
    if not wanted:
        return source
    return _splice(source, lambda name, node: repr(int(wanted[name])) if name in wanted else None, _init_assigns)


# ------------------------------------------------------------------ case rows


def _parse_text(text: str) -> Any:
    """'[128, 256]' -> [128, 256]; None for text that is not an int structure."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[(0123456789-":
        return None
    try:
        value = syntax.literal_eval(stripped)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if _int_structure(value) else None


def _int_structure(value: Any) -> bool:
    if type(value) is int:
        return True
    return isinstance(value, (list, tuple)) and all(_int_structure(v) for v in value)


def _walk(value: Any, path: tuple, name: str, out: list[Slot]) -> None:
    if type(value) is int:
        out.append(Slot(path, name, value))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _walk(v, path + (i,), name, out)
    elif isinstance(value, dict):
        given = value.get("name")
        label = given if isinstance(given, str) else name
        for k, v in value.items():
            if k not in ("name", "dtype", "type", "required"):
                _walk(v, path + (k,), label, out)


def case_slots(case: dict[str, Any]) -> list[Slot]:
    """Integers of a case row. Keys: ("case", column, *path); a column whose
    text parses as an int structure has ("text",) after the column."""
    out: list[Slot] = []
    for column, value in case.items():
        if isinstance(value, str):
            parsed = _parse_text(value)
            if parsed is not None:
                _walk(parsed, ("case", column, "text"), column, out)
        elif not isinstance(value, bool):
            _walk(value, ("case", column), column, out)
    return out


def _set(value: Any, path: tuple, new: int) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, tuple):
        items = list(value)
        items[head] = _set(items[head], rest, new)
        return tuple(items)
    value[head] = _set(value[head], rest, new)
    return value


def _render(original: str, value: Any) -> str:
    text = repr(value)
    return text if ", " in original or "," not in original else text.replace(", ", ",")


def apply_case(case: dict[str, Any], values: dict[tuple, int]) -> dict[str, Any]:
    """A copy of the case with the given slots set; text columns stay text."""
    out = copy.deepcopy(case)
    parsed: dict[str, Any] = {}
    for key, new in values.items():
        column = key[1]
        if len(key) > 2 and key[2] == "text":
            if column not in parsed:
                parsed[column] = _parse_text(out[column])
            parsed[column] = _set(parsed[column], key[3:], int(new))
        else:
            out[column] = _set(out[column], key[2:], int(new))
    for column, value in parsed.items():
        out[column] = _render(case[column], value)
    return out


def shape_volume(case: dict[str, Any]) -> int:
    """Elements described by the shapes in a row: the sum over int lists of
    their product. A cost estimate for builders that cannot run on the meta device."""
    total = 0

    def visit(value: Any) -> None:
        nonlocal total
        if isinstance(value, (list, tuple)) and value and all(type(v) is int for v in value):
            total += math.prod(max(1, v) for v in value)
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v)
        elif isinstance(value, dict):
            for v in value.values():
                visit(v)

    for value in case.values():
        visit(_parse_text(value) if isinstance(value, str) else value)
    return total


# ------------------------------------------------------------------ proposals


def proposals(slots: list[Slot], current: dict[tuple, int], failed: set[tuple]) -> list[tuple[tuple, ...]]:
    """Halvings to try next, best first: every slot sharing the largest value
    together (equal sizes are usually the same dimension), with the slots one
    below it (the dimension's last index: a target `"range": [0, 4095]` of a
    4096-class input), then each alone."""
    live = [s for s in slots if scalable(Slot(s.key, s.name, current[s.key]))]
    by_value: dict[int, list[tuple]] = {}
    for s in live:
        by_value.setdefault(current[s.key], []).append(s.key)
    out: list[tuple[tuple, ...]] = []
    for value in sorted(by_value, reverse=True):
        keys = tuple(by_value[value])
        tied = keys + tuple(by_value.get(value - 1, ()))
        candidates = ([tied] if len(tied) > len(keys) else []) + [keys] + ([(k,) for k in keys] if len(keys) > 1 else [])
        out.extend(c for c in candidates if c not in failed)
    return out


def halved(current: dict[tuple, int], keys: tuple[tuple, ...], names: dict[tuple, str] | None = None) -> dict[tuple, int]:
    """`current` with `keys` halved. Halved together, a slot one below the
    largest stays one below it (a last index follows its size)."""
    names = names or {}
    out = {**current, **{k: halve(current[k], names.get(k, "")) for k in keys}}
    top = max((current[k] for k in keys), default=0)
    sizes_of_top = [out[k] for k in keys if current[k] == top]
    for k in keys:
        if current[k] == top - 1 and sizes_of_top:
            out[k] = sizes_of_top[0] - 1
    return out


def changes(slots: list[Slot], final: dict[tuple, int]) -> dict[tuple, tuple[int, int]]:
    return {s.key: (s.value, final[s.key]) for s in slots if final[s.key] != s.value}
