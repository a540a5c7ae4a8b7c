"""The request of one evaluation and the host's operations on a worker."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sage_engine.evaluation.protocol.wire import ProtocolError

# Processes plus threads of one evaluation. torch keeps a few threads per
# process and a C++ build runs ninja, a shell, g++, cc1plus and as; 128 leaves
# room for both. A fork bomb of torch-sized processes needs a few seconds of
# forking to get there on two cores, so a lower cap would not stop it much sooner.
MAX_TASKS = 128
# The file torch's extension builder (FileBaton) holds while it builds. A
# build killed by a timeout or a cancel leaves it, and every later build of
# that candidate would wait on it forever: it is never cached nor staged.
BUILD_LOCKS = frozenset({"lock"})
# What a build leaves that a later build of the same source reuses: ninja's
# own files and torch's extension layout (the sources it writes, objects,
# the module), and a Triton cache's kernels and their metadata. Anything
# else in a build folder was written by the candidate, not the build: no
# later evaluation sees it (`build_product`).
BUILD_NAMES = frozenset({"build.ninja", ".ninja_deps", ".ninja_log", "main.cpp", "cuda.cu", "main.cu"})
BUILD_BINARIES = (".so", ".o")  # must be ELF files: a note named `x.so` is not a build's
BUILD_CACHE_SUFFIXES = (".json", ".ttir", ".ttgir", ".llir", ".ptx", ".cubin", ".hsaco", ".amdgcn", ".source", ".npubin", ".o")
ELF_MAGIC = b"\x7fELF"


def build_product(path: str) -> bool:
    """Whether a file in a build folder is one a build makes (its name, and
    for a binary its first bytes): only those are cached or staged."""
    import os

    name = os.path.basename(path)
    if name in BUILD_LOCKS:
        return False
    if name.endswith(BUILD_BINARIES):
        try:
            with open(path, "rb") as fh:
                return fh.read(4) == ELF_MAGIC
        except OSError:
            return False
    return name in BUILD_NAMES or name.endswith(BUILD_CACHE_SUFFIXES)


# Statuses a candidate process may report of itself: failures, never success
# (`incorrect`: the candidate failed at a shape variant, or an interpreter
# backend's autotune check saw two configs disagree).
CANDIDATE_STATUSES = ("compile_error", "runtime_error", "rejected", "incorrect")


def build(cls: type, data: Any, **nested: Any) -> Any:
    """`cls` from a JSON object: unknown keys are dropped, missing ones take
    their defaults, `nested` converts a field's value first."""
    if not isinstance(data, dict):
        raise ProtocolError(f"{cls.__name__} must be a JSON object, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in data.items() if k in names}
    for key, convert in nested.items():
        if values.get(key) is not None:
            values[key] = convert(values[key])
    try:
        return cls(**values)
    except TypeError as exc:
        raise ProtocolError(f"{cls.__name__}: {exc}") from exc


def plain(value: Any) -> Any:
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value


# ------------------------------------------------------------------ request


@dataclass(frozen=True)
class Limits:
    """Per child process: memory (MB, RLIMIT_DATA), CPU seconds; per evaluation: processes plus threads."""

    memory_mb: int = 0
    cpu_s: int = 0
    max_tasks: int = MAX_TASKS


@dataclass(frozen=True)
class TimingOptions:
    """How the worker times the two sides: the timer's name (`timing.get_timer`) and the sampling plan."""

    timer: str = "perf_counter"
    warmup: int = 3
    min_reps: int = 10
    max_reps: int = 200
    budget_s: float = 2.0
    precision: float = 0.0
    # The timing phase's own wall clock where its times mean nothing for a
    # device (an interpreter): past it timing stops and the result says so;
    # None: the evaluation's deadline.
    wall_s: float | None = None

    @property
    def device_clock(self) -> bool:
        return self.timer != "perf_counter"


@dataclass(frozen=True)
class ProfileOptions:
    """How the worker profiles each side after timing: calls until `budget_s`
    of the side's median has passed, at least one, at most `max_calls`."""

    budget_s: float = 0.05
    max_calls: int = 5

    def calls(self, median_s: float) -> int:
        return max(1, min(self.max_calls, math.ceil(self.budget_s / max(median_s, 1e-9))))


@dataclass(frozen=True)
class BuildSpec:
    """The candidate's own build folder: `cache` on the host under `key`,
    `vars` (variable -> subfolder) pointing into it; `inside` is where the
    evaluation sees it (the sandbox's private copy when confined, else `cache`)."""

    key: str
    cache: str
    vars: dict[str, str] = field(default_factory=dict)
    inside: str = ""


@dataclass(frozen=True)
class Variant:
    """Sizes the candidate was not written for, checked after the declared
    cases: `rows` are alternatives tried in order until one the reference
    runs (none: the variant is dropped and said so); `scale` multiplies the
    task's floating random draws as its builder makes them (edge values)."""

    name: str
    rows: list[dict]
    scale: float | None = None


@dataclass(frozen=True)
class TaskSpec:
    """The part of a task the children need (`Task.spec()`)."""

    id: str
    reference_source: str
    reference_path: str | None
    cases: list[dict]  # at least one row; {} is the module's defaults
    tolerance: dict
    forbid: list[str]
    seed: int
    import_roots: list[str]
    variants: list[Variant] = field(default_factory=list)


@dataclass(frozen=True)
class VerdictOptions:
    """What makes a verdict hard to game (Config's fields of the same names)."""

    # A float output whose largest magnitude is at most this many times the
    # absolute tolerance is compared relative to its own scale.
    small_output_factor: float = 10.0
    # Fresh-input checks while timed, each a pair: new inputs, then the same
    # with a few values changed (a stored answer for them is caught).
    stale_checks: int = 2
    # Values changed per tensor in the second input set of each pair.
    stale_changes: int = 2
    # Pairs of elements swapped in each input before every timed call, so no
    # call sees the values of another.
    churn_swaps: int = 2
    # One call drawn from inside every timed sample, judged by the reference.
    spot_checks: bool = True
    # Rounds of samples after timing, each side on its timed inputs and on
    # input sets it has never seen (new values, new memory, every call); and
    # how far the candidate's ratio of the two may pass the reference's.
    fresh_samples: int = 5
    fresh_bound: float = 2.0


@dataclass(frozen=True)
class Request:
    """One evaluation. `runner` names a child routine ("module:function")
    that runs instead of the reference and candidate sides; `runner_args`
    holds what only it reads. `candidate_hook` ("module:factory") wraps the
    candidate's run; `candidate_hook_args` are its settings."""

    token: str
    task: TaskSpec
    timeout_s: float  # the whole evaluation's wall clock (Config.eval_timeout_s)
    limits: Limits
    candidate_source: str = ""
    trials: int = 3
    tolerance_mode: str = "kernelbench"
    threads: int = 1
    device: str = "cpu"
    timing: TimingOptions | None = None
    env: dict[str, str] = field(default_factory=dict)
    preload: list[str] = field(default_factory=list)
    runner: str | None = None
    runner_args: dict[str, Any] = field(default_factory=dict)
    candidate_hook: str | None = None
    candidate_hook_args: dict[str, Any] = field(default_factory=dict)  # what only the hook reads
    build: BuildSpec | None = None
    device_time: bool = False  # ask each side for profiler device-only time after timing
    inputs_on_device: bool = True  # the reference makes inputs on the device where the task's builder allows
    profile: ProfileOptions | None = None  # profile each side's kernels after timing (never re-timed)
    measures_host: bool = False  # a runner measuring the machine: it runs in the host's timing turn
    seed: int = 0  # this evaluation's: drawn per evaluation, so no candidate can know its inputs
    progress_total: int = 0  # the steps progress counts to: static checks, loading, each case and variant, timing
    verdict: VerdictOptions = field(default_factory=VerdictOptions)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "Request":
        return build(
            cls,
            data,
            task=task_spec,
            timing=lambda d: build(TimingOptions, d),
            limits=lambda d: build(Limits, d),
            build=lambda d: build(BuildSpec, d),
            profile=lambda d: build(ProfileOptions, d),
            verdict=lambda d: build(VerdictOptions, d),
        )


def task_spec(data: Any) -> TaskSpec:
    return build(TaskSpec, data, variants=lambda rows: [build(Variant, v) for v in rows])


# ---------------------------------------------------------------------- ops


@dataclass(frozen=True)
class Op:
    """The host's operations on a worker: one JSON line each on its stdin."""

    EVAL: ClassVar[str] = "eval"
    CANCEL: ClassVar[str] = "cancel"
    TIMING_GO: ClassVar[str] = "timing-go"  # the host's timing turn is this evaluation's now
    PAUSE: ClassVar[str] = "pause"  # another evaluation of this host is timed: stand still
    RESUME: ClassVar[str] = "resume"
    QUIT: ClassVar[str] = "quit"

    op: str
    request: Request | None = None

    def line(self) -> bytes:
        data: dict[str, Any] = {"op": self.op}
        if self.request is not None:
            data["request"] = self.request.to_dict()
        return (json.dumps(data) + "\n").encode()

    @classmethod
    def parse(cls, line: bytes) -> "Op | None":
        """The op on `line`, or None for a line that is not one."""
        try:
            data = json.loads(line)
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("op"), str):
            return None
        request = Request.from_dict(data["request"]) if data["op"] == cls.EVAL else None
        return cls(data["op"], request)
