"""Arguments that fail a tool's input schema, said in the words of the tool's
parameters ("k must be between 1 and 50; got 0") instead of the validator's
("1 validation error for retrieve_rulesArguments ... [type=greater_than_equal,
...] For further information visit https://errors.pydantic.dev/...").

The server turns every such failure into this text once, for every tool
(`SageServer.call_tool`); the limits quoted come from the same JSON schema the
client was given, so the message and the schema cannot disagree.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, Sequence

from pydantic import ValidationError

Schema = Mapping[str, Any]
SHOWN_CHARS = 60  # longer rejected values are cut: the caller has them, the message only points


def describe(error: ValidationError, schema: Schema) -> str:
    """One sentence per problem, in the order the validator found them."""
    problems = [_problem(e, schema) for e in error.errors(include_url=False)]
    return ". ".join(dict.fromkeys(problems))


def _problem(e: Mapping[str, Any], root: Schema) -> str:
    loc = [part for part in e["loc"] if not (isinstance(part, str) and "[" in part)]  # union branch tags
    name = _name(loc) or "the arguments"
    field = _at(root, loc)
    kind, ctx, got = e["type"], e.get("ctx") or {}, f"; got {_shown(e.get('input'))}"
    if kind == "missing":
        return f"{name} is required"
    if kind == "extra_forbidden":
        parent = _at(root, loc[:-1])
        known = ", ".join((parent or {}).get("properties", {})) or "none"
        return f"{_name(loc[:-1]) or 'the arguments'} has no field {loc[-1]!r}; its fields are {known}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return f"{name} must be {_bounds(field, ctx)}{got}"
    if kind in (
        "int_type",
        "int_parsing",
        "int_from_float",
        "float_type",
        "float_parsing",
        "bool_type",
        "bool_parsing",
        "string_type",
        "list_type",
        "dict_type",
        "model_type",
        "model_attributes_type",
    ):
        return f"{name} must be {_kind(field, root) or _KINDS.get(kind, 'something else')}{got}"
    if kind in ("string_too_long", "string_too_short", "too_long", "too_short"):
        unit = "characters" if kind.startswith("string") else "items"
        limit = ctx.get("max_length", ctx.get("min_length"))
        return f"{name} must have at {'most' if 'long' in kind else 'least'} {limit} {unit}{got}"
    if kind in ("literal_error", "enum"):
        return f"{name} must be one of {ctx.get('expected', '')}{got}"
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return f"{name}: {ctx['error']}"
    message = str(e.get("msg", "is not valid"))
    if message.startswith("Input should"):
        return f"{name} should{message[len('Input should') :]}{got}"
    return f"{name}: {message[:1].lower()}{message[1:]}{got}"


# What a validator's type error asks for, where the schema says nothing more.
_KINDS = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}


def _name(loc: Sequence[Any]) -> str:
    """`adopted[0].weight`: the path a caller writes to reach the value."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _at(root: Schema, loc: Sequence[Any]) -> Schema | None:
    """The schema of the value at `loc`, or None where the schema has none."""
    node: Schema | None = _plain(root, root)
    for part in loc:
        if node is None:
            return None
        if isinstance(part, int):
            node = node.get("items")
        else:
            node = (node.get("properties") or {}).get(part)
        node = _plain(node, root)
    return node


def _plain(node: Schema | None, root: Schema) -> Schema | None:
    """Follow a $ref, and take the non-null branch of an optional value."""
    for _ in range(8):  # schemas here nest a few levels; a cycle must not loop
        if node is None:
            return None
        if "$ref" in node:
            node = (root.get("$defs") or {}).get(str(node["$ref"]).rsplit("/", 1)[-1])
            continue
        options = [o for o in node.get("anyOf", ()) if o.get("type") != "null"]
        if len(options) == 1:
            node = {**{k: v for k, v in node.items() if k != "anyOf"}, **options[0]}
            continue
        return node
    return node


def _kind(field: Schema | None, root: Schema, depth: int = 0) -> str:
    """The JSON value a field takes: `an integer between 1 and 50`, `a list of
    integers`, `an object {id, evidence?, weight?}`."""
    if field is None:
        return ""
    t = field.get("type")
    if t == "integer" or t == "number":
        bounds = _bounds(field, {})
        return ("an integer" if t == "integer" else "a number") + (f" {bounds}" if bounds else "")
    if t == "string":
        return "a string"
    if t == "boolean":
        return "true or false"
    if t == "array":
        inner = _kind(_plain(field.get("items"), root), root, depth + 1) if depth < 2 else ""
        return f"a list of {_plural(inner)}" if inner else "a list"
    if t == "object":
        required = set(field.get("required", ()))
        keys = [k if k in required else f"{k}?" for k in field.get("properties", {})]
        return f"an object {{{', '.join(keys)}}}" if keys else "an object"
    return ""


def _plural(kind: str) -> str:
    for one, many in (
        ("an integer", "integers"),
        ("a number", "numbers"),
        ("a string", "strings"),
        ("an object", "objects"),
        ("a list", "lists"),
        ("true or false", "true or false values"),
    ):
        if kind.startswith(one):
            return many + kind[len(one) :]
    return kind


def _bounds(field: Schema | None, ctx: Mapping[str, Any]) -> str:
    """`between 1 and 50`, `at least 1`, `greater than 0 and at most 1`: both
    limits where the schema has both, so one message says the whole range."""
    field = field or {}
    integer = field.get("type") == "integer"
    low = _limit(field, ctx, "minimum", "ge", "exclusiveMinimum", "gt", +1 if integer else 0)
    high = _limit(field, ctx, "maximum", "le", "exclusiveMaximum", "lt", -1 if integer else 0)
    if low and high and low[1] and high[1]:
        return f"between {_number(low[0])} and {_number(high[0])}"
    parts = []
    if low:
        parts.append(f"{'at least' if low[1] else 'greater than'} {_number(low[0])}")
    if high:
        parts.append(f"{'at most' if high[1] else 'less than'} {_number(high[0])}")
    return " and ".join(parts)


def _limit(
    field: Schema, ctx: Mapping[str, Any], inclusive: str, ctx_inclusive: str, exclusive: str, ctx_exclusive: str, integer_step: int
) -> tuple[float, bool] | None:
    """(value, inclusive) of one side; an exclusive integer limit becomes the
    inclusive one next to it (`< 2**63` reads as `at most 2**63 - 1`)."""
    for key, bag, closed in ((inclusive, field, True), (ctx_inclusive, ctx, True), (exclusive, field, False), (ctx_exclusive, ctx, False)):
        value = bag.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not closed and integer_step:
                return value + integer_step, True
            return value, closed
    return None


def _number(value: float) -> str:
    return str(int(value)) if isinstance(value, int) or (math.isfinite(value) and value == int(value)) else str(value)


def _shown(value: Any) -> str:
    """The rejected value as the caller wrote it (JSON), cut short."""
    if isinstance(value, str) and len(value) > SHOWN_CHARS:
        return f"a string of {len(value)} characters"
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."
