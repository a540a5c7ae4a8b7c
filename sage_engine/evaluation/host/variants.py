"""Sizes a candidate was not written for: the shape variants every task is
checked at after its declared cases.

A kernel that hard-codes its sizes (a block as long as the row, no mask on
the tail, a grid computed for the declared shape) passes at the declared
case and nowhere else. From the integers that size the task (`sage_engine.sizes`:
module constants and case-row sizes, the slots `--scale cpu` halves), each
task gets, derived from its first case:

- `odd`: every size about halved and made odd (never a power of two);
  a size too small to halve (17 or less: `out_channels = 7`, an element of
  `input_shape`, `sizes.small_extent`) about doubled and odd instead,
  past the next power of two (a kernel that assumes it fits one block of 8);
- `small`: every size about an eighth, a multiple of 8 (a batch an eighth);
  no size goes below 16 (a batch excepted): `tl.dot` and most vector units
  need tiles of 16, and a kernel is not wrong for needing them;
- `large values`: the task's own inputs with their floating random draws
  times `edge_scale`, at the small sizes (an `exp` without the row maximum
  subtracted overflows), where the reference's outputs stay finite (the
  child makes them: `child/changes.py`).

Each variant lists alternatives, tried in order until one the reference
runs: all sizes changed together, then all but the small sizes grown (a
dimension of 3 the reference fixes, RGB), then each group of equal sizes
alone (a width that must stay a multiple of the head count fails the
first). Parsed, never run: the server never executes a reference.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from sage_engine.evaluation.protocol import Variant
from sage_engine import sizes

MAX_ALTERNATIVES = 3
# Sizes a variant never goes below (batches excepted): the smallest tile of a
# matrix unit (tl.dot needs 16 along each axis).
MIN_SIZE = 16
# Beyond the sizes `--scale` leaves alone (kernels, strides, heads, ...):
# layout parameters whose change changes what the operator computes.
LAYOUT = re.compile(r"block|window|tile|chunk|pool|patch", re.IGNORECASE)


def odd_size(value: int, name: str = "") -> int:
    """About half, odd (an odd number above 1 is never a power of two), at
    least 17; a size that cannot halve to 17 or more doubled plus one (past
    the next power of two: 7 -> 15, 16 -> 33). A batch halves down to 1."""
    half = value // 2
    odd = half + 1 if half % 2 == 0 else half
    if sizes.BATCH.search(name):
        odd = max(odd, 1)
        return odd if odd < value else value
    odd = max(odd, MIN_SIZE + 1)
    return odd if odd < value else 2 * value + 1


def small_size(value: int, name: str) -> int:
    """About an eighth: a batch down to 1, a size a multiple of 8 (at least 16)."""
    if sizes.BATCH.search(name):
        return max(1, value // 8)
    return min(value, max(MIN_SIZE, value // 64 * 8))


def variants_for(task: Any, edge_scale: float = 0.0) -> list[Variant]:
    """The shape variants of a task (`Task`), alternatives in the order the reference tries them."""
    row = dict(task.case_rows[0])
    slots = _slots(task.reference_source, row)
    out = []
    odd = _alternatives(row, slots, lambda s: odd_size(s.value, s.name), task.reference_source)
    small = _alternatives(row, slots, lambda s: small_size(s.value, s.name), task.reference_source)
    if odd:
        out.append(Variant("odd", odd))
    if small:
        out.append(Variant("small", small))
    if edge_scale > 0:
        out.append(Variant("large values", [*small[: MAX_ALTERNATIVES - 1], row], scale=float(edge_scale)))
    return out


def _slots(source: str, row: dict[str, Any]) -> list[sizes.Slot]:
    """The scalable sizes of a case: its row's, and the module's constants the row does not set."""
    try:
        module = [s for s in sizes.module_slots(source) if s.name not in row]
    except SyntaxError:
        module = []
    return [s for s in module + sizes.case_slots(row) if (sizes.scalable(s) or sizes.small_extent(s)) and not LAYOUT.search(s.name)]


def _alternatives(row: dict[str, Any], slots: list[sizes.Slot], size: Callable[[sizes.Slot], int], source: str) -> list[dict[str, Any]]:
    new = {s.key: size(s) for s in slots}
    changed = [s for s in slots if new[s.key] != s.value]
    if not changed:
        return []
    groups: dict[int, list[sizes.Slot]] = {}
    for s in changed:
        groups.setdefault(s.value, []).append(s)
    # A small size the reference fixes (3 for RGB) must not cost the variant every other size.
    shrunk = [s for s in changed if new[s.key] < s.value]
    choices = [changed] + ([shrunk] if shrunk and len(shrunk) < len(changed) else [])
    choices += [groups[v] for v in sorted(groups, reverse=True)] if len(groups) > 1 else []
    rows: list[dict[str, Any]] = []
    for chosen in choices:
        candidate = _row(row, {s.key: new[s.key] for s in chosen}, source)
        if candidate not in rows and candidate != row:
            rows.append(candidate)
    return rows[:MAX_ALTERNATIVES]


def _row(row: dict[str, Any], values: dict[tuple, int], source: str) -> dict[str, Any]:
    """The case row with these slots set: a row's own sizes in place, module constants as entries."""
    out = sizes.apply_case(row, {k: v for k, v in values.items() if k[0] == "case"})
    constants = sizes.module_values(source)
    for key, value in values.items():
        if key[0] != "const":
            continue
        name = key[1]
        if len(key) == 2:
            out[name] = value
        else:
            items = list(out.get(name, constants[name]))
            items[key[2]] = value
            out[name] = items
    return out
