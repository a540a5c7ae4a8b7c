"""Choosing CPU sizes for a task, inside the sandbox child.

The runner `run_probe` (named in the request as
`sage_engine.suite.probe:run_probe`) receives a task and a budget. For each
case it estimates the reference's cost at the benchmark's sizes on the meta
device (no memory, no arithmetic: shapes, bytes and matmul/conv FLOPs), then
halves size slots (`sage_engine/sizes.py`) until the estimate fits, checking every step
on the meta device so a halving that breaks a shape constraint is undone.
Where a reference cannot run on the meta device (`.item()`, `.tolist()` in
its builders) the shapes written in the case stand in for the cost, and each
halving, once small enough, runs on the CPU to show it keeps the reference
valid (the shapes cannot tell that one width must stay half another). The
chosen sizes then run once for real on the CPU, which both proves them and
measures them. Where the cases are rows, sizes the model's constructor fixes
(`self.vocab_size = 65536`) are chosen first, once for all cases, on the
costliest one. Imports only the standard library, torch and `sizes`.
"""

from __future__ import annotations

import secrets
import sys
import time
import types
from typing import Any

from sage_engine import sizes

# A halving is kept only if it cuts the estimated cost by at least this factor.
MIN_GAIN = 0.95
# Measured on the CPU, a halving counts when it saves 10% (timings are noisy) ...
REAL_GAIN = 0.9
# ... and halving goes on while a measured call is over this many times the target.
SLACK = 2.0
LONG_CALL_MS = 1000.0
# A check builds a case's inputs once per trial and calls forward twice
# (reference and candidate), so a measured call adds half the time the input
# builders took: some build with NumPy in float64 and take 10x the forward.
INPUTS_SHARE = 0.5
# Halvings chosen without the meta device (from written shapes) run on the CPU
# to prove them while their estimate is below this many times the target
# (larger ones would cost seconds and gigabytes; the proof at the end checks them).
CHECK_BELOW = 8.0
# Cases estimated above this share of the target also run once for real: the
# estimate misses slow dtypes (bfloat16/float16 arithmetic on CPUs).
PROVE_ABOVE = 0.25
# When the chosen sizes fail on the CPU, this many steps back are tried, and
# further ones while their estimate stays under CHECK_BELOW x the target: a
# rule the meta device cannot see (indices drawn up to 10000 into a table
# halved below that) can fail several halvings in a row.
BACK_OFF = 3
DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8", "bool", "complex64")


class _Cost:
    def __init__(self, method: str, nbytes: int = 0, flops: int = 0, ms: float | None = None):
        self.method, self.nbytes, self.flops, self.ms = method, nbytes, flops, ms

    def estimate_ms(self, opts: dict[str, Any]) -> float:
        return self.flops / float(opts["flops_per_ms"]) + self.nbytes / float(opts["bytes_per_ms"])

    def best_ms(self, opts: dict[str, Any]) -> float:
        """The measured time of a CPU run, else the estimate."""
        return self.ms if self.method == "cpu" and self.ms is not None else self.estimate_ms(opts)

    def as_dict(self, opts: dict[str, Any]) -> dict[str, Any]:
        estimate = self.best_ms(opts)
        return {"method": self.method, "bytes": self.nbytes, "flops": self.flops, "estimate_ms": round(estimate, 3), "real_ms": self.ms}


def _nbytes(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    return 0


def _load(source: str, case: dict[str, Any]) -> types.ModuleType:
    import torch

    name = f"_sage_probe_{secrets.token_hex(4)}"
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, "reference.py", "exec"), module.__dict__)
    for key, value in case.items():
        module.__dict__[key] = getattr(torch, value) if isinstance(value, str) and value in DTYPES else value
    return module


