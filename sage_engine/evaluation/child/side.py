"""What the two children of one evaluation share: their limits and
environment (`prepare`), their channels, events and failures, and `Side`,
the task's module, seeded inputs and the timing commands both answer.

Only the standard library, torch and the sibling pure modules are imported
here, so a backend may run this under another interpreter (its own venv).
"""

from __future__ import annotations

import faulthandler
import functools
import gc
import importlib
import os
import platform
import random
import resource
import secrets
import signal
import sys
import time
import types
from dataclasses import dataclass
from typing import Any, Callable

from sage_engine.evaluation.common import diagnostics, timing
from sage_engine.evaluation.protocol import wire
from sage_engine.evaluation.child import changes, correctness, guards
from sage_engine.evaluation.child.numerics import Numerics
from sage_engine.evaluation.child.spot import SpotCall
from sage_engine.evaluation.common.processes import scrub_environ
from sage_engine.evaluation.protocol import Event, Fail, ProgressEvent, Request, event_line

RLIMIT_FSIZE_BYTES = 4 << 30  # no candidate needs to write a 4 GiB file; a runaway one would fill the disk
PR_SET_DUMPABLE = 4


@dataclass(frozen=True)
class Channels:
    """The fds a child talks on (all others are closed after the fork)."""

    cmd: int  # worker -> child: command lines
    rep: int  # child -> worker: one reply line per command
    evt: int  # child -> worker: token-carrying events
    data: int  # candidate -> reference: output frames (write end in the candidate, read end in the reference)
    inputs: int  # reference -> candidate: input headers (write end in the reference, read end in the candidate)
    shared: int  # the shared memory file the inputs live in (both children, read and write)

    def fds(self) -> tuple[int, ...]:
        return (self.cmd, self.rep, self.evt, self.data, self.inputs, self.shared)


class Emitter:
    """Writes events. Only the process that started the evaluation may
    write: a candidate that forks must not report twice."""

    def __init__(self, fd: int, token: str):
        self.fd, self.token, self.pid = fd, token, os.getpid()

    def send(self, event: Event) -> None:
        if os.getpid() != self.pid:
            os._exit(0)
        wire.write_all(self.fd, event_line(event, self.token))

    def progress(self, done: float, total: float | None, message: str) -> None:
        self.send(ProgressEvent(done, total, message))


def input_bytes(torch: Any, values: list[Any]) -> int:
    """Bytes the inputs hold (a sparse tensor's stored parts, not the dense size it describes)."""
    return sum(c.numel() * c.element_size() for v in values if isinstance(v, torch.Tensor) for c in guards.components(v))


class Failure(Exception):
    """Ends an evaluation with a status (raised by either side's helpers)."""

    def __init__(self, status: str, message: str, diags: list[dict[str, Any]] | None = None, *, variant: str = "", at: str = ""):
        super().__init__(message)
        self.status, self.message, self.diags = status, message, diags or []
        self.variant, self.at = variant, at  # the shape variant it happened at, and its shapes

    def event(self) -> Fail:
        return Fail(status=self.status, message=self.message, diagnostics=self.diags, variant=self.variant, at=self.at)


