"""Evaluations started from the editor: one at a time, so evaluations
never overlap and disturb each other's timings; identical requests (a double
click) share one evaluation; a save can start one (`benchmarkOnSave`).

An evaluation is the engine's background job (`Engine.start_evaluation`,
the path an MCP task or a `get_result` poll takes): its attempt id is
reserved when it starts, it is stored once when it ends, and it can be
cancelled (`sage.cancelBenchmark`, or the progress notification's Cancel).
When it ends its diagnostics are published and lenses refreshed, whether a
request waits for it or a save started it, and a cancelled request does not
throw away a result being computed.

The job is noted in the engine's ledger of running evaluations, and the
server waits for it before it exits: a window reloaded while an evaluation
runs starts a new server, which finds the old one's evaluation of the same
text (`elsewhere`), shows it as running, and waits for its result instead of
evaluating again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Coroutine, Protocol, TypeVar

from lsprotocol import types
from pygls.workspace import TextDocument

from sage_engine.engine import Engine, Job, RunningNote
from sage_engine.errors import Cancelled, InvalidInput, NotFound, SageError
from sage_engine.kernels import Kernel, TaskLink, kernel_at
from sage_engine.models import EvalResult
from sage_mcp.lsp.documents import Documents, language_of
from sage_mcp.lsp.progress import Progress

log = logging.getLogger("sage.lsp")
T = TypeVar("T")
# How often a result another process is computing is looked for.
ELSEWHERE_POLL_S = 0.5


def _settle(done: asyncio.Future) -> None:
    if not done.done():
        done.set_result(None)


async def _finished(job: Job, report: Callable[[float, float | None, str], None]) -> None:
    """Wait for the job to end, passing its progress to `report`."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def changed(j: Job) -> None:
        if j.progress is not None:
            report(*j.progress)
        if j.finished:
            loop.call_soon_threadsafe(_settle, done)

    if job.subscribe(changed) is not None:
        await asyncio.shield(done)


class EvaluationHost(Protocol):
    """What evaluations need of the language server that starts them."""

    documents: Documents
    episodes: dict[str, int]

    @property
    def engine(self) -> Engine: ...

    def summary(self, doc: TextDocument, result: EvalResult | None) -> dict[str, Any]: ...

    def evaluated(self, uri: str, result: EvalResult) -> None: ...

    def work_progress(self, title: str, on_cancel: Callable[[], None] | None = None) -> Progress: ...

    def window_show_message(self, params: types.ShowMessageParams) -> None: ...


@dataclass
class Evaluation:
    """One evaluation in flight, shared by identical requests."""

    content_hash: str
    future: asyncio.Future


