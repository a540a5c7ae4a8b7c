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

import json
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
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


@dataclass(frozen=True)
class RunningNote:
    """An evaluation running in a process on this machine, as its `Ledger` entry says."""

    attempt_id: int
    pid: int
    owner: str
    started_at: float = 0.0
    progress: str = ""  # its last progress message
    task: str | None = None
    candidate_hash: str | None = None
    candidate_path: str | None = None
    episode_id: int | None = None

    @classmethod
    def parse(cls, entry: dict[str, Any]) -> "RunningNote":
        """From an entry's JSON; ValueError, KeyError or TypeError for one that is not an entry."""
        text = {k: entry.get(k) for k in ("task", "candidate_hash", "candidate_path")}
        episode = entry.get("episode_id")
        return cls(
            attempt_id=int(entry["attempt_id"]),
            pid=int(entry["pid"]),
            owner=str(entry["owner"]),
            started_at=float(entry.get("started_at") or 0.0),
            progress=str(entry.get("progress") or ""),
            episode_id=int(episode) if episode is not None else None,
            **{k: str(v) if v is not None else None for k, v in text.items()},
        )


class Ledger:
    """The evaluations running in this machine's processes, by attempt id,
    for one memory: a small file per evaluation that its process writes when
    it starts, updates with its progress and removes when it ends.

    It is how another process finds an evaluation it did not start: an
    editor window reloaded starts a new language server, which shows the
    evaluation the old one still runs (and waits for its result instead of
    evaluating again), and can ask for it to be cancelled (a `.cancel` file
    the running process looks for). An entry whose process is gone is
    skipped and removed."""

    CANCEL_POLL_S = 0.5

    def __init__(self, root: Path):
        self.root = root

    def _path(self, attempt_id: int, suffix: str = ".json") -> Path:
        return self.root / f"{int(attempt_id)}{suffix}"

    def publish(self, job: Job) -> None:
        """Write (or rewrite, with its progress) the entry of a running evaluation."""
        if job.attempt_id is None:
            return
        entry = {
            "attempt_id": job.attempt_id,
            "pid": os.getpid(),
            "owner": job.owner,
            "episode_id": job.episode_id,
            "started_at": job.created_at,
            "progress": job.progress[2] if job.progress else "",
            **{k: job.meta.get(k) for k in ("task", "candidate_hash", "candidate_path")},
        }
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = self._path(job.attempt_id, f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(entry))
            os.replace(tmp, self._path(job.attempt_id))
        except OSError as exc:  # a read-only or full cache: the evaluation runs on, unseen by other processes
            log.info("could not note running attempt %s in %s: %s", job.attempt_id, self.root, exc)

    def remove(self, attempt_id: int) -> None:
        for suffix in (".json", ".cancel"):
            self._path(attempt_id, suffix).unlink(missing_ok=True)

    def entries(self) -> list[RunningNote]:
        """Every evaluation running in a live process, oldest first."""
        found = []
        for path in sorted(self.root.glob("*.json")) if self.root.is_dir() else []:
            try:
                note = RunningNote.parse(json.loads(path.read_text()))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # being replaced, or not an entry
            if not _alive(note.pid):
                self.remove(note.attempt_id)
                continue
            found.append(note)
        return sorted(found, key=lambda n: n.started_at)

    def get(self, attempt_id: int) -> RunningNote | None:
        return next((n for n in self.entries() if n.attempt_id == attempt_id), None)

    def request_cancel(self, attempt_id: int) -> None:
        self._path(attempt_id, ".cancel").touch()

    def watch_cancel(self, job: Job) -> None:
        """Set the job's cancel when another process asks for it (on a thread
        of its own, until the job ends)."""
        attempt_id = job.attempt_id
        if attempt_id is None:
            return
        flag = self._path(attempt_id, ".cancel")

        def watch() -> None:
            while not job.wait(self.CANCEL_POLL_S):
                if flag.exists():
                    job.cancel.set()
                    return

        threading.Thread(target=watch, name=f"sage-cancel-watch-{attempt_id}", daemon=True).start()


def memory_key(config: Any) -> str:
    """A short name for the memory a config opens (its database), so the
    ledgers of two memories sharing a cache folder stay apart."""
    import hashlib

    where = config.db_url or str(Path(config.db_path).expanduser().resolve())
    return hashlib.sha256(where.encode()).hexdigest()[:16]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive
    return True
