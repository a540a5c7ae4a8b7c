"""What a backend adds to a result beyond the common fields: `EvalResult.compile_info`.

Each part is what one writer reports, and `CompileInfo` is all of them on one
flat object (its JSON keys are the parts' fields side by side, as clients and
stored attempts have them):

- `HarnessInfo`, every backend: the case timed, the timer, the checks the
  worker ran while judging and timing;
- `DeviceInfo`, the device backends (`npu`): the profiler's device time;
- `InterpreterInfo`, the interpreter backends (`triton`, `ascend-compile`):
  the Triton that ran, the autotune configs checked;
- `FrontEndInfo`, `ascend-compile`: the chip, the front end's verdict, each
  kernel launch lowered.

A field is on the wire only when its writer gave it (as a key in a dict
was), so a result reads the same as before this was typed. The worker's own
records (`checks`, a kernel launch) keep keys a newer or older worker wrote:
they are facts it adds as it learns to check more, and a stored attempt
must load whatever its SAGE wrote.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer


class _Given(BaseModel):
    """Serialises only the fields its writer set (and kept extra keys): a
    field left out is a key that was never there, not a null."""

    model_config = ConfigDict(extra="forbid")

    # No return annotation: without one pydantic describes the fields in the
    # output schema (MCP's outputSchema); an annotation would stand in for them.
    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler):
        data = handler(self)
        given = self.model_fields_set | set(self.model_extra or ())
        return {k: v for k, v in data.items() if k in given}


class _Record(_Given):
    """A record the worker or a child writes, whose keys grow as it checks more."""

    model_config = ConfigDict(extra="allow")


# ------------------------------------------------------------------ every backend


class InputsCrossing(_Record):
    """How the reference's inputs reached the candidate process."""

    via: str | None = Field(None, description="shared memory or cuda ipc")
    shared_bytes: int | None = None
    pipe_bytes: int | None = None
    on_device: bool | None = None


class FreshInputs(_Record):
    """The re-measurement of the credited speedup on inputs the candidate had
    never seen (`worker/remeasure.py`)."""

    rounds: int | None = None
    calls: int | None = None
    candidate_ms: dict[str, float] | None = Field(None, description="Median per kind: churned, fresh")
    reference_ms: dict[str, float] | None = None
    ratio: float | None = Field(None, description="Candidate's fresh/churned over the reference's, by their own clocks")
    credited: float | None = Field(None, description="What the speedup was divided by (1.0 within noise)")
    by_own_clock: dict[str, float] | None = None
    by_worker_clock: dict[str, float] | None = None
    bound: float | None = None
    judged: int | None = None
    judged_skipped: int | None = None


class CpuBound(_Record):
    """On one CPU, the speedup by the processes' timers against the speedup by
    their CPU times (`worker/timed.py`, `claims_past_cpu`)."""

    by_timer: float | None = None
    by_cpu: float | None = None
    credited: float | None = Field(None, description="What the speedup was divided by (1.0 within the bound)")


class Checks(_Record):
    """What the worker checked while judging and timing."""

    threads: list[int] | None = Field(None, description="The candidate process's threads before it loaded and after its trials")
    inputs: InputsCrossing | None = None
    cpus: list[int] | None = Field(None, description="The CPUs both sides were timed on")
    cpu_us: dict[str, float] | None = Field(None, description="Per side, on one CPU: the median call by its process's CPU time")
    churn_cpu_us: float | None = Field(None, description="The inputs' changes a call, as CPU (the reference's measure)")
    inner_calls: dict[str, int] | None = Field(None, description="Calls per timed sample, per side")
    idle_cpu_ms: float | None = None
    clock_gap_us: dict[str, float] | None = Field(None, description="Per side: the worker's clock over the side's own, per batch")
    cpu_gap_us: dict[str, float] | None = None
    # A count; a bool in results stored before the checks were counted.
    fresh_inputs_checked: int | bool | None = None
    stale_checks: int | None = None
    stale_inconclusive: int | None = None
    spot_checks: int | None = None
    spot_skipped: int | None = None
    churn_us: float | None = None
    numerics_reset: list[str] | None = Field(
        None, description="Process-wide numerics switches the candidate changed, reset before each batch"
    )
    fresh_inputs: FreshInputs | None = None
    cpu_bound: CpuBound | None = None
    other_streams: list[str] | None = Field(None, description="Device streams the candidate left work on after a call ended")


class HarnessInfo(_Given):
    timed_case: dict[str, Any] | None = Field(None, description="The case row timed (the largest)")
    timer: str | None = Field(None, description="The timer both sides used (module:function)")
    checks: Checks | None = None


# ------------------------------------------------------------------ device backends


class DeviceTime(_Record):
    """The profiler's device-only time per call (µs), or why it is missing."""

    reference: float | None = None
    candidate: float | None = None
    error: str | None = None


class DeviceInfo(_Given):
    device_time_us: DeviceTime | None = None


# ------------------------------------------------------------------ interpreter backends


class InterpreterVersions(_Given):
    triton: str | None = Field(None, description="The Triton the interpreter ran (None: not installed)")
    hosts: str | None = Field(None, description="The Triton the team's hosts run (`Config.triton_version`)")
    note: str | None = None


class AutotuneChecked(_Record):
    configs: int | None = Field(None, description="How many configs the kernel has")
    checked: list[str] | None = Field(None, description="The configs checked (`BLOCK=256, num_warps=4`)")


class InterpreterInfo(_Given):
    interpreter: InterpreterVersions | None = None
    autotune: dict[str, AutotuneChecked] | None = Field(None, description="Per autotuned kernel, the configs checked")


# ------------------------------------------------------------------ ascend-compile

FrontEnd = Literal["passed", "failed", "not_run", "crashed"]


class KernelLaunch(_Record):
    """One kernel launch the Ascend front end lowered, and its verdict (with
    the front end's own details, `required_bits`, ... as extra keys)."""

    kernel: str | None = None
    grid: list[int] | None = None
    signature: dict[str, str] | None = None
    constants: dict[str, Any] | None = None
    specialization: dict[str, Any] | None = None
    launches: int | None = None
    options: dict[str, Any] | None = None
    config: str | None = Field(None, description="The autotune config of this launch")
    front_end: str | None = Field(None, description="passed, or the category it failed with")


class FrontEndInfo(_Given):
    chip: str | None = None
    front_end: FrontEnd | None = None
    note: str | None = None
    category: str | None = Field(None, description="The first failing kernel's category (`ub_overflow`...)")
    tags: list[str] | None = Field(None, description="[category, chip]: the tags a lesson from this failure carries")
    kernels: list[KernelLaunch] | None = None


# Bases last to first: the JSON keys come in the order of the parts above.
class CompileInfo(FrontEndInfo, InterpreterInfo, DeviceInfo, HarnessInfo):
    """Every backend's part of a result, on one flat object."""
