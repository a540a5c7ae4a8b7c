"""What the reference process judged of each trial, and what the worker
reports of one evaluation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from sage_engine.evaluation.protocol.profile import ProfileReport
from sage_engine.evaluation.protocol.request import build


@dataclass
class CaseResult:
    """One correctness trial of one case (or shape variant), as the reference
    process judged it: the same value in every process and in `EvalResult`."""

    case: dict
    trial: int
    ok: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    message: str = ""
    variant: str = ""  # the shape variant this trial ran ("" for a declared case)


@dataclass
class HookReport:
    """What a backend's hook in the candidate process saw (`candidate_hook`):
    the kernel launches it recorded (the ascend-compile gate lowers each),
    the autotune configs it checked per kernel, and the config each trial ran."""

    launches: list[dict[str, Any]] = field(default_factory=list)
    autotune: dict[str, Any] = field(default_factory=dict)
    autotune_trials: list[dict[str, Any]] = field(default_factory=list)

    def merged(self, later: "HookReport | None") -> "HookReport":
        """This report with what a later one says (its non-empty parts win)."""
        if later is None:
            return self
        return HookReport(later.launches or self.launches, later.autotune or self.autotune, later.autotune_trials or self.autotune_trials)


def hook_report(data: Any) -> HookReport:
    return build(HookReport, data)


@dataclass
class VariantRow:
    """What became of one shape variant: `passed`, `failed`, or `dropped`
    (the reference itself could not run it: `reason` says why)."""

    name: str
    status: str
    at: str = ""  # its inputs' shapes, as messages name them
    reason: str = ""


@dataclass
class Judgement:
    """What the reference process saw of the task itself while it judged:
    the shape variants, whether its outputs were compared relative to their
    own scale (`notes`), and why a constant would pass (`constant`)."""

    variants: list[VariantRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    constant: str = ""  # non-empty: the output is the same for every input tried


@dataclass
class TimingStats:
    """One side's timed samples summarised (milliseconds, `timing.stats`):
    the same value in the worker's report and in `EvalResult`."""

    median_ms: float
    iqr_ms: float
    mean_ms: float
    min_ms: float
    reps: int


@dataclass
class TimingReport:
    reference: TimingStats
    candidate: TimingStats
    case: dict
    timer: str
    device_time_us: dict[str, Any] | None = None


@dataclass
class Report:
    """The worker's account of an evaluation that got as far as a decision."""

    status: str
    message: str = ""
    diagnostics: list[dict] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)
    timing: TimingReport | None = None
    mismatch: str | None = None
    device_name: str | None = None
    hook: HookReport | None = None  # what a backend's hook in the candidate process saw
    profile: ProfileReport | None = None  # each side's kernels and the call's work, measured after timing
    judgement: Judgement | None = None

    @classmethod
    def from_dict(cls, data: Any) -> "Report":
        def timing(d: Any) -> TimingReport:
            return build(TimingReport, d, reference=lambda s: build(TimingStats, s), candidate=lambda s: build(TimingStats, s))

        return build(cls, data, timing=timing, profile=ProfileReport.from_dict, judgement=judgement, hook=hook_report)


def judgement(data: Any) -> Judgement:
    return build(Judgement, data, variants=lambda rows: [build(VariantRow, r) for r in rows])


@dataclass
class Outcome:
    """What the worker saw of one evaluation. `report` decides the result
    when it arrived; `runner_result` is a runner routine's answer; without
    either, `killed` or the exit status says what happened."""

    report: Report | None = None
    runner_result: dict[str, Any] | None = None
    exit_code: int | None = None  # of the candidate process; negative: killed by that signal
    # "timeout", "processes", "cancelled"; "sandbox": bubblewrap refused; "worker": the
    # worker was lost where the candidate could have killed it (limits only); "host":
    # it could not start or was lost where the candidate cannot reach it; "scratch": the
    # evaluation failed for want of scratch space (measured on the host).
    killed: str | None = None
    output_tail: str = ""
    output_bytes: int = 0
    wall_s: float = 0.0
    cases: list[CaseResult] = field(default_factory=list)  # every trial judged, whatever ended the evaluation
    forged_lines: int = 0
    retried_after: str | None = None  # the host fault a first try ended in; this outcome is the retry's

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "Outcome":
        return build(cls, data, report=Report.from_dict, cases=lambda rows: [build(CaseResult, r) for r in rows])
