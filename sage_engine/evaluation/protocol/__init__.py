"""What crosses the pipes of one evaluation, typed: each field is named here
once and read through these classes on both ends.

    host (server)   --Op-->                 worker (sandboxed)   --command lines-->    reference, candidate
                    <--WorkerEvent--                             <--ChildEvent--       (children)
                                                                 <==value frames==>    (between the children)

- `Request`: what one evaluation needs, built by a backend on the host,
  carried by the `eval` op to the worker and by fork to the children.
- `Op`: the host's operations on the worker (eval, cancel, timing-go, pause,
  resume, quit), one JSON line each on the worker's stdin.
- Child events: token-carrying JSON lines from a child to the worker
  (progress, case rows, a verdict, a failure, the end of correctness).
- Worker events: JSON lines from the worker to the host (ready, started,
  progress, case rows, timing-wait / timing-done around the timing phase,
  and `exit` with the `Outcome`).
- `ProfileReport` (`profile.py`): each side's kernels and the call's work,
  the `profile-kernels` replies, carried in the `Report`.
- `Outcome`: what the worker saw of one evaluation; its `report` (a
  `Report`) decides the result when there is one.

Command lines (`rep 4` -> `ok 0.00123`) and value frames (tensor bytes) stay
plain bytes for speed: see `wire.py`. Standard library only: the worker and
the children may run under a backend's own interpreter.
"""

from sage_engine.evaluation.protocol.events import (
    CHILD_EVENTS,
    WORKER_EVENTS,
    CandidateDone,
    CaseEvent,
    Event,
    Exit,
    Extras,
    Fail,
    HostEvent,
    InputsShared,
    Lost,
    ProgressEvent,
    Ready,
    ReferenceDone,
    RunnerResult,
    Started,
    TimingDone,
    TimingWait,
    Verdict,
    event_line,
    parse_child_event,
    parse_fail,
    parse_worker_event,
    worker_line,
)
from sage_engine.evaluation.protocol.profile import KernelTime, ProfileReport, SideKernels, Work
from sage_engine.evaluation.protocol.reports import (
    CaseResult,
    HookReport,
    Judgement,
    Outcome,
    Report,
    TimingReport,
    TimingStats,
    VariantRow,
)
from sage_engine.evaluation.protocol.request import (
    BUILD_LOCKS,
    build_product,
    CANDIDATE_STATUSES,
    MAX_TASKS,
    BuildSpec,
    Limits,
    Op,
    ProfileOptions,
    Request,
    TaskSpec,
    TimingOptions,
    Variant,
    VerdictOptions,
    build,
)

__all__ = [
    "BUILD_LOCKS",
    "build_product",
    "CANDIDATE_STATUSES",
    "CHILD_EVENTS",
    "MAX_TASKS",
    "WORKER_EVENTS",
    "BuildSpec",
    "CandidateDone",
    "CaseEvent",
    "CaseResult",
    "Event",
    "Exit",
    "Extras",
    "Fail",
    "HookReport",
    "HostEvent",
    "InputsShared",
    "Judgement",
    "KernelTime",
    "Limits",
    "Lost",
    "Op",
    "Outcome",
    "ProfileOptions",
    "ProfileReport",
    "ProgressEvent",
    "Ready",
    "ReferenceDone",
    "Report",
    "Request",
    "RunnerResult",
    "SideKernels",
    "Started",
    "TaskSpec",
    "TimingDone",
    "Work",
    "TimingOptions",
    "TimingReport",
    "TimingStats",
    "TimingWait",
    "Variant",
    "VariantRow",
    "Verdict",
    "VerdictOptions",
    "build",
    "event_line",
    "parse_child_event",
    "parse_fail",
    "parse_worker_event",
    "worker_line",
]
