"""Choosing CPU sizes for a task, inside the sandbox child.

The runner `run_probe` (named in the request as
`sage_engine.suite.probe:run_probe`) receives a task and a budget. For each
case it estimates the reference's cost at the benchmark's sizes on the meta
device (no memory, no arithmetic: shapes, bytes and matmul/conv FLOPs), then
halves size slots (`sizes.py`) until the estimate fits, checking every step
on the meta device so a halving that breaks a shape constraint is undone.
Where a reference cannot run on the meta device (`.item()`, `.tolist()` in
its builders) the shapes written in the case stand in for the cost. The
chosen sizes then run once for real on the CPU, which both proves them and
measures them. Imports only the standard library, torch and `sizes`.
"""

from __future__ import annotations

import secrets
import sys
import time
import types
from typing import Any

from sage_engine.suite import sizes

# A halving is kept only if it cuts the estimated cost by at least this factor.
MIN_GAIN = 0.95
# Measured on the CPU, a halving counts when it saves 10% (timings are noisy) ...
REAL_GAIN = 0.9
# ... and halving goes on while a measured call is over this many times the target.
SLACK = 4.0
DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
          "complex64")


class _Cost:
    def __init__(self, method: str, nbytes: int = 0, flops: int = 0, ms: float | None = None):
        self.method, self.nbytes, self.flops, self.ms = method, nbytes, flops, ms

    def estimate_ms(self, opts: dict[str, Any]) -> float:
        return self.flops / float(opts["flops_per_ms"]) + self.nbytes / float(opts["bytes_per_ms"])

    def as_dict(self, opts: dict[str, Any]) -> dict[str, Any]:
        return {"method": self.method, "bytes": self.nbytes, "flops": self.flops,
                "estimate_ms": round(self.estimate_ms(opts), 3), "real_ms": self.ms}


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
        torch.manual_seed(seed)
        inputs = list(module.get_inputs())
        params = 0
        if isinstance(model, torch.nn.Module):
            params = sum(_nbytes(t) for t in list(model.parameters()) + list(model.buffers()))
        with torch.no_grad():
            if device == "meta":
                counter = FlopCounterMode(display=False)
                with counter:
                    out = model(*inputs)
                return _Cost("meta", _nbytes(inputs) + _nbytes(out) + params, counter.get_total_flops())
            start = time.perf_counter()
            model(*inputs)
            return _Cost("cpu", _nbytes(inputs) + params, 0, (time.perf_counter() - start) * 1e3)


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

    def __init__(self, source: str, case: dict[str, Any], seed: int, opts: dict[str, Any], module_mode: bool):
        self.source, self.case, self.seed, self.opts, self.module_mode = source, case, seed, opts, module_mode
        self.slots = sizes.module_slots(source) if module_mode else sizes.case_slots(case)
        self.names = {s.key: s.name for s in self.slots}
        self.notes: list[str] = []

    def configured(self, values: dict[tuple, int]) -> tuple[str, dict[str, Any]]:
        if self.module_mode:
            return sizes.apply_module(self.source, values), self.case
        return self.source, sizes.apply_case(self.case, values)

    def cost(self, values: dict[tuple, int], method: str) -> _Cost:
        source, case = self.configured(values)
        if method == "meta":
            return _run(source, case, self.seed, "meta")
        if method == "inputs":
            return _inputs_on_meta(source, case, self.seed)
        return _Cost("shapes", sizes.shape_volume(case) * 4)

    def first_cost(self, values: dict[tuple, int]) -> _Cost | None:
        for method in ("meta", "inputs", "shapes"):
            if method == "inputs" and not self.module_mode:
                continue
            try:
                cost = self.cost(values, method)
            except BaseException as exc:  # the reference's own code: anything can happen
                self.notes.append(f"{method} estimate failed: {_error(exc)}")
                continue
            if cost.nbytes or cost.flops:
                return cost
        return None

    def run(self) -> dict[str, Any]:
        original = {s.key: s.value for s in self.slots}
        target = float(self.opts["target_ms"])
        cost = self.first_cost(original)
        report: dict[str, Any] = {"changes": [], "notes": self.notes}
        if cost is None:
            report["notes"].append("sizes kept: the cost could not be estimated")
            return report
        report["original"] = cost.as_dict(self.opts)
        if cost.estimate_ms(self.opts) <= target:
            report["final"] = report["original"]
            return report
        path, current, failed = [original], original, set()
        steps = 0
        while cost.estimate_ms(self.opts) > target and steps < int(self.opts["max_steps"]):
            steps += 1
            moved = False
            for keys in sizes.proposals(self.slots, current, failed):
                trial = sizes.halved(current, keys, self.names)
                try:
                    trial_cost = self.cost(trial, cost.method)
                except BaseException:  # the halving broke a shape rule: never try it again
                    failed.add(keys)
                    continue
                if trial_cost.estimate_ms(self.opts) > MIN_GAIN * cost.estimate_ms(self.opts):
                    failed.add(keys)  # a size that hardly costs anything (num_classes): keep it
                    continue
                current, cost, moved = trial, trial_cost, True
                path.append(current)
                break
            if not moved:
                break
        if current == original:
            report["notes"].append("sizes kept: no halving keeps the reference valid")
            report["final"] = report["original"]
            return report
        final = self._prove(path, cost, failed)
        if final is None:
            report["notes"].append("sizes kept: the scaled reference failed on the CPU")
            report["final"] = report["original"]
            return report
        values, final_cost = final
        report["final"] = final_cost.as_dict(self.opts)
        report["changes"] = [[list(k), old, new] for k, (old, new) in sizes.changes(self.slots, values).items()]
        return report

    def _prove(self, path: list[dict[tuple, int]], cost: _Cost, failed: set[tuple]
               ) -> tuple[dict[tuple, int], _Cost] | None:
        """Run the chosen sizes on the CPU; back off (larger) when they fail,
        go on halving while the real time is far over the target."""
        target = float(self.opts["target_ms"])
        for back in range(min(len(path) - 1, 3)):
            values = path[len(path) - 1 - back]
            try:
                real = self.cost_cpu(values)
            except BaseException as exc:
                self.notes.append(f"scaled sizes failed on the CPU: {_error(exc)}")
                continue
            tried = set(failed)
            for _ in range(int(self.opts["max_steps"])):
                if real.ms is None or real.ms <= SLACK * target:
                    break
                moves = sizes.proposals(self.slots, values, tried)
                if not moves:
                    break
                tried.add(moves[0])
                trial = sizes.halved(values, moves[0], self.names)
                try:
                    trial_real = self.cost_cpu(trial)
                except BaseException:
                    continue
                if trial_real.ms is not None and trial_real.ms <= REAL_GAIN * real.ms:
                    values, real = trial, trial_real
            return values, _Cost(cost.method, cost.nbytes, cost.flops, real.ms)
        return None

    def cost_cpu(self, values: dict[tuple, int]) -> _Cost:
        source, case = self.configured(values)
        return _run(source, case, self.seed, "cpu")


def run_probe(request: dict[str, Any], emit: Any) -> dict[str, Any]:
    """Child-side runner: per-case size choices for CPU."""
    task, opts = request["task"], request["scale"]
    source, seed = task["reference_source"], int(task.get("seed", 1024))
    cases = task["cases"]
    module_mode = cases == [{}]
    out = []
    for index, case in enumerate(cases):
        emit.progress(index + 1, len(cases) + 1, f"sizing case {index + 1}/{len(cases)}")
        out.append(_Search(source, case, seed, opts, module_mode).run())
    return {"status": "correct", "message": "sized", "scale": out}