class Evaluations:
    def __init__(self, ls: EvaluationHost):
        self.ls = ls
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sage-eval")
        self.running: dict[str, Evaluation] = {}  # uri -> evaluation in flight
        self.saved: dict[str, TextDocument] = {}  # uri -> saved text waiting for its benchmark
        self._save_loops: dict[str, asyncio.Task] = {}
        self._tasks: set[asyncio.Task] = set()
        self.jobs: dict[str, Job] = {}  # uri -> the engine's job evaluating it
        self._cancel_before_start: set[str] = set()  # uris cancelled while waiting for their turn
        self._turn: asyncio.Lock | None = None
        self._closed = False

    async def in_worker(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.worker, functools.partial(fn, *args, **kwargs))

    def busy(self, uri: str) -> bool:
        """An evaluation of this document runs or waits for its turn."""
        return uri in self.running or uri in self.saved

    def elsewhere(self, doc: TextDocument) -> RunningNote | None:
        """The evaluation of this document's text that another process on
        this machine runs (a server before the window reloaded), if any."""
        path = self.ls.documents.path_of(doc)
        if path is None or language_of(doc) != "python":
            return None
        digest = self.ls.documents.analysis(doc).digest
        return next((n for n in self.ls.engine.evaluations_elsewhere() if n.candidate_path == path and n.candidate_hash == digest), None)

    def cancel(self, doc: TextDocument) -> dict[str, Any]:
        """Cancel the evaluation of this document running here or in another process."""
        engine = self.ls.engine
        job = self.jobs.get(doc.uri)
        other = self.elsewhere(doc) if job is None else None
        attempt = job.attempt_id if job is not None else (other.attempt_id if other is not None else None)
        if attempt is None:
            if doc.uri in self.running:  # waiting for its turn, or for its attempt id: it will not start
                self._cancel_before_start.add(doc.uri)
                return {"cancelled": True, "attempt_id": None, "message": f"cancelling the benchmark of {self.ls.documents.name_of(doc)}"}
            return {"cancelled": False, "message": f"{self.ls.documents.name_of(doc)} is not being benchmarked"}
        cancelled = engine.cancel_evaluation(int(attempt))
        return {
            "cancelled": cancelled,
            "attempt_id": attempt,
            "message": f"cancelling the benchmark of {self.ls.documents.name_of(doc)}"
            if cancelled
            else "the benchmark had already finished; its result stands",
        }

    def close(self, on_worker: Callable[[], None] | None) -> None:
        """Stop waiting for evaluations; `on_worker` runs after the one in
        flight has been stored (the process exits only then: a window reload
        does not lose it, and its new server shows it)."""
        for task in [*self._save_loops.values(), *self._tasks]:
            task.cancel()
        if self._closed:  # the server closes at shutdown and again when its loop ends
            return
        self._closed = True
        jobs = list(self.jobs.values())

        def after_jobs() -> None:
            for job in jobs:
                job.wait()
            if on_worker is not None:
                on_worker()

        self.worker.submit(after_jobs)
        self.worker.shutdown(wait=False)

    # ---------------------------------------------------------------- start

    def check(self, doc: TextDocument) -> TaskLink:
        """The document's task, or why it cannot be benchmarked."""
        if language_of(doc) != "python":
            raise InvalidInput("SAGE evaluates Python candidate modules (class ModelNew); benchmark the .py file that builds this kernel")
        analysis = self.ls.documents.analysis(doc)
        if analysis.too_large:
            limit = self.ls.engine.config.max_candidate_chars
            raise InvalidInput(
                f"{self.ls.documents.name_of(doc)} has {analysis.chars:,} characters; SAGE evaluates candidates of "
                f"up to {limit:,} (SAGE_MAX_CANDIDATE_CHARS)"
            )
        return self.ls.documents.require_task(doc)

    def start(self, doc: TextDocument, kernel: Kernel | None) -> asyncio.Future:
        """Start evaluating the document's text now (or join the evaluation of
        the same text already in flight); the future holds the EvalResult."""
        link = self.check(doc)
        digest = self.ls.documents.analysis(doc).digest
        running = self.running.get(doc.uri)
        if running is not None and running.content_hash == digest:
            return running.future
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.running[doc.uri] = Evaluation(digest, future)
        path = self.ls.documents.path_of(doc)
        other = self.elsewhere(doc)
        if other is not None:  # the same text, evaluated by a server before a reload: its result, not another run
            work = self._await_elsewhere(other, path or doc.uri)
        else:
            work = self._evaluate(doc.uri, doc.source, link, path, kernel)
        task = loop.create_task(self._run(doc.uri, work, future))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return future

    async def benchmark(self, doc: TextDocument, line: int | None) -> dict[str, Any]:
        """Evaluate the document (named after the kernel at `line`, if any) and summarise the result."""
        kernel = kernel_at(list(self.ls.documents.analysis(doc).kernels), line) if line is not None else None
        # Shielded: a cancelled request leaves the evaluation to finish and be shown.
        result = await asyncio.shield(self.start(doc, kernel))
        return self.ls.summary(self.ls.documents.get(doc.uri), result)

    async def _run(self, uri: str, work: Coroutine[Any, Any, EvalResult], future: asyncio.Future) -> None:
        try:
            result = await work
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            # The request waiting for it answers with the error; a save logs it.
            future.set_exception(exc)
            future.exception()  # retrieved: a failure nobody waited for is not "never retrieved"
            return
        finally:
            if self.running.get(uri) is not None and self.running[uri].future is future:
                del self.running[uri]
                self._cancel_before_start.discard(uri)
        future.set_result(result)
        self.ls.evaluated(uri, result)

    async def _evaluate(self, uri: str, text: str, link: TaskLink, path: str | None, kernel: Kernel | None) -> EvalResult:
        name = Path(path).name if path else uri
        what = f"{kernel.name} in {name}" if kernel and kernel.kind != "model" else name
        engine = self.ls.engine
        episode = self.ls.episodes.get(uri)
        if episode is not None and engine.get_episode(episode).status != "open":
            # Closed elsewhere (idle timeout, adoption from another client):
            # the evaluation still counts, just outside it.
            self.ls.episodes.pop(uri, None)
            episode = None
        if self._turn is None:
            self._turn = asyncio.Lock()
        async with self._turn:  # one at a time: evaluations side by side disturb each other's timings
            job = await self.in_worker(engine.start_evaluation, text, link.task, candidate_path=path, episode_id=episode)
            self.jobs[uri] = job
            if uri in self._cancel_before_start:
                self._cancel_before_start.discard(uri)
                job.cancel.set()
            try:
                async with self.ls.work_progress(f"SAGE: benchmarking {what}", on_cancel=job.cancel.set) as report:
                    await _finished(job, report)
            finally:
                if self.jobs.get(uri) is job:
                    del self.jobs[uri]
        return job.outcome()

    async def _await_elsewhere(self, note: RunningNote, name: str) -> EvalResult:
        """The result of an evaluation another process runs: read from the
        memory once stored; Cancelled when that process ended without storing it."""
        engine, attempt_id = self.ls.engine, note.attempt_id
        title = f"SAGE: benchmarking {Path(name).name} (started before the window reloaded)"
        async with self.ls.work_progress(title, on_cancel=lambda: engine.ledger.request_cancel(attempt_id)) as report:
            while True:
                try:
                    return await self.in_worker(engine.get_attempt, attempt_id)
                except NotFound:
                    pass
                now = await self.in_worker(engine.ledger.get, attempt_id)
                if now is None:  # ended: stored just now, or cancelled, or its process stopped
                    try:
                        return await self.in_worker(engine.get_attempt, attempt_id)
                    except NotFound:
                        raise Cancelled(
                            f"the benchmark of {Path(name).name} started before the window reloaded ended without a result "
                            "(cancelled, or its server was stopped); benchmark it again"
                        ) from None
                if now.progress:
                    report(0, None, now.progress)
                await asyncio.sleep(ELSEWHERE_POLL_S)

    # ----------------------------------------------------------------- save

    def on_save(self, doc: TextDocument) -> bool:
        """Benchmark the saved text; True when an evaluation started or was
        queued. While one runs, later saves collapse into one evaluation of
        the latest saved text, after it."""
        try:
            self.check(doc)
        except SageError as exc:
            # A save is not a request: say why nothing runs, without a popup.
            log.info("not benchmarking %s on save: %s", doc.uri, exc)
            return False
        if not self.ls.documents.analysis(doc).kernels:
            return False
        # A snapshot: edits typed after the save are not part of this evaluation.
        snapshot = TextDocument(doc.uri, doc.source, version=doc.version, language_id=doc.language_id)
        if doc.uri in self._save_loops:
            self.saved[doc.uri] = snapshot
        else:
            # Started here, not in the task: the next message already sees it running.
            first = self.start(snapshot, None)
            self._save_loops[doc.uri] = asyncio.get_running_loop().create_task(self._benchmark_saved(snapshot, first))
        return True

    async def _benchmark_saved(self, snapshot: TextDocument, first: asyncio.Future) -> None:
        uri = snapshot.uri
        try:
            running: asyncio.Future | None = first
            while running is not None:
                try:
                    await asyncio.shield(running)
                except SageError as exc:
                    self.ls.window_show_message(
                        types.ShowMessageParams(
                            type=types.MessageType.Warning,
                            message=f"SAGE: benchmark on save of {self.ls.documents.name_of(snapshot)}: {exc}",
                        )
                    )
                except Exception:
                    log.exception("benchmark on save of %s failed", uri)  # the next save tries again
                waiting = self.saved.pop(uri, None)
                if waiting is None:
                    break
                snapshot = waiting
                running = self._start_saved(snapshot)
        finally:
            self._save_loops.pop(uri, None)

    def _start_saved(self, snapshot: TextDocument) -> asyncio.Future:
        try:
            return self.start(snapshot, None)
        except SageError as exc:  # the task header went away between save and turn
            failed = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            return failed
