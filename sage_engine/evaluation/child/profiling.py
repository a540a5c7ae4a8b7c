"""Where one side's time goes, measured in its own process after timing
(the `profile-kernels N` command): N calls of the timed case under the
framework's profiler, each kernel's launches and time per call; and, on the
reference side, the work of one call (bytes that must move, FLOPs).

- cpu: the torch ops the model's code ran, each with the time of the ops it
  called (ops that only allocate or re-view memory, and wrappers whose time
  is their children's, are not kernels; ops a kernel calls are part of it);
- cuda: every device kernel, memcpy and memset CUPTI saw, on every stream;
- npu: the torch_npu profiler's op statistics (`child/device.py`).

The profiler is `torch.autograd.profiler.profile` with Kineto, the collector
`torch.profiler.profile` wraps: the wrapper looks up `torch._inductor` when
it starts, which imports the compiler stack (1.5 s per process here).
FLOPs use `torch.utils.flop_counter`'s formulas (matrix products,
convolutions, attention) in a dispatch mode of our own for the same reason:
torch's own `FlopCounterMode` imports `torch._dynamo` on its first call (2-3 s).
Nothing here changes a timing: the worker asks after timing is over.

So that the kernel times can be held against the timed median, the calls
run as the timed calls do (same process, threads and input tensors; each
call's output dropped before the next, as the timing loop drops it: a kept
output changes what the allocator hands the next call, page faults
included), each on its own clock: first N calls without the profiler
(`bare_us`), then N under it, each marked so its ops are told apart. The
profiler's own cost is measured in the same process (the fastest of 500
smallest ops with it on, less the fastest without it, before and after)
and taken out of every kernel once per op recorded inside it. On the CPU the least disturbed profiled call (the
fastest) is reported: on a shared machine a mean of a few calls is one
preempted call away from double.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import defaultdict
from typing import Any, Iterator, Sequence

from sage_engine.evaluation.child import correctness, guards
from sage_engine.evaluation.protocol import KernelTime, SideKernels, Work
from sage_engine.evaluation.protocol.profile import MAX_KERNELS

flop_registry: dict[Any, Any] | None
try:
    # Imported here, where the warm worker imports this module before it forks:
    # the formulas pull in triton when it is installed (0.2 s a process).
    from torch.utils import flop_counter as _formulas

    flop_registry = _formulas.flop_registry
except ImportError:  # a torch without it: FLOPs are not counted
    flop_registry = None

# Ops that do matrix work where torch's formulas are silent: the CPU's
# attention kernels (torch counts only the accelerators' ones), each op
# name with its count from the arguments (`_attention_flops`).
EXTRA_FLOP_OPS = ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_fused_attention_overrideable")
# An op whose name says matrix work: where one ran and nothing was counted, the result says so.
MATRIX_OP_HINT = ("attention", "convolution", "conv_", "mm", "matmul", "linear", "einsum", "gemm", "bilinear")

# Ops that allocate or re-view memory without touching its values: no kernel runs.
NO_DATA_OPS = frozenset(
    {
        "aten::empty",
        "aten::empty_strided",
        "aten::empty_like",
        "aten::resize_",
        "aten::as_strided",
        "aten::view",
        "aten::_reshape_alias",
        "aten::_unsafe_view",
        "aten::reshape",
        "aten::expand",
        "aten::expand_as",
        "aten::t",
        "aten::transpose",
        "aten::permute",
        "aten::unsqueeze",
        "aten::squeeze",
        "aten::select",
        "aten::slice",
        "aten::narrow",
        "aten::detach",
        "aten::alias",
        "aten::lift_fresh",
        "aten::resolve_conj",
        "aten::resolve_neg",
        "aten::unbind",
        "aten::split",
        "aten::chunk",
        "aten::flatten",
        "aten::unflatten",
        "aten::view_as",
        "aten::contiguous",
        "aten::set_",
        "aten::to",
        "aten::numpy_T",
        "aten::result_type",
    }
)
# An op that spends less than this share of its time in itself hands its work
# to the ops it calls (aten::linear -> aten::addmm): those are the kernels.
OWN_WORK_SHARE = 0.5
# The range each profiled call runs in (`record_function`), numbered: it tells
# the calls' ops apart. Not a kernel.
MARKER = "sage::call#"
# Smallest ops timed with and without the profiler: enough that the fastest of
# each is an undisturbed one on a shared machine (about a millisecond). With
# 200, and the profiler-less probe taken before the profiler only, the
# recording cost came out zero in 3 of 500 probes on an idle 2-core machine
# (it is about 1 us); with 1000, or a second probe after it, in none of 500.
PROBE_CALLS = 500


def profile_kernels(side: Any, calls: int) -> dict[str, Any]:
    """The `profile-kernels` reply of either side: its kernels per call, plus
    the call's work on the reference side."""
    import torch

    timed = side.timed_case()
    model, values = timed.model, timed.inputs
    calls = max(1, calls)
    last: list[Any] = [None]  # the last profiled call's outputs: their bytes are part of the work

    def call() -> None:
        last[0] = None  # freed before the call, as the timing loop frees each call's output
        last[0] = model(*values)

    matrix_work = True
    silent: list[str] = []
    if side.device.type == "npu":
        from sage_engine.evaluation.child.device import npu_op_profile

        with torch.no_grad():
            found = npu_op_profile(call, calls)
    else:
        found, names = torch_profile(side, call, calls)
        counted = set(EXTRA_FLOP_OPS) | {getattr(k, "_qualified_op_name", "") for k in flop_registry or ()}
        # No op with a FLOP formula ran: the counting call would count nothing.
        matrix_work = flop_registry is not None and not names.isdisjoint(counted)
        silent = sorted(n for n in names if n not in counted and any(h in n.lower() for h in MATRIX_OP_HINT))
    reply: dict[str, Any] = {"side": vars(found) | {"kernels": [vars(k) for k in found.kernels]}}
    if side.role == "reference":
        reply["work"] = vars(measure_work(side, model, values, last[0], count_flops=matrix_work, silent=silent))
    return reply


