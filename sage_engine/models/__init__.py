"""Pydantic models shared by every surface (MCP, LSP, CLI, agent).

These are the values that cross the Engine boundary. They carry no behaviour
beyond validation; the math lives in `memory/` and `evaluation/`. The
profile of an evaluation (where its time goes) and the machine's measured
limits live in `profile.py`, what each backend adds to a result in
`compile_info.py`; they are named here too.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sage_engine.evaluation.protocol.reports import CaseResult, TimingStats
from sage_engine.models.base import ProgressCallback, _Model
from sage_engine.models.compile_info import (
    AutotuneChecked,
    Checks,
    CompileInfo,
    DeviceInfo,
    DeviceTime,
    FreshInputs,
    FrontEndInfo,
    HarnessInfo,
    InputsCrossing,
    InterpreterInfo,
    InterpreterVersions,
    KernelLaunch,
)
from sage_engine.models.profile import BandwidthPoint, KernelTime, MachineLimits, Profile, SideProfile

ItemKind = Literal["experience", "rule"]
# active: retrievable; resident: a rule in the rulebook; quarantined: kept but
# never shown; merged: folded into another item (dedup or consolidation);
# deleted: soft-deleted, kept for the audit trail.
ItemStatus = Literal["active", "resident", "quarantined", "merged", "deleted"]
# task_error: the task's own reference failed (its fault, not the candidate's);
# sandbox_error: the sandbox could not start (the host's configuration); host_error: a part of
# the host failed under the evaluation (worker lost or unable to start, scratch full, a Ray host
# lost). None of them is evidence about a kernel.
EvalStatus = Literal[
    "correct",
    "incorrect",
    "compile_error",
    "runtime_error",
    "timeout",
    "crashed",
    "rejected",
    "sandbox_error",
    "task_error",
    "host_error",
    # Still being evaluated: the answer of a call that stopped waiting (attempt_id says what to poll).
    "running",
]


# --------------------------------------------------------------------------- items


class NewItem(_Model):
    """An experience or rule to store. Text limits are enforced by the store
    (they live in Config) so the message can name the limit."""

    title: str
    content: str
    code: str | None = None
    kind: ItemKind = "experience"
    scope: str = Field("team", description="'team' (everyone on this memory), 'private' (only you) or 'project:NAME'")
    operator: str | None = None
    family: str | None = None
    backend: str | None = None
    hardware: str | None = None
    tags: list[str] = Field(default_factory=list)
    source_episode: int | None = None
    source_attempt: int | None = None
    derived_from: list[int] = Field(default_factory=list)
    utility: float = 0.0


class Item(_Model):
    id: int
    kind: ItemKind
    status: ItemStatus
    status_reason: str | None = None
    title: str
    content: str
    code: str | None = None
    scope: str
    operator: str | None = None
    family: str | None = None
    backend: str | None = None
    hardware: str | None = None
    tags: list[str] = Field(default_factory=list)
    utility: float
    n_retrieved: int
    n_adopted: int
    n_credited: int
    adoption_rate: float = Field(description="EMA of adopted-when-shown (p in UGC)")
    support: int = Field(1, description="How many times this lesson was recorded (near-duplicates strengthen it)")
    operators_adopted: list[str] = Field(default_factory=list)
    families_adopted: list[str] = Field(default_factory=list)
    source_episode: int | None = None
    source_attempt: int | None = None
    derived_from: list[int] = Field(default_factory=list)
    tokens: int
    created_at: float
    updated_at: float
    author: str | None = Field(None, description="Who recorded it (HTTP token name or OS user)")
    # A rule's scope, kept as data: where it was learned and what triggers it.
    rule_families: list[str] = Field(default_factory=list)
    rule_operators: list[str] = Field(default_factory=list)
    rule_backends: list[str] = Field(default_factory=list)
    rule_hardware: list[str] = Field(default_factory=list)
    rule_triggers: list[str] = Field(default_factory=list)
    authors: list[str] = Field(default_factory=list, description="A rule's: the authors of the items it was made from")
    adopted_by: list[str] = Field(default_factory=list, description="Who adopted it in a credited episode")
    merged_into: int | None = Field(None, description="The rule this item was merged into")


class ScoredItem(_Model):
    """An item as retrieval showed it: the score parts are kept so a user can
    see why it ranked where it did."""

    id: int
    kind: ItemKind
    title: str
    content: str
    code: str | None = None
    tags: list[str] = Field(default_factory=list)
    utility: float
    n_adopted: int
    adoption_rate: float
    similarity: float
    exploration: float
    score: float
    rank: int
    author: str | None = Field(None, description="Who wrote it; a rule names its source items' authors in `authors`")
    authors: list[str] = Field(default_factory=list)
    clipped: bool = Field(False, description="Its text was cut to its share of the retrieval's tokens: show_item has it whole")


class AddResult(_Model):
    item: Item
    merged: bool = Field(description="True when a near-duplicate was strengthened instead of adding a copy")
    similarity: float | None = None


class MemoryStats(_Model):
    db_path: str = Field(description="Where the memory lives: a file path or a PostgreSQL URL (no password)")
    store: Literal["sqlite", "postgres"] = "sqlite"
    items_by_kind: dict[str, int]
    items_by_status: dict[str, int]
    resident_rules: int
    resident_tokens: int
    episodes_open: int
    episodes_closed: int
    episodes_without_evidence: int = Field(0, description="Closed episodes that had no attempt: closed without credit, utilities untouched")
    attempts: int
    adoptions: int
    utility_updates: int
    consolidations: int
    mean_utility: float | None
    by_author: dict[str, dict[str, int]] = Field(default_factory=dict, description="Items, episodes and adoptions each author recorded")


class ImportReport(_Model):
    items: int = 0
    episodes: int = 0
    attempts: int = 0
    rows: dict[str, int] = Field(default_factory=dict)
    skipped: int = 0


# ------------------------------------------------------------------------ episodes


class RetrievalResult(_Model):
    episode_id: int
    resident_rules: list[ScoredItem]
    items: list[ScoredItem]
    filtered_out: dict[str, int] = Field(default_factory=dict, description="How many candidates each filter removed, by reason")
    tokens: int = Field(description="Approximate tokens of everything returned")


class Adoption(_Model):
    id: int
    evidence: str = ""
    weight: float = Field(default=1.0, gt=0.0, le=1.0)


class Lesson(_Model):
    """What the agent learned; becomes (or strengthens) an experience item."""

    title: str
    content: str
    code: str | None = None
    tags: list[str] = Field(default_factory=list)
    scope: str | None = None


class UtilityUpdate(_Model):
    item_id: int
    episode_id: int | None = None
    strategy: str | None = None
    adopted: bool
    before: float
    after: float
    target: float
    eta: float


# Why an episode closed: record_adoption (or Engine.close_episode), the same
# client retrieving for the same task again, or episode_idle_s untouched.
CloseReason = Literal["explicit", "next_retrieval", "idle"]


class AdoptionReport(_Model):
    episode_id: int
    reward: float | None = Field(None, description="Episode reward; None while the episode stays open, or when it closed without evidence")
    reward_parts: dict[str, float] = Field(default_factory=dict)
    updates: list[UtilityUpdate] = Field(default_factory=list)
    new_item: Item | None = None
    lesson_merged: bool = False
    closed: bool
    credited: bool = Field(False, description="Whether closing credited the shown items: only an episode with an attempt is credited")
    close_reason: CloseReason | None = None
    consolidation: "ConsolidationReport | None" = None


class AttemptSummary(_Model):
    id: int
    status: EvalStatus
    speedup: float | None = None
    speedup_trusted: bool | None = Field(None, description="False: unverified, not credited")
    candidate_ms: float | None = None
    candidate_hash: str
    adopted_ids: list[int] = Field(default_factory=list)
    created_at: float


class EpisodeSummary(_Model):
    id: int
    task: str
    operator: str | None = None
    family: str | None = None
    backend: str | None = None
    client: str | None = None
    author: str | None = None
    status: Literal["open", "closed"]
    reward: float | None = Field(None, description="None while open, or when it closed without evidence")
    attempts: int
    created_at: float
    closed_at: float | None = None
    close_reason: CloseReason | None = Field(None, description="Why it closed (None while open, or closed before SAGE recorded it)")
    credited: bool | None = Field(None, description="Whether closing credited it; None while open")


class EpisodeDetail(EpisodeSummary):
    shown: list[ScoredItem] = Field(default_factory=list)
    adopted: list[Adoption] = Field(default_factory=list)
    attempt_list: list[AttemptSummary] = Field(default_factory=list)
    updates: list[UtilityUpdate] = Field(default_factory=list)
    cut: dict[str, int] = Field(
        default_factory=dict, description="Entries of each list a reply left out to stay under the client's size cap (oldest first)"
    )


# ------------------------------------------------------------------- consolidation


class RuleDraft(_Model):
    """The fixed rule template. `evidence` lists the item ids it abstracts."""

    title: str
    trigger: str = Field(description="When the rule applies: operators, shapes, backend, chip")
    rule: str
    rationale: str
    when_not: str = Field(description="When not to apply it")
    evidence: list[int]


class ConsolidationReport(_Model):
    consolidation_id: int | None = Field(None, description="None for a dry run")
    dry_run: bool
    eligible: list[int] = Field(default_factory=list)
    promoted: list[int] = Field(default_factory=list, description="Rules that entered the rulebook")
    demoted: list[int] = Field(default_factory=list, description="Rules sent back to the pool")
    merged: list[list[int]] = Field(default_factory=list, description="Clusters abstracted into one rule each")
    created_rules: list[RuleDraft] = Field(default_factory=list)
    rulebook: list[Item] = Field(default_factory=list)
    tokens: int = 0
    budget_tokens: int
    abstraction: Literal["deterministic", "llm", "none"] = "none"
    notes: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------- evaluation


class Diagnostic(_Model):
    line: int | None = Field(None, description="1-based line in the candidate source")
    column: int | None = None
    end_line: int | None = None
    severity: Literal["error", "warning", "info"] = "error"
    category: str = Field(description="e.g. syntax, import, mismatch, ub_overflow, cheat")
    message: str
    kernel: str | None = None


class VariantResult(_Model):
    """A shape variant the kernel was checked at beyond the declared cases."""

    name: str = Field(description="odd, small or large values")
    status: Literal["passed", "failed", "dropped"]
    at: str = Field("", description="Its inputs' shapes")
    reason: str = Field("", description="Why it was dropped: the reference itself could not run it")


class EvalResult(_Model):
    status: EvalStatus
    message: str = ""
    task: str
    backend: str
    hardware: str
    candidate_hash: str
    correct: bool = False
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatch: str | None = Field(None, description="Where and how the first mismatch happened")
    cases: list[CaseResult] = Field(default_factory=list)
    reference_timing: TimingStats | None = None
    candidate_timing: TimingStats | None = None
    speedup: float | None = Field(None, description="reference median / candidate median")
    speedup_trusted: bool | None = Field(
        None,
        description="False: the speedup is unverified (a time this machine cannot deliver, a speedup past "
        "the suspicious threshold nothing confirmed, a task that cannot tell a constant from a "
        "kernel) and earns no credit; None where there is no speedup",
    )
    speedup_note: str | None = Field(None, description="Why the speedup is unverified, in one sentence")
    timing_representative: bool = True
    suspicious_speedup: bool = False
    seed: int | None = Field(None, description="This evaluation's input seed: `sage bench --seed N` reproduces it")
    variants: list[VariantResult] = Field(default_factory=list, description="Shape variants checked beyond the declared cases")
    degenerate: str | None = Field(
        None, description="Why this task cannot tell a constant from a kernel (its output is the same for every input)"
    )
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)
    compile_info: CompileInfo = Field(
        default_factory=CompileInfo, description="What the backend adds: the case timed, the checks run, the compiler's verdict"
    )
    phases: dict[str, float] = Field(
        default_factory=dict,
        description="Seconds per phase: startup, import (compile), correctness, timing, model_calls",
    )
    duration_s: float = 0.0
    host: str | None = Field(None, description="The machine that ran the evaluation")
    attempt_id: int | None = None
    episode_id: int | None = None
    poll_after_s: float | None = Field(None, description="Status running only: ask get_result(attempt_id) again after this many seconds")
    created_at: float | None = Field(None, description="When the attempt was stored (epoch seconds)")
    stdout_tail: str = ""
    confinement: str = Field("", description="How the candidate was contained: bubblewrap, or limits-only")
    profile: Profile | None = Field(
        None,
        description="Where the time goes: kernels per side, bytes and FLOPs of a call, the share of the "
        "machine's measured bandwidth and matmul peak reached, the binding limit, one sentence",
    )


class BackendStatus(_Model):
    name: str
    ready: bool
    hardware: str | None = None
    reason: str = Field("", description="Why it is (not) ready")
    setup: str = Field("", description="How to make it ready")
    timing_representative: bool = True
    confinement: str | None = Field(None, description="bubblewrap or limits-only (with the command that fixes it)")


# --------------------------------------------------------------------------- tasks


class TaskSummary(_Model):
    id: str
    name: str
    operator: str
    family: str
    level: int
    description: str = ""
    cases: int = 0
    examples: list[str] = Field(default_factory=list)


class TaskDetail(TaskSummary):
    """A task as an agent needs it to write a candidate: the summary plus
    the reference source it must match."""

    reference_source: str


AdoptionReport.model_rebuild()
