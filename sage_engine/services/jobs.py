"""Work that outlives the call that started it: an evaluation (or a
consolidation) runs on its own thread, and whoever asks for it later gets
the same outcome, computed once.

A caller that cannot wait (a client that gives up after a minute, an MCP
task, an editor window reloaded) keeps the job's handle; the job stores its
result when it finishes whether anyone is still waiting or not, so asking
again never evaluates again. Jobs live in the process that runs them: a
finished one is kept `ttl_s` after it finished (an evaluation's result is
in the memory database for good, read by its attempt id).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from sage_engine.errors import Cancelled, NotFound

log = logging.getLogger(__name__)

# The MCP task states (2025-11-25) are the states of every job.
JobState = Literal["working", "completed", "failed", "cancelled"]
Progress = Callable[[float, float | None, str], None]
Work = Callable[[Progress, threading.Event], Any]


@dataclass(eq=False)
class Job:
    """One piece of background work and what came of it. Listeners are
    called (on the job's thread) after every progress update and once more
    when it ends; they must not block."""

    id: str
    kind: str
    owner: str
    ttl_s: float
    attempt_id: int | None = None
    episode_id: int | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    state: JobState = "working"
    result: Any = None
    error: BaseException | None = None
    progress: tuple[float, float | None, str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # what a surface shows of the job before it ends
    cancel: threading.Event = field(default_factory=threading.Event)
    _done: threading.Event = field(default_factory=threading.Event)
    _listeners: list[Callable[["Job"], None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job ends or `timeout` passes; whether it ended."""
        return self._done.wait(timeout)

    def outcome(self) -> Any:
        """The result of a finished job, or the error it ended with."""
        if not self.finished:
            raise RuntimeError("the job is still working")
        if self.error is not None:
            raise self.error
        return self.result

    def subscribe(self, listener: Callable[["Job"], None]) -> Callable[[], None] | None:
        """Call `listener` (on the job's thread) on each change from now on;
        returns the unsubscribe, or None when the job has already ended."""
        with self._lock:
            if self.finished:
                return None
            self._listeners.append(listener)
        return lambda: self._unsubscribe(listener)

    def _unsubscribe(self, listener: Callable[["Job"], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def report(self, done: float, total: float | None, message: str) -> None:
        with self._lock:
            self.progress = (float(done), total, message)
            self.updated_at = time.time()
            listeners = list(self._listeners)
        self._notify(listeners)

    def _finish(self, state: JobState, result: Any = None, error: BaseException | None = None) -> None:
        with self._lock:
            self.state, self.result, self.error = state, result, error
            self.updated_at = time.time()
            listeners, self._listeners = self._listeners, []
            self._done.set()
        self._notify(listeners)

    def _notify(self, listeners: list[Callable[["Job"], None]]) -> None:
        for listener in listeners:
            try:
                listener(self)
            except Exception:  # a waiter whose event loop is gone must not stop the work
                log.debug("a listener of job %s failed; dropped", self.id, exc_info=True)
                self._unsubscribe(listener)

    def expired(self, now: float) -> bool:
        return self.finished and now > self.updated_at + self.ttl_s


class Jobs:
    """The jobs of one process, by handle and by attempt id."""

    def __init__(self, ttl_s: float):
        self.ttl_s = ttl_s
        self._jobs: dict[str, Job] = {}
        self._by_attempt: dict[int, Job] = {}
        self._lock = threading.Lock()

    def start(
        self,
        kind: str,
        work: Work,
        *,
        owner: str,
        attempt_id: int | None = None,
        episode_id: int | None = None,
        ttl_s: float | None = None,
    ) -> Job:
        """Run `work(progress, cancel)` on a thread of its own; returns at once."""
        job = Job(
            id=secrets.token_urlsafe(16),
            kind=kind,
            owner=owner,
            ttl_s=self.ttl_s if ttl_s is None else ttl_s,
            attempt_id=attempt_id,
            episode_id=episode_id,
        )
        with self._lock:
            self._expire(time.time())
            self._jobs[job.id] = job
            if attempt_id is not None:
                self._by_attempt[attempt_id] = job
        threading.Thread(target=self._run, args=(job, work), name=f"sage-{kind}-{attempt_id or job.id[:6]}", daemon=True).start()
        return job

    def _run(self, job: Job, work: Work) -> None:
        try:
            result = work(job.report, job.cancel)
        except Cancelled as exc:
            job._finish("cancelled", error=exc)
        except BaseException as exc:  # kept for whoever asks; the job's thread ends either way
            if not isinstance(exc, Exception):
                log.error("job %s ended by %r", job.id, exc)
            job._finish("failed", error=exc)
        else:
            job._finish("completed", result=result)  # stored: a cancel that came too late changes nothing

    def get(self, job_id: str, owner: str | None = None) -> Job:
        """A job by handle; someone else's job is as absent as a made-up one."""
        with self._lock:
            self._expire(time.time())
            job = self._jobs.get(job_id)
        if job is None or (owner is not None and job.owner != owner):
            raise NotFound(f"no task {job_id!r} here: it finished more than its ttl ago, or never existed")
        return job

    def for_attempt(self, attempt_id: int) -> Job | None:
        with self._lock:
            return self._by_attempt.get(attempt_id)

    def owned_by(self, owner: str | None) -> list[Job]:
        """Every job still kept, oldest first; only `owner`'s when given."""
        with self._lock:
            self._expire(time.time())
            return [j for j in self._jobs.values() if owner is None or j.owner == owner]

    def running(self) -> list[Job]:
        with self._lock:
            return [j for j in self._jobs.values() if not j.finished]

    def cancel_all(self) -> None:
        for job in self.running():
            job.cancel.set()

    def wait_all(self, timeout_s: float) -> None:
        """Give running jobs up to `timeout_s` in all to end (a closing engine
        lets each store its attempt or raise its cancel before the store goes)."""
        deadline = time.monotonic() + timeout_s
        for job in self.running():
            job.wait(max(deadline - time.monotonic(), 0.0))

    def _expire(self, now: float) -> None:
        for job_id in [k for k, j in self._jobs.items() if j.expired(now)]:
            job = self._jobs.pop(job_id)
            if job.attempt_id is not None and self._by_attempt.get(job.attempt_id) is job:
                del self._by_attempt[job.attempt_id]