def not_dumpable() -> None:
    """Same-uid processes (the candidate) may then neither ptrace this
    process nor read its memory or fds through /proc."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def prepare(request: Request, workdir: str) -> None:
    """Limits, environment and torch settings, before anything of the task runs."""
    # A crash prints the Python stack (with candidate.py lines) to stderr; the
    # worker sends SIGUSR1 before killing a child that ran out of time.
    faulthandler.enable(file=sys.stderr, all_threads=False)
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=False)
    limits = request.limits
    if limits.memory_mb:
        # Memory used (private writable mappings), not address space reserved:
        # the CUDA and CANN runtimes reserve terabytes of it, never touched, at start-up.
        resource.setrlimit(resource.RLIMIT_DATA, (limits.memory_mb << 20, limits.memory_mb << 20))
    if limits.cpu_s:
        # Soft limit sends SIGXCPU (reported as a timeout), hard limit kills.
        resource.setrlimit(resource.RLIMIT_CPU, (int(limits.cpu_s), int(limits.cpu_s) + 5))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (RLIMIT_FSIZE_BYTES, RLIMIT_FSIZE_BYTES))
    os.chdir(workdir)
    scrub_environ(os.environ)
    os.environ.update(request.env)
    os.environ.update(HOME=workdir, TMPDIR=workdir)
    sys.path[:] = [p for p in sys.path if p not in ("", ".", workdir)]
    import torch

    torch.set_num_threads(request.threads)
    for module in request.preload:
        importlib.import_module(module)


def resolve(spec: str) -> Callable[..., Any]:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """Package versions (the worker reads them once; its children inherit the answer)."""
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for dist in ("torch", "triton", "torch_npu", "triton-ascend"):
        try:
            out[dist.replace("-", "_")] = md.version(dist)
        except md.PackageNotFoundError:
            continue
    return out


def _count_and_seed(arg: str) -> tuple[int, int]:
    """`N SEED` of a `warm` or `rep` command (a seed drawn here where none came)."""
    words = arg.split()
    return int(words[0]), int(words[1]) if len(words) > 1 else secrets.randbits(62)


@dataclass
class Timed:
    """The case both sides time: the one whose inputs hold the most bytes."""

    index: int
    bytes: int
    module: types.ModuleType
    model: Any
    inputs: list[Any]  # the harness's own
    aliases: list[Any] | None = None  # what the candidate's timed calls get (`candidate.give`)
    identities: list[Any] | None = None  # the aliases' identities when made


class TaskSide:
    """The task's reference module per case and its seeded inputs on this
    process's device: what every process that runs the task needs, the
    Nsight Compute run (`ncu.py`, no pipes) included."""

    def __init__(self, request: Request):
        import torch

        self.torch = torch
        self.req = request
        self.task = request.task
        self.device = torch.device(request.device)

    # -- the task's module

    def load_reference(self, case: dict[str, Any]) -> types.ModuleType:
        name = f"_sage_ref_{secrets.token_hex(6)}"
        module = types.ModuleType(name)
        code = compile(self.task.reference_source, self.task.reference_path or "<reference>", "exec")
        sys.modules[name] = module  # dataclasses and pickling look modules up by name
        try:
            exec(code, module.__dict__)
        except BaseException as exc:
            raise Failure(
                "task_error",
                f"the task's reference failed to load: {diagnostics.exception_text(exc)}; the task is at fault, not the candidate",
                [diagnostics.diagnostic("reference", diagnostics.exception_text(exc))],
            )
        for key, value in case.items():
            value = self.case_value(value)
            if isinstance(module.__dict__.get(key), tuple) and isinstance(value, list):
                value = tuple(value)  # a shape constant a variant set: JSON brings it as a list
            module.__dict__[key] = value
        return module

    def case_value(self, value: Any) -> Any:
        if isinstance(value, str) and value in wire.DTYPES and hasattr(self.torch, value):
            return getattr(self.torch, value)
        return value

    def task_call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call the task's own code (get_inputs, get_init_inputs)."""
        try:
            with self.torch.no_grad():
                return fn(*args)
        except BaseException as exc:
            raise self.reference_failure(f"the reference's {what} failed", exc)

    def reference_failure(self, what: str, exc: BaseException) -> Failure:
        text = diagnostics.exception_text(exc)
        if diagnostics.out_of_memory(exc) == "host":
            text += diagnostics.memory_cap_note(self.req.limits.memory_mb)
        # The task's own code failed: its fault, not the candidate's (from the
        # candidate's process the worker reports it as the candidate's failure).
        return Failure(
            "task_error",
            f"{what}: {text}; the task is at fault, not the candidate (it cannot run here as written)",
            [diagnostics.diagnostic("reference", text)],
        )

    def reseed(self, seed: int) -> None:
        """Seed what this side draws from. On the CPU only the CPU generator:
        torch.manual_seed also queues a seed for every accelerator runtime not
        yet started, capturing a Python stack for each (milliseconds a call)."""
        if self.device.type == "cpu":
            self.torch.random.default_generator.manual_seed(seed)
        else:
            self.torch.manual_seed(seed)
        # The benchmarks' own builders also draw from numpy and random: both
        # processes must make the same values.
        random.seed(seed)
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed(seed % (1 << 32))

    def host_inputs(self, module: types.ModuleType, seed: int) -> list[Any]:
        """The task's seeded inputs, where get_inputs() made them."""
        self.reseed(seed)
        return list(self.task_call("get_inputs()", module.get_inputs))

    def on_device(self, values: list[Any]) -> list[Any]:
        return [v.to(self.device) if isinstance(v, self.torch.Tensor) else v for v in values]

    def inputs(self, module: types.ModuleType, seed: int) -> list[Any]:
        return self.on_device(self.host_inputs(module, seed))


