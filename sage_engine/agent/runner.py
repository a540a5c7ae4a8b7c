"""Running a suite: task selection, bounded concurrency, resume, progress,
and the report at the end.

Tasks run in a thread pool over one shared Engine (its store serialises
writes; the harness serialises evaluations so timings do not compete for
cores), so with `concurrency > 1` model calls overlap with evaluations.
A provider error or Ctrl-C stops the run: no new task starts, running tasks
stop before their next model call, and every finished task is already in the
state file, so the same command with the same `--run-dir` resumes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from sage_engine.agent.costs import Price
from sage_engine.agent.llm import LLM
from sage_engine.agent.loop import AgentSettings, Interrupted, solve_task
from sage_engine.agent.state import RunSettings, RunState, TaskRecord
from sage_engine.agent.strategies import get_strategy
from sage_engine.errors import BackendUnavailable, InvalidInput, NotFound

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from sage_engine.engine import Engine

log = logging.getLogger(__name__)


def select_tasks(
    engine: "Engine", suite: str, *, level: int | None = None, family: str | None = None, tasks: Sequence[str] = ()
) -> list[str]:
    """Task references in a stable order. `suite` is `bundled` or a directory
    of task folders; `tasks` keeps only those ids (in the order given)."""
    if suite == "bundled":
        found = {t.id: t.id for t in engine.list_tasks(level=level, family=family)}
    else:
        from sage_engine.evaluation.host.tasks import list_suite

        root = Path(suite).expanduser()
        if not root.is_dir():
            raise InvalidInput(f"--suite must be 'bundled' or a directory of task folders; {suite!r} is neither")
        found = {t.id: str(t.reference_path.parent) for t in list_suite(root, level=level, family=family) if t.reference_path is not None}
    if tasks:
        missing = [t for t in tasks if t not in found]
        if missing:
            raise NotFound(f"tasks {missing} are not in suite {suite!r} with these filters; it has: {', '.join(sorted(found)) or 'none'}")
        refs = [found[t] for t in dict.fromkeys(tasks)]
    else:
        refs = [found[t] for t in sorted(found)]
    if not refs:
        raise InvalidInput(f"suite {suite!r} has no tasks matching level={level} family={family}")
    return refs


def new_settings(**values: Any) -> RunSettings:
    values.setdefault("run_id", time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6])
    return RunSettings(**values)


@dataclass
class RunOutcome:
    records: list[TaskRecord]
    remaining: list[str]
    stopped: str | None
    report: dict[str, Any] | None


class Runner:
    def __init__(
        self,
        engine: "Engine",
        llm: LLM,
        settings: RunSettings,
        state: RunState,
        *,
        console: "Console | None" = None,
        write_report: bool = True,
    ):
        self.engine, self.llm, self.settings, self.state = engine, llm, settings, state
        self.console = console
        self.write_report = write_report
        self.stop = threading.Event()
        strategy = get_strategy(settings.strategy)
        if engine.config.credit_strategy != strategy.credit_strategy:
            raise InvalidInput(
                f"the engine credits with {engine.config.credit_strategy!r} but strategy {strategy.name!r} needs "
                f"{strategy.credit_strategy!r}; build its Config with strategy_config()"
            )
        price = Price(*settings.price) if settings.price else None
        self.agent = AgentSettings(
            strategy=strategy,
            rounds=settings.rounds,
            backend=settings.backend,
            k=settings.k,
            max_tokens=settings.max_tokens,
            price=price,
            client=f"sage-run:{settings.run_id}",
        )

    def remaining(self) -> list[str]:
        done = set(self.state.finished)
        out = []
        for ref in self.settings.tasks:
            tid = self.engine.load_task(ref).id
            if tid not in done:
                out.append(ref)
        return out

    def run(self) -> RunOutcome:
        if self.settings.rounds < 1:
            raise InvalidInput("--rounds must be at least 1")
        self._preflight()
        todo = self.remaining()
        order = {ref: i for i, ref in enumerate(self.settings.tasks)}
        stopped: str | None = None
        first_error: BaseException | None = None
        progress = _Progress(self.console, len(self.settings.tasks), len(self.settings.tasks) - len(todo))
        try:
            with progress, ThreadPoolExecutor(max_workers=max(1, self.settings.concurrency), thread_name_prefix="sage-task") as pool:
                futures: dict[Future, str] = {pool.submit(self._one, ref, order[ref], progress): ref for ref in todo}
                try:
                    pending = set(futures)
                    while pending:
                        done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                        for fut in done:
                            if fut.cancelled():
                                continue
                            exc = fut.exception()
                            if exc is not None and not isinstance(exc, Interrupted) and stopped is None:
                                stopped = f"{type(exc).__name__}: {exc}"
                                self._halt(pool, futures)
                except KeyboardInterrupt:
                    stopped = "interrupted (Ctrl-C)"
                    self._halt(pool, futures)
                    wait(set(futures))
                first_error = next(
                    (
                        f.exception()
                        for f in futures
                        if not f.cancelled() and f.exception() is not None and not isinstance(f.exception(), Interrupted)
                    ),
                    None,
                )
        finally:
            if stopped:
                self.state.append({"event": "stopped", "reason": stopped})
        report = None
        if self.write_report and self.state.finished:
            from sage_engine.agent.report import write_report

            report = write_report(self.state.dir)
        outcome = RunOutcome(self.state.records(), self.remaining(), stopped, report)
        if first_error is not None:
            # Provider and backend errors are the caller's to see; the state is saved.
            raise first_error
        return outcome

    def _halt(self, pool: ThreadPoolExecutor, futures: dict[Future, str]) -> None:
        self.stop.set()
        for fut in futures:
            fut.cancel()

    def _preflight(self) -> None:
        """Fail before any model call when the backend cannot evaluate; this
        also builds the shared harness once, outside the worker threads."""
        status = self.engine.harness.backend_status(self.settings.backend)
        if not status.ready:
            raise BackendUnavailable(f"backend {status.name!r} is not ready: {status.reason}. {status.setup}".strip())

    def _one(self, ref: str, order: int, progress: "_Progress") -> TaskRecord:
        if self.stop.is_set():
            raise Interrupted(ref)
        tid = self.engine.load_task(ref).id
        line = progress.start(tid)
        resume = self.state.started.get(tid)
        if tid in self.state.started:
            log.info("resuming %s (episode %s)", tid, resume)
        else:
            self.state.append({"event": "started", "task": tid, "episode_id": None})
        try:
            outcome = solve_task(
                self.engine,
                self.llm,
                ref,
                self.agent,
                order=order,
                resume_episode=resume,
                stop=self.stop,
                events=self._event,
                progress=lambda msg: progress.update(line, f"{tid}: {msg}"),
            )
        except BaseException:
            progress.finish(line, None)
            raise
        if outcome.best_code:
            self.state.write_text("candidates", f"{tid}.py", outcome.best_code)
        self.state.write_text(
            "transcripts", f"{tid}.json", json.dumps({"system": outcome.system, "messages": outcome.messages}, indent=1, ensure_ascii=False)
        )
        record = self.state.finish(outcome.record)
        progress.finish(line, record)
        return record

    def _event(self, event: dict[str, Any]) -> None:
        self.state.append(event)


class _Progress:
    """A rich progress display on stderr: one bar for the run, one line per
    running task. Silent without a console (library use, tests)."""

    def __init__(self, console: "Console | None", total: int, done: int):
        self.console = console
        self._progress: Progress | None = None
        self._overall: TaskID | None = None
        self._lock = threading.Lock()
        if console is not None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=False
            )
            self._overall = self._progress.add_task("tasks", total=total, completed=done)
        self.solved = 0

    def __enter__(self) -> "_Progress":
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def start(self, tid: str) -> Any:
        if self._progress is None:
            return None
        with self._lock:
            return self._progress.add_task(f"{tid}: starting", total=None)

    def update(self, line: Any, text: str) -> None:
        if self._progress is not None and line is not None:
            self._progress.update(line, description=text[:100])

    def finish(self, line: Any, record: TaskRecord | None) -> None:
        if self._progress is None:
            return
        with self._lock:
            if line is not None:
                self._progress.remove_task(line)
            if record is not None:
                self.solved += record.solved
                if self._overall is not None:
                    self._progress.advance(self._overall)
                speed = (
                    f" {record.best_speedup:.2f}x"
                    if record.best_speedup
                    else (f" {record.best_speedup_unverified:.2f}x (unverified)" if record.best_speedup_unverified else "")
                )
                mark = "[green]solved[/green]" if record.solved else f"[red]{record.best_status or 'unsolved'}[/red]"
                self._progress.console.print(
                    f"{record.task}: {mark}{speed} in {record.rounds_used} round(s), "
                    f"{record.tokens} tokens" + (f", ${record.cost_usd:.3f}" if record.cost_usd is not None else "")
                )


def preview_prompts(engine: "Engine", refs: Sequence[str], *, strategy: str, backend: str, rounds: int, k: int) -> str:
    """The system prompt and first user message of each task, exactly as a
    run would send them, without calling a model or writing to the memory:
    retrieval is ranked with `search_items`, which logs nothing (a real run's
    exploration bonus can reorder items slightly)."""
    from sage_engine.agent import prompt
    from sage_engine.services.memory import scored

    with_memory = get_strategy(strategy).retrieve
    parts = [f"===== system prompt =====\n{prompt.system_prompt(backend, rounds, with_memory=with_memory)}"]
    rules = engine.resident_rules() if with_memory else []
    for ref in refs:
        task = engine.load_task(ref)
        items = []
        if with_memory:
            query = " ".join(filter(None, [task.operator, task.family, f"{task.name} {task.description}", backend]))
            resident = {r.id for r in rules}
            items = [i for i in engine.search_items(query, k=k + len(resident), backend=backend) if i.id not in resident][:k]
        shown_rules = [scored(r, i + 1, 1.0, 0.0, r.utility) for i, r in enumerate(rules)]  # resident: always shown
        parts.append(
            f"===== first user message: {task.id} =====\n"
            + prompt.task_message(task, rules=shown_rules, items=items, with_memory=with_memory)
        )
    return "\n\n".join(parts) + "\n"