def _run(source: str, case: dict[str, Any], seed: int, device: str) -> _Cost:
    """Build and call the reference once on `device` ("meta" or "cpu")."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    module = _load(source, case)
    with torch.device(device):
        torch.manual_seed(seed)
        init = module.get_init_inputs()
        torch.manual_seed(seed)
        model = module.Model(*init)
        # Built twice on the CPU (the faster counts, as for the calls below):
        # one build on a busy machine can take twice its time.
        inputs_ms = float("inf")
        for _ in range(1 if device == "meta" else 2):
            torch.manual_seed(seed)
            built = time.perf_counter()
            inputs = list(module.get_inputs())
            inputs_ms = min(inputs_ms, (time.perf_counter() - built) * 1e3)
            if inputs_ms > LONG_CALL_MS:
                break
        params = 0
        if isinstance(model, torch.nn.Module):
            params = sum(_nbytes(t) for t in list(model.parameters()) + list(model.buffers()))
        with torch.no_grad():
            if device == "meta":
                counter = FlopCounterMode(display=False)
                with counter:
                    out = model(*inputs)
                return _Cost("meta", _nbytes(inputs) + _nbytes(out) + params, counter.get_total_flops())
            # The first call pays one-time costs (allocator, lazy init); a second,
            # unless the first was already long, gives the steady time.
            times = []
            for _ in range(2):
                start = time.perf_counter()
                model(*inputs)
                times.append((time.perf_counter() - start) * 1e3)
                if times[0] > LONG_CALL_MS:
                    break
            return _Cost("cpu", _nbytes(inputs) + params, 0, min(times) + INPUTS_SHARE * inputs_ms)


def _inputs_on_meta(source: str, case: dict[str, Any], seed: int) -> _Cost:
    import torch

    module = _load(source, case)
    with torch.device("meta"):
        torch.manual_seed(seed)
        return _Cost("inputs", _nbytes(list(module.get_inputs())))


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"


class _Search:
    """One case (or the module constants) of one task."""

    def __init__(
        self,
        source: str,
        case: dict[str, Any],
        seed: int,
        opts: dict[str, Any],
        module_mode: bool,
        constructor: list[sizes.Slot] | None = None,
    ):
        self.source, self.case, self.seed, self.opts, self.module_mode = source, case, seed, opts, module_mode
        self.slots = (sizes.module_slots(source) if module_mode else sizes.case_slots(case)) + list(constructor or [])
        self.names = {s.key: s.name for s in self.slots}
        self.target = float(opts["target_ms"])
        self.notes: list[str] = []

    def configured(self, values: dict[tuple, int]) -> tuple[str, dict[str, Any]]:
        source = sizes.apply_init(self.source, {k: v for k, v in values.items() if k[0] == "attr"})
        values = {k: v for k, v in values.items() if k[0] != "attr"}
        if self.module_mode:
            return sizes.apply_module(source, values), self.case
        return source, sizes.apply_case(self.case, values)

    def cost(self, values: dict[tuple, int], method: str) -> _Cost:
        source, case = self.configured(values)
        if method in ("meta", "cpu"):
            return _run(source, case, self.seed, method)
        if method == "inputs":
            return _inputs_on_meta(source, case, self.seed)
        return _Cost("shapes", sizes.shape_volume(case) * 4)

    def ms(self, cost: _Cost) -> float:
        return cost.best_ms(self.opts)

    def first_cost(self, values: dict[tuple, int]) -> _Cost | None:
        """The cheapest estimate that works; a real CPU call when none does."""
        for method in ("meta", "inputs", "shapes", "cpu"):
            if method == "inputs" and not self.module_mode:
                continue
            try:
                cost = self.cost(values, method)
            except BaseException as exc:  # the reference's own code: anything can happen
                self.notes.append(f"{method} estimate failed: {_error(exc)}")
                continue
            if cost.nbytes or cost.flops or cost.ms:
                return cost
        return None

    def halve_while(
        self, current: dict[tuple, int], cost: _Cost, limit: float, failed: set[tuple], path: list[tuple[dict[tuple, int], float]]
    ) -> tuple[dict[tuple, int], _Cost]:
        """Halve the largest slot while the cost exceeds `limit`; keep a halving
        only if it stays valid and saves enough."""
        gain = REAL_GAIN if cost.method == "cpu" else MIN_GAIN
        for _ in range(int(self.opts["max_steps"])):
            if self.ms(cost) <= limit:
                break
            for keys in sizes.proposals(self.slots, current, failed):
                trial = sizes.halved(current, keys, self.names)
                try:
                    trial_cost = self.cost(trial, cost.method)
                except BaseException:  # the halving broke a shape rule: never try it again
                    failed.add(keys)
                    continue
                if self.ms(trial_cost) > gain * self.ms(cost):
                    failed.add(keys)  # a size that hardly costs anything (num_classes): keep it
                    continue
                if not self.runs_on_cpu(trial, trial_cost):
                    failed.add(keys)
                    continue
                current, cost = trial, trial_cost
                path.append((current, self.ms(cost)))
                break
            else:
                break
        return current, cost

    def runs_on_cpu(self, values: dict[tuple, int], cost: _Cost) -> bool:
        """Whether a halving keeps the reference valid, where the estimate could
        not tell: the written shapes (or the inputs alone) say nothing about a
        rule between sizes (a value half as wide as the tensor it is assigned
        into), so small enough sizes are tried on the CPU."""
        if cost.method not in ("shapes", "inputs") or self.ms(cost) > CHECK_BELOW * self.target:
            return True
        try:
            self.cost(values, "cpu")
        except BaseException as exc:  # the reference's own code: anything can happen
            self.notes.append(f"a halving failed on the CPU: {_error(exc)}")
            return False
        return True

    def run(self) -> dict[str, Any]:
        original = {s.key: s.value for s in self.slots}
        report: dict[str, Any] = {"changes": [], "notes": self.notes}
        cost = self.first_cost(original)
        if cost is None:
            report["notes"].append("sizes kept: the cost could not be estimated")
            return report
        report["original"] = cost.as_dict(self.opts)
        path: list[tuple[dict[tuple, int], float]] = [(original, self.ms(cost))]
        failed: set[tuple] = set()
        current, cost = self.halve_while(original, cost, self.target, failed, path)
        if cost.method != "cpu" and self.ms(cost) < self.target * PROVE_ABOVE and current == original:
            report["final"] = report["original"]
            return report  # small by any measure: no need to run it
        proved = self.prove(path, cost, failed)
        if proved is None:
            # Also when the benchmark's own sizes fail: the check then says why.
            report["notes"].append("sizes kept: the reference failed on the CPU at the sizes tried")
            report["final"] = report["original"]
            return report
        values, final = proved
        report["final"] = final.as_dict(self.opts)
        report["changes"] = [[list(k), old, new] for k, (old, new) in sizes.changes(self.slots, values).items()]
        if not report["changes"] and (final.ms if final.ms is not None else self.ms(final)) > SLACK * self.target:
            report["notes"].append("sizes kept: no halving keeps the reference valid")
        return report

    def prove(self, path: list[tuple[dict[tuple, int], float]], cost: _Cost, failed: set[tuple]) -> tuple[dict[tuple, int], _Cost] | None:
        """Run the chosen sizes on the CPU (backing off to larger ones when
        they fail), then go on halving while a real call is far over the target."""
        for back, (values, estimate) in enumerate(reversed(path)):
            if back >= BACK_OFF and estimate > CHECK_BELOW * self.target:
                break
            try:
                real = self.cost(values, "cpu")
            except BaseException as exc:
                self.notes.append(f"sizes failed on the CPU: {_error(exc)}")
                continue
            values, real = self.halve_while(values, real, SLACK * self.target, set(failed), [(values, self.ms(real))])
            return values, _Cost(cost.method, cost.nbytes, cost.flops, real.ms)
        return None


def _constructor_sizes(
    source: str, cases: list[dict[str, Any]], seed: int, opts: dict[str, Any], emit: Any
) -> tuple[list[list], list[dict[str, Any]], list[_Cost | None]]:
    """Sizes the model fixes in its constructor (`self.vocab_size = 65536`)
    where the cases are rows: one value must serve every case (a candidate is
    built the same way for all of them). They are chosen on the case that
    costs the most, together with that case's sizes; a case size halved with a
    constructor size of the same value is the same dimension, so that value
    follows in every case. Returns the constructor changes, the cases with
    the followed dimensions, and each case's cost at its original sizes."""
    constructor = sizes.init_slots(source)
    if not constructor:
        return [], cases, [None] * len(cases)
    emit.progress(0, len(cases) + 1, "sizing the constructor")
    costs = []
    for case in cases:
        search = _Search(source, case, seed, opts, False)
        costs.append(search.first_cost({s.key: s.value for s in search.slots}))
    heavy = max(range(len(cases)), key=lambda i: c.best_ms(opts) if (c := costs[i]) is not None else 0.0)
    report = _Search(source, cases[heavy], seed, opts, False, constructor).run()
    changed = [change for change in report["changes"] if change[0][0] == "attr"]
    follow = {old: new for _, old, new in changed if any(k[0] == "case" and (o, n) == (old, new) for k, o, n in report["changes"])}
    followed = [sizes.apply_case(case, {s.key: follow[s.value] for s in sizes.case_slots(case) if s.value in follow}) for case in cases]
    return changed, followed, costs


