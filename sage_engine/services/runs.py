"""Evaluations a caller does not wait for: started with their attempt id
reserved, run on a thread of their own, stored once when they end, and
read back by that id however often anyone asks (`Engine.start_evaluation`,
`Engine.evaluation_job`).

The rules an attempt meets are the blocking call's: the episode and the
adopted ids are checked before it starts, the attempt and its adoptions are
recorded in one transaction when it ends (its request id makes a repeat a
no-op), and credit comes when the episode closes, from what is stored. How
the result was read (the call that started it, a poll, an MCP task) changes
none of it.
"""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING, Protocol, Sequence

from sage_engine.config import Config
from sage_engine.memory.store import Store
from sage_engine.models import Adoption, ConsolidationReport, EvalResult, ProgressCallback
from sage_engine.services.episodes import EpisodeService
from sage_engine.services.evaluation import EvaluationService
from sage_engine.services.jobs import Job, Jobs, Ledger, Progress
from sage_engine.services.team import Caller

if TYPE_CHECKING:
    from sage_engine.evaluation.host.tasks import Task


class Runner(Protocol):
    """What starting background work needs of the engine (one user's view of it)."""

    user: str
    config: Config
    store: Store
    episodes: EpisodeService
    evaluation: EvaluationService
    ledger: Ledger

    @property
    def caller(self) -> Caller: ...

    def resolve_candidate(self, candidate: str) -> tuple[str, str | None]: ...
    def load_task(self, spec: str) -> Task: ...
    def candidate_hash(self, source: str) -> str: ...
    def record_result(
        self,
        result: EvalResult,
        *,
        episode_id: int | None = None,
        adopted: Sequence[Adoption] = (),
        candidate_path: str | None = None,
        request_id: str | None = None,
        labels: tuple[str | None, str | None] = (None, None),
        attempt_id: int | None = None,
    ) -> EvalResult: ...
    def consolidate(
        self, *, dry_run: bool = False, budget_tokens: int | None = None, progress: ProgressCallback | None = None
    ) -> ConsolidationReport: ...


def start_evaluation(
    engine: Runner,
    jobs: Jobs,
    candidate: str,
    task: str,
    *,
    backend: str | None = None,
    episode_id: int | None = None,
    adopted: Sequence[Adoption] = (),
    trials: int | None = None,
    candidate_path: str | None = None,
) -> Job:
    """Check the call as `Engine.evaluate` does, reserve the attempt's id and
    evaluate in the background; returns at once with the job."""
    source, path = engine.resolve_candidate(candidate)
    the_task = engine.load_task(task)
    engine.episodes.check_attempt(episode_id, adopted, engine.caller)
    with engine.store.transaction():
        attempt_id = engine.store.episodes.reserve_attempt_id()
    request_id = uuid.uuid4().hex
    harness = engine.evaluation.harness

    def work(progress: Progress, cancel: threading.Event) -> EvalResult:
        result = harness.evaluate(the_task, source, backend=backend, trials=trials, progress=progress, cancel=cancel)
        return engine.record_result(
            result,
            episode_id=episode_id,
            adopted=adopted,
            candidate_path=candidate_path or path,
            request_id=request_id,
            attempt_id=attempt_id,
            labels=(the_task.operator, the_task.family),
        )

    job = jobs.start("evaluation", work, owner=engine.user, attempt_id=attempt_id, episode_id=episode_id)
    # What a surface shows before the result exists, and how an editor finds the run for its file.
    job.meta.update(
        task=the_task.id,
        backend=backend or engine.config.backend,
        candidate_hash=engine.candidate_hash(source),
        candidate_path=candidate_path or path,
    )
    # Seen by this machine's other processes (a reloaded editor's new server), which may ask to cancel it.
    ledger = engine.ledger
    ledger.publish(job)

    def noted(changed: Job) -> None:
        if changed.finished:
            ledger.remove(attempt_id)
        else:
            ledger.publish(changed)

    if job.subscribe(noted) is None:
        ledger.remove(attempt_id)
    ledger.watch_cancel(job)
    return job


def start_consolidation(engine: Runner, jobs: Jobs, *, dry_run: bool = False, budget_tokens: int | None = None) -> Job:
    def work(progress: Progress, cancel: threading.Event) -> ConsolidationReport:
        return engine.consolidate(dry_run=dry_run, budget_tokens=budget_tokens, progress=progress)

    return jobs.start("consolidation", work, owner=engine.user)


def running_result(job: Job, poll_after_s: float) -> EvalResult:
    """What an evaluation that has not finished answers: status `running`,
    its attempt id and when to ask again."""
    done = job.progress
    phase = f" ({done[2]})" if done and done[2] else ""
    return EvalResult(
        status="running",
        message=(
            f"still evaluating{phase}; nothing is lost by returning now: call get_result(attempt_id={job.attempt_id}) "
            f"in {poll_after_s:g} s or later (it waits for the result itself). Do not evaluate the same candidate again."
        ),
        task=job.meta.get("task", ""),
        backend=job.meta.get("backend", ""),
        hardware="",
        candidate_hash=job.meta.get("candidate_hash", ""),
        attempt_id=job.attempt_id,
        episode_id=job.episode_id,
        poll_after_s=poll_after_s,
    )