def torch_profile(side: Any, call: Any, calls: int) -> tuple[SideKernels, set[str]]:
    """The side's kernels, and the name of every op its calls ran (nested ones too)."""
    import torch
    from torch.autograd import DeviceType
    from torch.autograd import profiler as autograd_profiler

    cuda = side.device.type == "cuda"
    # A torch built without CUPTI cannot record device activity: asked to, it
    # fails (and prints a warning with a stack trace) at every op, about 10 ms
    # each, and records no device kernel anyway.
    device_activity = cuda and torch.profiler.ProfilerActivity.CUDA in torch.profiler.supported_activities()
    with torch.no_grad():
        bare = clocked_calls(side, call, calls, lambda i: contextlib.nullcontext())
        probe_bare = fastest_probe(torch)
    prof = autograd_profiler.profile(use_cpu=True, use_device="cuda" if device_activity else None, use_kineto=True)
    with torch.no_grad():
        with quiet_output():
            prof.__enter__()
        try:
            probe_profiled = fastest_probe(torch)
            walls = clocked_calls(side, call, calls, lambda i: autograd_profiler.record_function(f"{MARKER}{i}"))
        finally:
            with quiet_output():
                prof.__exit__(None, None, None)
        # Without the profiler again: the faster of the two, so a stretch of
        # the machine's load over one probe does not hide the profiler's cost.
        probe_bare = min(probe_bare, fastest_probe(torch))
    events = [e for e in prof.function_events if e.device_type == DeviceType.CPU]
    index = {id(e): call_index(e) for e in events}
    calls_ops = [e for e in events if index[id(e)] is not None]
    names = {e.name for e in calls_ops}
    # What recording one op costs, from the probe: out of each kernel once per op recorded inside it.
    probe_events = sum(1 for e in events if index[id(e)] is None and not e.name.startswith(MARKER))
    per_event_us = max(0.0, probe_profiled - probe_bare) * 1e6 / max(1.0, probe_events / PROBE_CALLS)
    note = ""
    if device_activity:
        # Device kernels carry no host parent to tell their call by: the mean over the calls.
        device = [(e.name, e.time_range.elapsed_us()) for e in prof.function_events if e.device_type == DeviceType.CUDA]
        if device:
            found = summarise("cuda-kernels", device, calls, sum(walls))
            found.wall_us, found.bare_us = min(walls) * 1e6, min(bare) * 1e6
            return found, names
        note = "the profiler saw no device kernel (no CUPTI in this torch?): torch ops on the host instead"
    elif cuda:
        note = "the profiler saw no device kernel (this torch's profiler has no CUPTI): torch ops on the host instead"
    per_call: list[list[tuple[str, float]]] = [[] for _ in range(calls)]
    recorded = [0] * calls
    for e in calls_ops:
        i = index[id(e)]
        if i is None or i >= calls:  # never None: calls_ops holds the events of a call
            continue
        recorded[i] += 1
        if outermost_kernel(e):
            per_call[i].append((e.name, e.cpu_time_total - per_event_us * (1 + descendants(e))))
    # The least disturbed call: on a shared machine a call is slowed by what else
    # runs, never sped up (the calibration keeps the best of its repetitions too).
    best = min(range(calls), key=lambda i: walls[i])
    found = summarise("cpu-ops", per_call[best], 1, walls[best])
    found.calls, found.bare_us, found.note = calls, min(bare) * 1e6, note
    found.overhead_us = (recorded[best] + 1) * per_event_us  # its ops and its marker
    return found, names


