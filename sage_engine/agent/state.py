"""A run directory: its settings, an append-only JSON-lines state file, and
what each finished task produced. Enough to resume after a crash or Ctrl-C
without repeating finished tasks.

Layout::

    run.json            RunSettings (written once, read on resume)
    state.jsonl         one event per line: started, round, finished, consolidation, stopped
    candidates/<id>.py  the best kernel of each task
    transcripts/<id>.json  the whole conversation of each task
    report.json, report.md, plots/*.png
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sage_engine.errors import InvalidInput

log = logging.getLogger(__name__)

STATE_FILE = "state.jsonl"
SETTINGS_FILE = "run.json"


class RunSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    suite: str
    tasks: list[str] = Field(description="Task references in run order: bundled ids or task paths")
    model: str
    provider: str = "anthropic"
    base_url: str | None = None
    rounds: int = 4
    backend: str = "cpu"
    strategy: str = "atu"
    k: int = 5
    concurrency: int = 1
    consolidate_every: int = 0
    abstraction: str = "deterministic"
    price: list[float] | None = Field(None, description="USD per million input, output tokens (overrides the table)")
    max_tokens: int = 8192
    db_path: str
    created_at: float = Field(default_factory=time.time)


class TaskRecord(BaseModel):
    """What one task's episode produced; the report is computed from these."""

    model_config = ConfigDict(extra="ignore")

    task: str
    name: str = ""
    operator: str = ""
    family: str = ""
    level: int = 1
    order: int = Field(0, description="Position in the run's task list")
    finished_seq: int = Field(0, description="1-based completion order (the learning curve's x axis)")
    episode_id: int | None = None
    solved: bool = False
    best_status: str | None = None
    statuses: list[str] = Field(default_factory=list, description="Status of each submission, in order")
    attempt_ids: list[int] = Field(default_factory=list)
    rounds_used: int = 0
    first_correct_round: int | None = None
    best_round: int | None = None
    best_attempt_id: int | None = None
    reference_ms: float | None = None
    first_correct_ms: float | None = None
    best_ms: float | None = None
    first_correct_speedup: float | None = None
    best_speedup: float | None = Field(
        None, description="Best kernel vs the reference (reference ms / candidate ms); None where it is unverified"
    )
    best_speedup_unverified: float | None = Field(
        None, description="The best kernel's speedup where it is unverified (not counted in fast_p or the means)"
    )
    shown_ids: list[int] = Field(default_factory=list)
    adopted_ids: list[int] = Field(default_factory=list, description="Adoptions reported to the engine")
    claimed_ids: list[int] = Field(default_factory=list, description="Adoptions the model claimed (all strategies)")
    lesson_item_id: int | None = None
    lesson_merged: bool = False
    reward: float | None = None
    utility_updates: int = 0
    consolidation_id: int | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    llm_calls: int = 0
    cost_usd: float | None = None
    duration_s: float = 0.0
    stop: str = Field("", description="Why the loop ended: done, rounds, no_submission, episode_closed")
    notes: list[str] = Field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def s_self(self) -> float | None:
        """Speedup of the best kernel over the first correct one."""
        if self.first_correct_ms and self.best_ms:
            return self.first_correct_ms / self.best_ms
        return None


class RunState:
    """The state file, loaded and appended to. Appends are serialised and
    fsynced: a crash can lose at most the line being written, and a torn last
    line is skipped on load."""

    def __init__(self, run_dir: Path):
        self.dir = Path(run_dir)
        self.path = self.dir / STATE_FILE
        self._lock = threading.RLock()
        self.finished: dict[str, TaskRecord] = {}
        self.started: dict[str, int | None] = {}  # task -> episode id of an unfinished start
        self.events: list[dict[str, Any]] = []
        self._load()

    @classmethod
    def create(cls, run_dir: Path, settings: RunSettings) -> "RunState":
        run_dir = Path(run_dir)
        if (run_dir / SETTINGS_FILE).exists():
            raise InvalidInput(f"{run_dir} already holds a run; resume it with --run-dir {run_dir} and no other flags")
        run_dir.mkdir(parents=True, exist_ok=True)
        _atomic_write(run_dir / SETTINGS_FILE, settings.model_dump_json(indent=2))
        return cls(run_dir)

    @staticmethod
    def settings(run_dir: Path) -> RunSettings | None:
        path = Path(run_dir) / SETTINGS_FILE
        if not path.is_file():
            return None
        try:
            return RunSettings.model_validate_json(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise InvalidInput(f"{path} is not a SAGE run file ({exc}); pick another --run-dir") from exc

    def _load(self) -> None:
        if not self.path.is_file():
            return
        for n, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                log.warning("%s:%d is torn (interrupted write); skipping it", self.path, n)
                continue
            self._apply(event)

    def _apply(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        kind, task = event.get("event"), event.get("task")
        if not isinstance(task, str):  # every event this state writes names its task
            return
        if kind == "started" and task not in self.finished:
            self.started[task] = event.get("episode_id")
        elif kind == "finished":
            self.finished[task] = TaskRecord.model_validate(event["record"])
            self.started.pop(task, None)

    def append(self, event: dict[str, Any]) -> None:
        event = {"t": round(time.time(), 3), **event}
        line = json.dumps(event, ensure_ascii=False, default=str)
        with self._lock:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            self._apply(event)

    def finish(self, record: TaskRecord) -> TaskRecord:
        """Store a finished task, numbering it in completion order."""
        with self._lock:
            record = record.model_copy(update={"finished_seq": len(self.finished) + 1})
            self.append({"event": "finished", "task": record.task, "record": record.model_dump(mode="json")})
            return record

    def records(self) -> list[TaskRecord]:
        return sorted(self.finished.values(), key=lambda r: (r.finished_seq, r.order))

    def write_text(self, sub: str, name: str, text: str) -> Path:
        folder = self.dir / sub
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / safe_name(name)
        _atomic_write(path, text)
        return path


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "task"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