class Side(TaskSide):
    """One side of an evaluation: the task's module and inputs, device
    moves, and the timing commands both sides answer."""

    role = "side"

    def __init__(self, request: Request, emit: Emitter, channels: Channels):
        super().__init__(request)
        self.emit, self.ch = emit, channels
        self.trials = max(1, request.trials)
        # Made now, before any candidate code runs in this process: a candidate
        # that later replaces the clock or the device's event functions does not reach them.
        self.timer = timing.get_timer(request.timing.timer) if request.timing else None
        self.timed: Timed | None = None
        self.last_first: Any = None  # the first output of the last timed batch
        self.call_s = 0.0
        self.slowest = 0.0  # the longest single call: bounds how long a timed call may take
        self.keep_first = False  # copy the next batch's first output (the fresh-input check reads it)
        self.churn: Any = None  # changes the timed inputs before each timed call (`changes.Churn`)
        self.churn_s = 0.0  # host seconds the last batch's changes took
        self.spot = SpotCall(self.torch)  # the last batch's outputs, for the worker's `spot` check
        self.numerics = Numerics(self.torch)  # the switches as they were before any candidate code ran here

    def forward(self, model: Any, values: list[Any]) -> Any:
        start = time.perf_counter()
        try:
            out = model(*values)
            self.sync()
            return out
        finally:
            took = time.perf_counter() - start
            self.call_s += took
            self.slowest = max(self.slowest, took)

    def clone(self, values: list[Any]) -> list[Any]:
        return [v.clone() if isinstance(v, self.torch.Tensor) else v for v in values]

    def sync(self) -> None:
        if self.device.type != "cpu":
            # Every stream of the device, not just the current one: work a
            # kernel left on a side stream is part of its time.
            getattr(self.torch, self.device.type).synchronize()

    def keep_largest(self, index: int, module: types.ModuleType, model: Any, values: list[Any]) -> None:
        size = input_bytes(self.torch, values)
        if self.timed is None or size > self.timed.bytes:
            self.timed = Timed(index, size, module, model, values)

    def timed_case(self) -> Timed:
        if self.timed is None:
            raise wire.ProtocolError("a timing command before the correctness checks chose a case")
        return self.timed

    # -- timing commands

    def timed_batch(self, n: int, seed: int) -> float:
        """Seconds per call of `n` calls on the timed case by this side's timer (the worker checks it
        against its own clock); the swaps between calls follow from the worker's `seed` (`changes.Churn`)."""
        timed = self.timed_case()
        if self.timer is None:
            raise wire.ProtocolError("a timing command in an evaluation that is not timed")
        self.numerics.reset()
        model, values = timed.model, timed.inputs if timed.aliases is None else timed.aliases
        keep, self.keep_first = self.keep_first, False
        if self.churn is None:
            self.churn = changes.Churn(self.torch, timed.inputs, self.req.verdict.churn_swaps)
        churn, clock, spot, start = self.churn, timing.host_clock, self.spot, timing.host_clock()
        if churn.active:  # held, the first call runs on the inputs as the reference sent them (the fresh-input check's)
            churn.plan(seed, n, hold=keep)
        self.churn_s = clock() - start
        spot.begin(n)
        last: list[Any] = [None]  # the output of the call just made, until it is kept

        def before(i: int) -> None:
            start = clock()
            if i:  # the call before, copied as it returned (before this call's swaps), then freed
                spot.keep(i - 1, last[0])
                last[0] = None
            churn(i)
            self.churn_s += clock() - start

        def call(i: int) -> None:
            out = model(*values)
            last[0] = out
            if i == 0:
                # A forward that updates its inputs in place may return them: the calls
                # that follow would change the output the fresh-input check reads.
                self.last_first = (
                    [v.clone() if isinstance(v, self.torch.Tensor) else v for v in correctness.as_output_list(out)] if keep else out
                )

        with self.torch.no_grad():
            seconds = self.timer(call, n, before if churn.active else None)
        self.sync()
        if churn.active:  # with nothing to swap the calls run on one input set: nothing to draw from
            start = clock()
            spot.keep(n - 1, last.pop())  # a copy as the others, in the host time between calls the worker allows for
            self.churn_s += clock() - start
        return seconds

    def command(self, verb: str, arg: str) -> str:
        """One timing command; returns the reply line (without newline)."""
        if verb.startswith("remeasure-") or arg.endswith((" remeasure", " remeasure-churned")):
            from sage_engine.evaluation.child.remeasure import handler

            return handler(self, Failure).command(verb, arg)
        if verb == "nop":
            return "ok"
        if verb == "warm":
            # Warm-up calls, one by one; the fastest tells the worker how many calls make a sample.
            count, seed = _count_and_seed(arg)
            fastest = min(self.timed_batch(1, seed + j) for j in range(max(1, count)))
            return f"ok {fastest!r}"
        if verb == "rep":
            n, seed = _count_and_seed(arg)
            seconds = self.timed_batch(n, seed)
            # The host time the inputs' changes took between calls (outside the
            # timed intervals, inside the worker's clock), and, once a call left
            # device work on another stream, that.
            reply = f"ok {seconds!r} churn {self.churn_s / n!r}"
            if self.numerics.found:
                reply += " reset " + ",".join(sorted(self.numerics.found))
            return reply + (" all-streams" if getattr(self.timer, "all_streams", False) else "")
        if verb == "profile":
            return f"ok {self.profile()!r}"
        if verb == "profile-kernels":
            from sage_engine.evaluation.child.profiling import profile_kernels

            return "ok " + wire.json_text(profile_kernels(self, int(arg)))
        raise wire.ProtocolError(f"unknown command {verb!r}")

    def profile(self) -> float | None:
        from sage_engine.evaluation.child.device import npu_profile_us

        timed = self.timed_case()
        with self.torch.no_grad():
            return npu_profile_us(lambda: self.forward(timed.model, timed.inputs))

    def serve(self) -> None:
        """Answer commands until `quit` (or the worker goes away)."""
        gc.collect()
        # A collection in the middle of a timed call would be charged to it.
        gc.disable()
        cmd = os.fdopen(self.ch.cmd, "rb", buffering=0)
        pending = bytearray()
        while True:
            nl = pending.find(b"\n")
            while nl < 0:
                data = os.read(cmd.fileno(), 4096)
                if not data:
                    return
                pending += data
                nl = pending.find(b"\n")
            line = bytes(pending[:nl]).decode(errors="replace")
            del pending[: nl + 1]
            verb, _, arg = line.partition(" ")
            if verb == "quit":
                return
            try:
                reply = self.command(verb, arg)
            except Failure as failure:
                reply = "err " + wire.json_text(failure.event().to_dict())
            except BaseException as exc:  # noqa: BLE001 - the worker turns it into a result
                text = diagnostics.exception_text(exc)
                reply = "err " + wire.json_text(
                    Fail(
                        status="runtime_error",
                        message=f"the {self.role} failed while timing: {text}",
                        diagnostics=[diagnostics.diagnostic("harness", text)],
                    ).to_dict()
                )
            wire.write_all(self.ch.rep, (reply + "\n").encode())
