"""What the reference process judged of each trial, and what the worker
reports of one evaluation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from sage_engine.evaluation.protocol.profile import ProfileReport
from sage_engine.evaluation.protocol.request import build


@dataclass
class CaseRow:
    """One correctness trial of one case, as the reference process judged it."""

    case: dict
    trial: int | str
    ok: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    message: str = ""
    variant: str = ""  # the shape variant this trial ran ("" for a declared case)


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
class TimingStatsReport:
    """Samples summarised (milliseconds): `timing.stats`."""

    median_ms: float
    iqr_ms: float
    mean_ms: float
    min_ms: float
    reps: int


@dataclass
class TimingReport:
    reference: TimingStatsReport
    candidate: TimingStatsReport
    case: dict
    timer: str
    device_time_us: dict[str, Any] | None = None


@dataclass
class Report:
    """The worker's account of an evaluation that got as far as a decision."""

    status: str
    message: str = ""
    diagnostics: list[dict] = field(default_factory=list)
    cases: list[CaseRow] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)
    timing: TimingReport | None = None
    mismatch: str | None = None
    device_name: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)  # a backend hook's report (the Ascend gate's launches)
    profile: ProfileReport | None = None  # each side's kernels and the call's work, measured after timing
    judgement: Judgement | None = None

    @classmethod
    def from_dict(cls, data: Any) -> "Report":
        def timing(d: Any) -> TimingReport:
            return build(TimingReport, d, reference=lambda s: build(TimingStatsReport, s),
                         candidate=lambda s: build(TimingStatsReport, s))

        return build(cls, data, cases=lambda rows: [build(CaseRow, r) for r in rows], timing=timing,
                     profile=ProfileReport.from_dict, judgement=judgement)


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
    killed: str | None = None  # "timeout", "processes", "worker", "cancelled", "sandbox"
    output_tail: str = ""
    output_bytes: int = 0
    wall_s: float = 0.0
    cases: list[CaseRow] = field(default_factory=list)  # kept for a partial result
    forged_lines: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "Outcome":
        return build(cls, data, report=Report.from_dict, cases=lambda rows: [build(CaseRow, r) for r in rows])
