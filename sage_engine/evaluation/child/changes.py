"""Changes to a task's inputs that keep a verdict honest, and the words for them.

- `scaled_draws`, `large_values`: the inputs of the `large values` variant,
  made by the task's own builder with torch's floating random draws scaled
  as they are drawn, so whatever the builder does with its draws (a row set
  to 1.0, a sort, a softmax, a mask) holds of them too; inputs that are not
  floating or hold whole numbers (indices, masks, labels kept as floats)
  come from the ordinary draw of the same seed.
- `with_changes`: a few values of each floating input replaced by the same
  positions of another valid input set: the second input set of a stale
  check. A kernel that recognises its inputs by a sample of their values
  returns its stored answer for these, and that answer is wrong.
- `Churn`: elements swapped in each input before every timed call, outside
  the timed interval, so no call sees the values of another: an answer
  remembered by the inputs' values is never the one asked for. The swaps
  follow from a seed per batch, so the reference process repeats them on
  its own copy of the candidate's inputs.

Standard library and torch only (imported lazily): both children use it.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any, Callable, Iterator


def floating(value: Any) -> bool:
    import torch

    return type(value) is torch.Tensor and (value.is_floating_point() or value.is_complex()) and value.numel() > 0


def whole_numbers(t: Any) -> bool:
    """A floating tensor holding only whole numbers: indices, masks or labels, not measurements."""
    import torch

    if t.is_complex():
        return False
    finite = t[torch.isfinite(t)]
    return finite.numel() > 0 and bool((finite == finite.round()).all())


# torch's floating random draws: module functions, and the Tensor methods
# that fill in place (torch.nn.init and torch.distributions draw through these).
DRAWS = ("randn", "rand", "randn_like", "rand_like", "normal")
DRAWS_IN_PLACE = ("normal_", "uniform_")


@contextlib.contextmanager
def scaled_draws(torch: Any, factor: float) -> Iterator[list[int]]:
    """While open, every floating value torch draws at random comes out
    `factor` times larger; yields a one-element list counting the draws scaled.
    Only the reference process opens it, around the task's own builder."""
    count = [0]

    def scaled(draw: Callable[..., Any]) -> Callable[..., Any]:
        def scaled_draw(*args: Any, **kwargs: Any) -> Any:
            out = draw(*args, **kwargs)
            if type(out) is torch.Tensor and (out.is_floating_point() or out.is_complex()):
                with torch.no_grad():
                    out.mul_(factor)
                count[0] += 1
            return out

        return scaled_draw

    functions = {name: getattr(torch, name) for name in DRAWS}
    methods = {name: torch.Tensor.__dict__.get(name) for name in DRAWS_IN_PLACE}
    try:
        for name, draw in functions.items():
            setattr(torch, name, scaled(draw))
        for name in DRAWS_IN_PLACE:
            setattr(torch.Tensor, name, scaled(getattr(torch.Tensor, name)))
        yield count
    finally:
        for name, draw in functions.items():
            setattr(torch, name, draw)
        for name, method in methods.items():
            if method is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, method)


def large_values(ordinary: list[Any], drawn: list[Any]) -> list[Any] | None:
    """The `large values` inputs: each floating input of the ordinary draw
    that is not whole numbers taken from `drawn` (the same builder and seed,
    draws scaled), the rest as drawn ordinarily; None where no input changed."""
    import torch

    if len(drawn) != len(ordinary):
        return None
    out, changed = [], False
    for o, d in zip(ordinary, drawn):
        take = (
            floating(o)
            and not whole_numbers(o)
            and type(d) is torch.Tensor
            and d.shape == o.shape
            and d.dtype == o.dtype
            and not torch.equal(d, o)
        )
        changed = changed or take
        out.append(d if take else o)
    return out if changed else None