def clocked_calls(side: Any, call: Any, calls: int, scope: Any) -> list[float]:
    """Seconds of each call (synchronised), each inside `scope(i)`."""
    walls = []
    for i in range(calls):
        with scope(i):
            start = time.perf_counter()
            call()
            side.sync()
            walls.append(time.perf_counter() - start)
    return walls


def fastest_probe(torch: Any) -> float:
    """Seconds of the fastest of `PROBE_CALLS` smallest ops: with the profiler
    on, less without it, is what recording an op costs."""
    x = torch.zeros(1)
    best = float("inf")
    for _ in range(PROBE_CALLS):
        start = time.perf_counter()
        torch.neg(x)
        best = min(best, time.perf_counter() - start)
    return best


def descendants(event: Any) -> int:
    return sum(1 + descendants(c) for c in event.cpu_children)


def call_index(event: Any) -> int | None:
    """Which profiled call an op ran in: the number of the marker above it."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(MARKER):
            suffix = parent.name[len(MARKER) :]
            return int(suffix) if suffix.isdigit() else None
        parent = parent.cpu_parent
    return None


def is_kernel_op(event: Any) -> bool:
    if event.name in NO_DATA_OPS or event.name.startswith(MARKER):
        return False
    children = [c for c in event.cpu_children if c.name not in NO_DATA_OPS]
    return not children or event.self_cpu_time_total >= OWN_WORK_SHARE * event.cpu_time_total


def outermost_kernel(event: Any) -> bool:
    """A kernel op no other kernel op called: what the model's code launched.
    Ops inside one (a scalar wrapped into a tensor for aten::mul, the bias
    copy inside aten::addmm) are part of it, and its time includes theirs."""
    if not is_kernel_op(event):
        return False
    parent = event.cpu_parent
    while parent is not None:
        if is_kernel_op(parent):
            return False
        parent = parent.cpu_parent
    return True


def summarise(source: str, kernels: list[tuple[str, float]], calls: int, wall_s: float) -> SideKernels:
    """Per call: the costliest kernels by name, and all of them summed."""
    launches: dict[str, int] = defaultdict(int)
    times: dict[str, float] = defaultdict(float)
    for name, us in kernels:
        launches[name] += 1
        times[name] += max(0.0, float(us))
    top = sorted(times, key=lambda n: -times[n])[:MAX_KERNELS]
    return SideKernels(
        source=source,
        calls=calls,
        kernels=[KernelTime(n, launches[n] / calls, times[n] / calls) for n in top],
        launches=len(kernels) / calls,
        kernel_us=sum(times.values()) / calls,
        wall_us=wall_s * 1e6 / calls,
    )


@contextlib.contextmanager
def quiet_output() -> Iterator[None]:
    """Kineto prints a line to stderr when it starts and stops: not the
    candidate's output, so not in its output tail."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(fd) for fd in (1, 2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            os.dup2(null, fd)
        yield
    finally:
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)
        os.close(null)


# ------------------------------------------------------------------ the work


