"""Events: JSON lines from a child to the worker (carrying the evaluation's
token) and from the worker to the host."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sage_engine.evaluation.protocol.reports import CaseResult, HookReport, Judgement, Outcome, hook_report, judgement
from sage_engine.evaluation.protocol.request import build, plain
from sage_engine.evaluation.protocol.wire import ProtocolError


@dataclass
class Event:
    """A JSON line between processes; `kind` is its `ev` field."""

    kind: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        return {"ev": self.kind, **{k: plain(v) for k, v in vars(self).items()}}


@dataclass
class ProgressEvent(Event):
    kind: ClassVar[str] = "progress"
    progress: float = 0.0
    total: float | None = None
    message: str = ""


@dataclass
class CaseEvent(Event):
    kind: ClassVar[str] = "case"
    case_result: CaseResult = field(default_factory=lambda: CaseResult({}, 0, False))


@dataclass
class Verdict(Event):
    """The reference process's verdict on a trial that did not match (the last
    case row says where); `judgement` holds what it found of the shape
    variants so far, the failed one included."""

    kind: ClassVar[str] = "verdict"
    status: str = "incorrect"
    message: str = ""
    judgement: Judgement | None = None


@dataclass
class Fail(Event):
    """A child ends the evaluation with a status. `hook` carries what a
    backend's hook adds (the Ascend gate's launches); `harness` marks a fault
    of SAGE's own code rather than of the task or candidate."""

    kind: ClassVar[str] = "fail"
    status: str = "runtime_error"
    message: str = ""
    diagnostics: list[dict] = field(default_factory=list)
    hook: HookReport | None = None  # what a backend's hook in the candidate process saw
    harness: bool = False
    variant: str = ""  # the shape variant it failed at ("" for a declared case)
    at: str = ""  # that variant's input shapes


@dataclass
class Lost(Event):
    """The reference process lost the candidate's channel (it exited or failed; its own event says why)."""

    kind: ClassVar[str] = "lost"
    message: str = ""


@dataclass
class InputsShared(Event):
    """The reference has put this many bytes of inputs in the shared file:
    the candidate may map that much beyond its memory cap."""

    kind: ClassVar[str] = "inputs-shared"
    placed: int = 0


@dataclass
class Extras(Event):
    """What a backend's hook gathered so far in the candidate process (kernel launches)."""

    kind: ClassVar[str] = "extras"
    hook: HookReport | None = None  # what a backend's hook in the candidate process saw


@dataclass
class ReferenceDone(Event):
    """The reference process passed every trial and now answers timing commands."""

    kind: ClassVar[str] = "reference-done"
    chosen: int = 0  # index of the case with the most input bytes: the one timed
    sizes: list[int] = field(default_factory=list)
    device_name: str | None = None
    slowest_call: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)  # how they crossed: via, shared_bytes, pipe_bytes, on_device
    judgement: Judgement = field(default_factory=Judgement)

    @property
    def timed_bytes(self) -> int:
        """The timed case's input bytes (0 where not said)."""
        return self.sizes[self.chosen] if 0 <= self.chosen < len(self.sizes) else 0


@dataclass
class CandidateDone(Event):
    """The candidate process ran every trial and now answers timing commands."""

    kind: ClassVar[str] = "candidate-done"
    threads: list[int] = field(default_factory=list)  # thread count before loading the candidate, after the trials
    phases: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    slowest_call: float = 0.0
    hook: HookReport | None = None  # what a backend's hook in the candidate process saw


@dataclass
class RunnerResult(Event):
    """What a runner routine (no reference process) returned."""

    kind: ClassVar[str] = "result"
    result: dict[str, Any] = field(default_factory=dict)


def parse_fail(payload: bytes) -> Fail:
    """A `fail` sent as a timing command's `err` reply (a bare failure when it is garbled)."""
    try:
        data = json.loads(payload)
        data.pop("ev", None)
        return build(Fail, data, hook=hook_report)
    except (ValueError, AttributeError, ProtocolError):
        return Fail()


CHILD_EVENTS: dict[str, type] = {
    cls.kind: cls
    for cls in (ProgressEvent, CaseEvent, Verdict, Fail, Lost, Extras, InputsShared, ReferenceDone, CandidateDone, RunnerResult)
}


def event_line(event: Event, token: str) -> bytes:
    return (json.dumps({**event.to_dict(), "token": token}, default=str) + "\n").encode()


def parse_child_event(line: bytes, token: str) -> Event | None:
    """The event on `line` if it carries `token` and is one the children
    send, else None (a line a candidate forged is not believed, only counted)."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.pop("token", None) != token:
        return None
    cls = CHILD_EVENTS.get(data.pop("ev", None))
    if cls is None:
        return None
    try:
        return build(cls, data, case_result=lambda d: build(CaseResult, d), judgement=judgement, hook=hook_report)
    except ProtocolError:
        return None


@dataclass
class Ready(Event):
    kind: ClassVar[str] = "ready"
    pid: int = 0
    versions: dict[str, str] = field(default_factory=dict)


@dataclass
class Started(Event):
    kind: ClassVar[str] = "started"
    pids: list[int] = field(default_factory=list)


@dataclass
class TimingWait(Event):
    """The evaluation asks for the host's timing turn."""

    kind: ClassVar[str] = "timing-wait"


@dataclass
class TimingDone(Event):
    kind: ClassVar[str] = "timing-done"


@dataclass
class Exit(Event):
    kind: ClassVar[str] = "exit"
    outcome: Outcome = field(default_factory=Outcome)


WORKER_EVENTS: dict[str, type] = {cls.kind: cls for cls in (Ready, Started, ProgressEvent, TimingWait, TimingDone, Exit)}


def worker_line(event: Event) -> bytes:
    return (json.dumps(event.to_dict(), default=str) + "\n").encode()


def parse_worker_event(line: bytes) -> Event | None:
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    cls = WORKER_EVENTS.get(data.pop("ev", None))
    if cls is None:
        return None
    return build(cls, data, outcome=Outcome.from_dict, case_result=lambda d: build(CaseResult, d))


@dataclass
class HostEvent:
    """What an evaluation host streams back over Ray, naming itself and its
    Ray node: first a bare one (started), then progress, then the result
    (`EvalResult` as JSON) or the error the evaluation raised there."""

    host: str
    node: str
    progress: ProgressEvent | None = None
    result: dict[str, Any] | None = None
    error: BaseException | None = None