def with_changes(values: list[Any], other: list[Any], count: int, rng: random.Random) -> list[Any]:
    """Copies of `values` with `count` positions of each floating tensor (of
    every tensor where none is floating) taken from `other`, which must have
    the same layout; the rest untouched."""
    import torch

    tensors = [i for i, v in enumerate(values) if type(v) is torch.Tensor and v.layout == torch.strided and v.numel() > 0]
    pick = [i for i in tensors if floating(values[i])] or tensors
    out = list(values)
    for i in pick:
        v, o = values[i], other[i]
        if type(o) is not torch.Tensor or o.shape != v.shape or o.dtype != v.dtype:
            continue
        changed = v.clone(memory_format=torch.contiguous_format)
        flat, source = changed.view(-1), o.reshape(-1).to(v.device)
        at = torch.tensor([rng.randrange(flat.numel()) for _ in range(count)], device=v.device)
        flat[at] = source[at]
        out[i] = changed
    return out


class Churn:
    """Swaps `swaps` pairs of elements in each timed input before a call.

    Floating inputs are churned (ints and masks too where no input floats):
    a swap keeps every value the input had, so ranges and distributions stay
    as the task made them. The positions of a batch follow from a seed the
    worker sends with it (`plan`), so the reference process can make the
    very same swaps on its own copy of the candidate's inputs (`run`)
    and judge a drawn call on inputs the candidate's process never handed
    back: a churn switched off or turned elsewhere in the candidate's
    process only makes its outputs wrong. Within a call no position repeats
    (a device's indexed writes with repeated positions land in no set
    order). The first call of a batch planned with `hold` runs on its inputs
    unchanged: its output is the one a fresh-input check compares. Host
    tensors are swapped through a NumPy view of their raw bits (about 2 µs a
    swap), device tensors by indexing with the batch's positions, moved up
    once a batch.
    """

    def __init__(self, torch: Any, inputs: list[Any], swaps: int, like: "Churn | None" = None):
        self.torch, self.swaps = torch, swaps
        self.tensors = churned(torch, inputs)
        # None: every position. `like`: a churn of this process on the same values
        # (swapped since, which moves no hand-set value): its positions, not searched again.
        same = like is not None and [(t.shape, t.dtype) for t in like.tensors] == [(t.shape, t.dtype) for t in self.tensors]
        self.movable: list[Any] = list(like.movable) if like is not None and same else [movable_positions(torch, t) for t in self.tensors]
        self.host = [_raw_bits(torch, t) if t.device.type == "cpu" else None for t in self.tensors]
        self.flat = [t.view(-1) for t in self.tensors]
        self.hold_first = False
        self.pairs: list[list[list[tuple[int, int]]]] = []  # per tensor, per call of the batch: its swaps
        self.on_device: list[Any] = []  # per tensor, the batch's positions on its device (None on the host)

    @property
    def active(self) -> bool:
        return self.swaps > 0 and bool(self.tensors)

    def plan(self, seed: int, calls: int, hold: bool = False) -> None:
        """The swaps of a batch of `calls` calls, from `seed`."""
        torch = self.torch
        gen = torch.Generator().manual_seed(seed)
        self.hold_first = hold
        self.pairs, self.on_device = [], []
        for t, bits, movable in zip(self.tensors, self.host, self.movable):
            n = t.numel() if movable is None else movable.numel()
            drawn = torch.randint(max(1, n), (calls, self.swaps, 2), generator=gen)
            if movable is not None:
                drawn = movable[drawn] if n > 1 else torch.zeros_like(drawn)  # nothing to move: (0, 0) swaps nothing
            drawn = drawn.tolist()
            per_call = [_distinct(call) for call in drawn]
            self.pairs.append(per_call)
            if bits is None:
                # Padded by repeating a pair (the same two writes twice), or (0, 0): every write lands in one order.
                flat_pairs = [p for call in per_call for p in (call + [call[0] if call else (0, 0)] * (self.swaps - len(call)))]
                self.on_device.append(torch.tensor(flat_pairs, dtype=torch.int64).view(calls, self.swaps, 2).to(t.device))
            else:
                self.on_device.append(None)

    def __call__(self, i: int) -> None:
        if i == 0 and self.hold_first:
            return
        for k, bits in enumerate(self.host):
            if bits is not None:
                for a, b in self.pairs[k][i]:
                    bits[a], bits[b] = bits[b], bits[a]
            else:
                flat, at = self.flat[k], self.on_device[k][i]
                src, dst = at[:, 0], at[:, 1]
                taken, before_dst = flat[src], flat[dst]
                flat[src] = before_dst
                flat[dst] = taken

    def run(self, seed: int, calls: int, hold: bool) -> None:
        """A whole batch's swaps, planned here: what the reference makes on its copy of the candidate's inputs."""
        self.plan(seed, calls, hold)
        for i in range(calls):
            self(i)


