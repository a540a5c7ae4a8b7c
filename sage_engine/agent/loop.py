"""One episode of SAGE's own agent: retrieve, write, evaluate, iterate,
record a lesson and the adoptions.

The loop follows the same protocol an external agent follows through MCP,
calling the Engine directly: `retrieve` opens the episode and logs what was
shown, each `evaluate` stores an attempt with the ids the model says it
adopted, and `record_adoption` closes the episode (ATU runs there) and
stores the lesson with its provenance.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from sage_engine.agent import prompt
from sage_engine.agent.costs import Price, cost_usd, price_for
from sage_engine.agent.llm import LLM, Response, ToolCall, Usage
from sage_engine.agent.state import TaskRecord
from sage_engine.agent.strategies import Strategy
from sage_engine.errors import Conflict, InvalidInput, NotFound
from sage_engine.models import Adoption, EvalResult, Lesson, ScoredItem

if TYPE_CHECKING:
    from sage_engine.engine import Engine
    from sage_engine.evaluation.host.tasks import Task

log = logging.getLogger(__name__)

MAX_NUDGES = 2  # replies without a submission tolerated before a task is given up
MAX_EVIDENCE_CHARS = 500
LESSON_MAX_TOKENS = 1500

Events = Callable[[dict[str, Any]], None]


class Interrupted(Exception):
    """The run is stopping (Ctrl-C or another task hit a provider error);
    this task stays unfinished and is resumed later."""


class EpisodeGone(Exception):
    """The episode was closed (or removed) outside this loop, e.g. by the
    idle sweep of a server sharing the memory. Nothing the model could change:
    never fed back to it as kernel feedback."""


@dataclass
class AgentSettings:
    strategy: Strategy
    rounds: int = 4
    backend: str = "cpu"
    k: int = 5
    max_tokens: int = 8192
    price: Price | None = None  # None: the table's price for the model
    client: str = "sage-run"  # scopes the engine's "one open episode per client and task" rule to this run
    # Serialises evaluations when the harness must not run two at once; None
    # lets concurrent tasks evaluate in parallel.
    eval_lock: Any = None


@dataclass
class Attempt:
    round_no: int
    result: EvalResult
    code: str


@dataclass
class EpisodeOutcome:
    record: TaskRecord
    best_code: str | None
    messages: list[dict[str, Any]] = field(default_factory=list)
    system: str = ""


def solve_task(
    engine: "Engine",
    llm: LLM,
    task_ref: str,
    settings: AgentSettings,
    *,
    order: int = 0,
    resume_episode: int | None = None,
    stop: threading.Event | None = None,
    events: Events | None = None,
    progress: Callable[[str], None] | None = None,
) -> EpisodeOutcome:
    return _Episode(engine, llm, task_ref, settings, order, resume_episode, stop, events, progress).run()


class _Episode:
    def __init__(
        self,
        engine: "Engine",
        llm: LLM,
        task_ref: str,
        settings: AgentSettings,
        order: int,
        resume_episode: int | None,
        stop: threading.Event | None,
        events: Events | None,
        progress: Callable[[str], None] | None,
    ) -> None:
        self.engine = engine
        self.llm = llm
        self.ref = task_ref
        self.s = settings
        self.stop = stop or threading.Event()
        self.emit: Events = events or (lambda e: None)
        self.say = progress or (lambda m: None)
        self.usage = Usage()
        self.task: Task = engine.load_task(task_ref)
        self.record = TaskRecord(
            task=self.task.id, name=self.task.name, operator=self.task.operator, family=self.task.family, level=self.task.level, order=order
        )
        self.resume_episode = resume_episode
        self.episode_id: int | None = None
        self.shown: set[int] = set()
        self.attempts: list[Attempt] = []
        self.best: Attempt | None = None
        self.reported: dict[int, Adoption] = {}
        self.claimed: dict[int, Adoption] = {}
        self.messages: list[dict[str, Any]] = []

    # ---------------------------------------------------------------- phases

    def run(self) -> EpisodeOutcome:
        t0 = time.monotonic()
        rules, items = self._retrieve()
        with_memory = self.s.strategy.retrieve
        system = prompt.system_prompt(self.s.backend, self.s.rounds, with_memory=with_memory)
        self.messages = [{"role": "user", "content": prompt.task_message(self.task, rules=rules, items=items, with_memory=with_memory)}]
        try:
            self._solve(system)
            if with_memory:
                self._finish_episode(system)
        except EpisodeGone as exc:
            self.record.stop = "episode_closed"
            self.record.notes.append(f"episode {self.episode_id} was closed outside this run: {exc}")
        self._fill_record(time.monotonic() - t0)
        return EpisodeOutcome(self.record, self.best.code if self.best else None, self.messages, system)

    def _retrieve(self) -> tuple[list[ScoredItem], list[ScoredItem]]:
        if not self.s.strategy.retrieve:
            return [], []
        result = None
        if self.resume_episode is not None:
            # Continue the interrupted episode: its attempts happened and stay
            # in it; a fresh episode would leave it to be closed and credited
            # later as a half episode.
            try:
                result = self.engine.retrieve(
                    self.ref, backend=self.s.backend, k=self.s.k, episode_id=self.resume_episode, client=self.s.client
                )
            except (Conflict, NotFound, InvalidInput) as exc:
                log.info("episode %s cannot be continued (%s); starting a new one", self.resume_episode, exc)
        if result is None:
            result = self.engine.retrieve(self.ref, backend=self.s.backend, k=self.s.k, client=self.s.client)
        self.episode_id = result.episode_id
        self.shown = {i.id for i in result.resident_rules + result.items}
        self.record.episode_id = result.episode_id
        self.record.shown_ids = sorted(self.shown)
        self.emit({"event": "started", "task": self.task.id, "episode_id": self.episode_id})
        return result.resident_rules, result.items

    def _solve(self, system: str) -> None:
        nudges = 0
        while len(self.attempts) < self.s.rounds:
            resp = self._call(system, [prompt.SUBMIT_KERNEL], None, f"round {len(self.attempts) + 1}: waiting for the model")
            self.messages.append(resp.assistant_message())
            calls = [c for c in resp.tool_calls if c.name == prompt.SUBMIT_KERNEL.name]
            if not calls:
                if self.best is not None:
                    self.record.stop = "done"
                    return
                nudges += 1
                if nudges > MAX_NUDGES:
                    self.record.stop = "no_submission"
                    self.record.notes.append("the model stopped submitting before any kernel was correct")
                    return
                cut = (
                    " Your reply was cut off at the output limit: keep the module shorter."
                    if resp.stop_reason in ("max_tokens", "length")
                    else ""
                )
                self.messages.append(
                    {
                        "role": "user",
                        "content": self._results(resp.tool_calls)
                        + [
                            {
                                "type": "text",
                                "text": "No correct kernel yet. Call submit_kernel with the full module defining ModelNew." + cut,
                            }
                        ],
                    }
                )
                continue
            nudges = 0
            call, extra = calls[0], [c for c in resp.tool_calls if c is not calls[0]]
            text = self._submit(call)
            blocks = [{"type": "tool_result", "tool_use_id": call.id, "content": text}] + self._results(extra)
            self.messages.append({"role": "user", "content": blocks})
        self.record.stop = "rounds"

    def _submit(self, call: ToolCall) -> str:
        round_no = len(self.attempts) + 1
        code = call.input.get("code")
        adopted, ignored = self._adoptions(call.input.get("adopted_ids"))
        if not isinstance(code, str) or not code.strip():
            # Counts as a round: an empty submission is still a wasted turn.
            invalid = _invalid(self.task.id, self.s.backend, "submit_kernel needs `code`: the full module source")
            self.attempts.append(Attempt(round_no, invalid, ""))
            self.record.statuses.append("rejected")
            return f"Round {round_no} of {self.s.rounds}: rejected\nsubmit_kernel needs `code`: the full module source defining ModelNew."
        report = adopted if self.s.strategy.report_adoptions else []
        self._check_stop()
        self.say(f"round {round_no}: evaluating")
        try:
            if self.s.eval_lock is not None:
                with self.s.eval_lock:
                    result = self._evaluate(code, report, round_no)
            else:
                result = self._evaluate(code, report, round_no)
        except InvalidInput as exc:
            # Oversized or malformed code: the model's to fix, so it is fed back.
            result = _invalid(self.task.id, self.s.backend, str(exc))
        except (Conflict, NotFound) as exc:
            raise EpisodeGone(str(exc)) from exc
        for a in adopted:
            self.claimed.setdefault(a.id, a)
        if report and result.attempt_id is not None:
            for a in report:
                self.reported.setdefault(a.id, a)
        attempt = Attempt(round_no, result, code)
        self.attempts.append(attempt)
        self.record.statuses.append(result.status)
        if result.attempt_id is not None:
            self.record.attempt_ids.append(result.attempt_id)
        if result.correct and (self.best is None or _ms(result) < _ms(self.best.result)):
            self.best = attempt
        self.emit(
            {
                "event": "round",
                "task": self.task.id,
                "round": round_no,
                "status": result.status,
                "speedup": result.speedup,
                "attempt_id": result.attempt_id,
            }
        )
        return prompt.feedback(result, round_no=round_no, rounds=self.s.rounds, best=self._best_text(), ignored_ids=ignored)

    def _evaluate(self, code: str, adopted: list[Adoption], round_no: int) -> EvalResult:
        def progress(done: float, total: float | None, message: str) -> None:
            self.say(f"round {round_no}: {message}")

        return self.engine.evaluate(code, self.ref, backend=self.s.backend, episode_id=self.episode_id, adopted=adopted, progress=progress)

    def _finish_episode(self, system: str) -> None:
        """Ask for the lesson, then close the episode through record_adoption."""
        outcome = self._outcome_text()
        pending = self._pending_results()
        self.messages.append({"role": "user", "content": pending + [{"type": "text", "text": prompt.lesson_prompt(outcome)}]})
        lesson = None
        resp = self._call(
            system,
            [prompt.SUBMIT_KERNEL, prompt.RECORD_LESSON],
            prompt.RECORD_LESSON.name,
            "writing the lesson",
            max_tokens=LESSON_MAX_TOKENS,
        )
        self.messages.append(resp.assistant_message())
        call = next((c for c in resp.tool_calls if c.name == prompt.RECORD_LESSON.name), None)
        if call is not None:
            lesson = self._lesson(call.input)
            self.messages.append({"role": "user", "content": self._results(resp.tool_calls, "recorded")})
        else:
            self.record.notes.append("the model recorded no lesson")
        # Adoptions were reported with each attempt; only ones not yet stored go here.
        late = [a for i, a in self.claimed.items() if i not in self.reported] if self.s.strategy.report_adoptions else []
        attempt = self.best or (self.attempts[-1] if self.attempts else None)
        attempt_id = attempt.result.attempt_id if attempt else None
        self._check_stop()
        episode_id = self.episode_id
        if episode_id is None:  # retrieval opened it: a run with memory always has one
            raise EpisodeGone("no episode was opened")
        try:
            report = self.engine.record_adoption(episode_id, late, attempt_id=attempt_id, lesson=lesson)
        except InvalidInput as exc:
            if lesson is None:
                raise
            # Nothing was stored (one transaction): close it again without the lesson.
            self.record.notes.append(f"lesson not stored: {exc}")
            report = self.engine.record_adoption(episode_id, late, attempt_id=attempt_id)
        except (Conflict, NotFound) as exc:
            raise EpisodeGone(str(exc)) from exc
        self.reported.update({a.id: a for a in late})
        self.record.reward = report.reward
        self.record.utility_updates = len(report.updates)
        if report.new_item is not None:
            self.record.lesson_item_id = report.new_item.id
            self.record.lesson_merged = report.lesson_merged
        if report.consolidation is not None:
            c = report.consolidation
            self.record.consolidation_id = c.consolidation_id
            self.emit(
                {
                    "event": "consolidation",
                    "task": self.task.id,
                    "consolidation_id": c.consolidation_id,
                    "promoted": c.promoted,
                    "demoted": c.demoted,
                    "abstraction": c.abstraction,
                    "notes": c.notes,
                }
            )

    # ---------------------------------------------------------------- helpers

    def _call(self, system: str, tools, tool_choice: str | None, status: str, max_tokens: int | None = None) -> Response:
        self._check_stop()
        self.say(status)
        resp = self.llm.complete(system, self.messages, tools, tool_choice=tool_choice, max_tokens=max_tokens or self.s.max_tokens)
        self.usage.add(resp.usage)
        return resp

    def _check_stop(self) -> None:
        if self.stop.is_set():
            raise Interrupted(self.task.id)

    def _adoptions(self, raw: Any) -> tuple[list[Adoption], list[int]]:
        """The model's adopted_ids, cleaned: ids as ints, only ids shown in
        this episode (the engine would refuse others), evidence bounded."""
        out: dict[int, Adoption] = {}
        ignored: list[int] = []
        for entry in raw if isinstance(raw, list) else []:
            ident, evidence = (entry.get("id"), entry.get("evidence", "")) if isinstance(entry, dict) else (entry, "")
            try:
                item_id = int(str(ident).lstrip("#"))
            except (TypeError, ValueError):
                continue
            if item_id not in self.shown:
                ignored.append(item_id)
                continue
            out.setdefault(item_id, Adoption(id=item_id, evidence=str(evidence or "")[:MAX_EVIDENCE_CHARS]))
        return list(out.values()), ignored

    def _lesson(self, raw: dict[str, Any]) -> Lesson | None:
        cfg = self.engine.config
        title, content = str(raw.get("title") or "").strip(), str(raw.get("content") or "").strip()
        if not title or not content:
            self.record.notes.append("the lesson had no title or content")
            return None
        code = raw.get("code")
        given = raw.get("tags")
        tags = given if isinstance(given, list) else []
        return Lesson(
            title=title[: cfg.max_title_chars],
            content=content[: cfg.max_content_chars],
            code=str(code)[: cfg.max_code_chars] if isinstance(code, str) and code.strip() else None,
            tags=[str(t).strip().lower()[:40] for t in tags if str(t).strip()][:8],
        )

    def _results(self, calls: list[ToolCall], text: str = "") -> list[dict[str, Any]]:
        """A tool_result for every tool call not otherwise answered: the API
        requires one per call before the conversation can go on."""
        return [
            {
                "type": "tool_result",
                "tool_use_id": c.id,
                "content": text or f"{c.name} was not run: one submission per turn.",
                "is_error": not text,
            }
            for c in calls
        ]

    def _pending_results(self) -> list[dict[str, Any]]:
        # After the last round the tool result is already the last user turn:
        # merge it with the lesson request. When the model stopped on its own,
        # any tool call in its last turn still needs an answer.
        last = self.messages[-1] if self.messages else None
        if last is None or not isinstance(last["content"], list):
            return []
        if last["role"] == "user":
            self.messages.pop()
            return [b for b in last["content"] if b.get("type") == "tool_result"]
        unanswered = [ToolCall(b["id"], b["name"], b["input"]) for b in last["content"] if b.get("type") == "tool_use"]
        return self._results(unanswered)

    def _best_text(self) -> str | None:
        if self.best is None:
            return None
        r = self.best.result
        speed = f", {r.speedup:.3g}x over the reference" if r.speedup is not None else ""
        if r.speedup is not None and r.speedup_trusted is False:
            speed += " (unverified)"
        return f"round {self.best.round_no}{speed}"

    def _outcome_text(self) -> str:
        if self.best is None:
            statuses = ", ".join(a.result.status for a in self.attempts) or "no submission"
            return f"No submission was correct ({statuses})."
        return f"Your best kernel was correct in {self._best_text()}."

    def _fill_record(self, duration: float) -> None:
        rec = self.record
        rec.rounds_used = len(self.attempts)
        rec.solved = self.best is not None
        first = next((a for a in self.attempts if a.result.correct), None)
        if first is not None:
            rec.first_correct_round = first.round_no
            rec.first_correct_ms = _timing(first.result)
            rec.first_correct_speedup = _trusted_speedup(first.result)
        if self.best is not None:
            r = self.best.result
            rec.best_round, rec.best_attempt_id = self.best.round_no, r.attempt_id
            rec.best_ms, rec.best_speedup = _timing(r), _trusted_speedup(r)
            rec.best_speedup_unverified = r.speedup if r.speedup_trusted is False else None
            rec.reference_ms = r.reference_timing.median_ms if r.reference_timing else None
        statuses = [a.result.status for a in self.attempts]
        rec.best_status = "correct" if self.best else (statuses[-1] if statuses else None)
        rec.adopted_ids = sorted(self.reported)
        rec.claimed_ids = sorted(self.claimed)
        u = self.usage
        rec.input_tokens, rec.output_tokens = u.input_tokens, u.output_tokens
        rec.cache_read_tokens, rec.cache_write_tokens, rec.llm_calls = u.cache_read_tokens, u.cache_write_tokens, u.calls
        rec.cost_usd = cost_usd(u, price_for(self.llm.model, self.s.price))
        rec.duration_s = round(duration, 3)


def _timing(r: EvalResult) -> float | None:
    return r.candidate_timing.median_ms if r.candidate_timing else None


def _ms(r: EvalResult) -> float:
    # A correct kernel without timing (compile-gate backends), or whose time is
    # unverified, ranks after timed ones: an unbelievable time is no best.
    t = _timing(r) if r.speedup_trusted is not False else None
    return t if t is not None else float("inf")


def _trusted_speedup(r: EvalResult) -> float | None:
    """The speedup the reports count: none where it is unverified (ER and fast_p never count those)."""
    return r.speedup if r.speedup_trusted is not False else None


def _invalid(task: str, backend: str, message: str) -> EvalResult:
    return EvalResult(status="rejected", message=message, task=task, backend=backend, hardware="", candidate_hash="")