def run_probe(request: Any, emit: Any) -> dict[str, Any]:
    """Child-side runner: per-case size choices for CPU (and, for tasks whose
    cases are rows, the sizes the constructor fixes, one for all cases).
    `request.runner_args["scale"]` holds the `CpuScale` settings."""
    task, opts = request.task, request.runner_args["scale"]
    source, seed = task.reference_source, task.seed
    cases = task.cases
    module_mode = cases == [{}]
    constructor: list[list] = []
    searched = cases
    original_costs: list[_Cost | None] = [None] * len(cases)
    if not module_mode:
        constructor, searched, original_costs = _constructor_sizes(source, cases, seed, opts, emit)
        source = sizes.apply_init(source, {tuple(k): new for k, _, new in constructor})
    out = []
    for index, case in enumerate(searched):
        emit.progress(index + 1, len(cases) + 1, f"sizing case {index + 1}/{len(cases)}")
        report = _Search(source, case, seed, opts, module_mode).run()
        if case is not cases[index]:
            # Changes are recorded against the benchmark's row, the followed dimensions included.
            final = sizes.apply_case(case, {tuple(k): new for k, _, new in report["changes"]})
            before = {s.key: s.value for s in sizes.case_slots(cases[index])}
            report["changes"] = [[list(s.key), before[s.key], s.value] for s in sizes.case_slots(final) if before.get(s.key) != s.value]
        original = original_costs[index]
        if constructor and original is not None:
            report["original"] = original.as_dict(opts)
        out.append(report)
    return {"status": "correct", "message": "sized", "scale": out, "constructor": constructor}