def churned(torch: Any, inputs: list[Any]) -> list[Any]:
    """The inputs a churn swaps: plain contiguous tensors of more than one
    element, the floating ones where any floats. Both processes choose
    from copies of the same inputs, so they choose alike."""
    tensors = [t for t in inputs if type(t) is torch.Tensor and t.numel() > 1 and t.is_contiguous()]
    return [t for t in tensors if floating(t)] or tensors


# Past this many elements an input's values are not searched for repeats
# (a sort of the whole input, once a timing phase): every position moves.
MOVABLE_SEARCH_LIMIT = 1 << 24


def movable_positions(torch: Any, t: Any) -> Any:
    """The positions of `t` the churn may move, or None for all of them.

    A swap keeps every value an input had but not where it sits, and a task
    may promise where (a table whose row 0 is 1.0, a padding value, a
    mask's fill): a kernel that trusts that promise is right, and must not
    be judged on inputs that break it. In float32 and float64 inputs, random
    draws seldom repeat a value exactly (a few times at most, even in inputs
    of millions), and what a task's builder sets by hand does: values found
    eight times or more stay where they are. (In narrower floats random values repeat too, so every position
    moves there.) Both processes search copies of the same values, so they
    find the same positions."""
    if t.dtype not in (torch.float32, torch.float64) or t.numel() > MOVABLE_SEARCH_LIMIT:
        return None
    _, inverse, counts = torch.unique(t.detach().reshape(-1), return_inverse=True, return_counts=True)
    fixed = counts[inverse] >= 8
    if not bool(fixed.any()):
        return None
    return torch.nonzero(~fixed).view(-1).cpu()


def _distinct(call: list[list[int]]) -> list[tuple[int, int]]:
    """A call's swaps with no position twice: a pair that repeats an earlier position swaps nothing."""
    used: set[int] = set()
    out = []
    for a, b in call:
        if a in used or b in used or a == b:
            continue
        used.update((a, b))
        out.append((a, b))
    return out


def _raw_bits(torch: Any, t: Any) -> Any:
    """A NumPy view of a host tensor's elements as integers of the same width (None where none fits)."""
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(t.element_size())
    if width is None:
        return None
    try:
        return t.view(-1).view(width).numpy()
    except (RuntimeError, TypeError):
        return None


def shapes(values: list[Any]) -> str:
    """The tensor inputs' shapes as messages name them: `[16, 393216]`, or
    `[1024, 512] x [512, 256]` for several."""
    import torch

    found = [list(v.shape) for v in values if isinstance(v, torch.Tensor)]
    return " x ".join(str(s) for s in found) if found else "no tensor inputs"


HINTS = {
    "odd": "a kernel that assumes its sizes (a block as long as the row, no mask on the tail)?",
    "small": "a kernel that assumes its sizes (a grid or block computed for the declared shape)?",
    "large values": "overflow at large magnitudes? (subtract the maximum before exp; accumulate in float32)",
}


def variant_hint(name: str) -> str:
    return HINTS.get(name, "a kernel that assumes its sizes?")


def failed_at(declared_at: str, at: str, variant: str, message: str, verb: str = "fails") -> str:
    """A failure at sizes the kernel was not written for, in the words every such verdict uses."""
    return f"correct at {declared_at}, {verb} at {at} ({variant}): {variant_hint(variant)} {message}"