def measure_work(side: Any, model: Any, values: list[Any], out: Any, *, count_flops: bool = True, silent: Sequence[str] = ()) -> Work:
    """Bytes of the distinct input and output tensors of one call (`out`: its
    outputs), and the FLOPs torch's formulas count in one more call, per
    dtype, where an op they count ran. Run on the reference only."""
    import torch

    note, flops = "", {}
    if count_flops and flop_registry is None:
        note = "FLOPs not counted: this torch has no torch.utils.flop_counter"
    elif count_flops and flop_registry is not None:
        counter = flop_counter(flop_registry)
        try:
            with torch.no_grad(), counter:
                model(*values)
            side.sync()
            flops = {k: float(v) for k, v in counter.flops.items() if v}
        except Exception as exc:  # noqa: BLE001 - a reference that cannot run under the counter
            note = f"FLOPs not counted: {type(exc).__name__}: {exc}"
    if not flops and not note and silent:
        note = f"FLOPs not counted: torch has no formula here for {', '.join(silent[:3])}"
    outputs = correctness.as_output_list(out)
    unused = unused_inputs(model, values, outputs)
    if unused:
        note = "; ".join(
            filter(None, [note, f"input(s) {', '.join(map(str, unused))} do not change the output: their bytes are not counted"])
        )
    used = [v for i, v in enumerate(values) if i not in unused]
    tensors = list(flat_tensors(used)) + list(flat_tensors(outputs))
    return Work(bytes=distinct_bytes(tensors), flops=flops, note=note)


def unused_inputs(model: Any, values: list[Any], outputs: list[Any]) -> list[int]:
    """Tensor inputs the output does not depend on: with every value of one
    changed, the output is the same to the bit. A kernel need not read them,
    so their bytes are no floor on its time. Any doubt (a forward that
    raises on the changed values, or whose output changes anyway) counts
    the input as used."""
    import torch

    unused = []
    for i, v in enumerate(values):
        if type(v) is not torch.Tensor or v.numel() == 0 or v.is_sparse:
            continue
        changed = ~v if v.dtype == torch.bool else v + 1
        trial = [changed if j == i else x for j, x in enumerate(values)]
        try:
            with torch.no_grad():
                again = correctness.as_output_list(model(*trial))
        except Exception:  # noqa: BLE001 - values this input may not take: it is used
            continue
        if correctness.same_values(outputs, again):
            unused.append(i)
    return unused


def flat_tensors(values: Any) -> Iterator[Any]:
    import torch

    if isinstance(values, torch.Tensor):
        yield from guards.components(values)
    elif isinstance(values, (list, tuple)):
        for v in values:
            yield from flat_tensors(v)
    elif isinstance(values, dict):
        for v in values.values():
            yield from flat_tensors(v)


def distinct_bytes(tensors: list[Any]) -> int:
    """Each storage counted once, at most its size: an input returned as the
    output, a view of an input, or one tensor passed twice moves its bytes
    once; an expanded (stride-0) tensor holds only its storage."""
    sizes: dict[tuple[str, int], int] = {}
    for t in tensors:
        storage = t.untyped_storage()
        key = (str(t.device), storage.data_ptr())
        sizes[key] = max(sizes.get(key, 0), min(t.numel() * t.element_size(), storage.nbytes()))
    return sum(sizes.values())


def flop_counter(registry: dict[Any, Any]) -> Any:
    """A dispatch mode that sums torch.utils.flop_counter's formulas (`registry`) per dtype."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class FlopCount(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # Nothing is compiled in this process; the default wraps the hook
            # in torch._dynamo.disable, whose import costs seconds.
            return False

        def __init__(self) -> None:
            super().__init__()
            self.flops: dict[str, float] = defaultdict(float)

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            packet = getattr(func, "_overloadpacket", None)
            if packet not in registry and hasattr(func, "decompose"):
                with self:
                    decomposed = func.decompose(*args, **kwargs)
                if decomposed is not NotImplemented:
                    return decomposed
            out = func(*args, **kwargs)
            formula = registry.get(packet)
            first = next((a for a in args if isinstance(a, torch.Tensor)), None)
            dtype = str(first.dtype).replace("torch.", "") if first is not None else "unknown"
            if formula is not None:
                self.flops[dtype] += float(formula(*args, **kwargs, out_val=out))
            elif getattr(packet, "_qualified_op_name", "") in EXTRA_FLOP_OPS:
                self.flops[dtype] += _attention_flops(args)
            return out

    return FlopCount()


def _attention_flops(args: Any) -> float:
    """FLOPs of one attention call from its query, key and value (the first
    three arguments): torch's own formula for the accelerators' kernels."""
    from torch.utils.flop_counter import sdpa_flop_count

    q, k, v = args[0], args[1], args[2]
    return float(sdpa_flop_count(tuple(q.shape), tuple(k.shape), tuple(v.shape)))
