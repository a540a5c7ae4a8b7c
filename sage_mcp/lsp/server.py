"""The language server's state and behaviour: one Engine, the open
documents' kernels, tasks and results, settings, and the evaluations. The
protocol handlers in `sage_mcp.lsp.handlers` stay thin and call into this class.

Every request reads what it shows through two caches (documents.py): kernels
per document version, and stored results per path until the memory's change
stamp moves. So a lens costs one small query when nothing changed, a large
file is analysed once per edit, and the idle check for results stored by
other processes (an agent over MCP, the CLI) costs one query per poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any, Callable, Iterator

from lsprotocol import types
from pygls.exceptions import JsonRpcRequestCancelled
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.errors import SageError
from sage_engine.kernels import kernel_at
from sage_engine.models import EvalResult
from sage_mcp.lsp import views
from sage_mcp.lsp.actions import MemoryActions
from sage_mcp.lsp.documents import Analysis, Documents, language_of
from sage_mcp.lsp.evaluations import Evaluations
from sage_mcp.lsp.progress import Progress
from sage_mcp.lsp.settings import Settings

log = logging.getLogger("sage.lsp")

VERSION = "0.1.0"
# How long shutdown waits for the commands it cancelled to answer; each
# answers at its next await, and a client waits a few seconds for shutdown.
CANCEL_S = 2


class Commands:
    """The command requests this server is answering, so that shutdown
    answers each one as cancelled itself. Left to pygls 2.1, shutdown cancels
    them while iterating the table each cancellation removes its request
    from ("dictionary changed size during iteration"), and the shutdown
    request fails."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task] = set()
        self._cancelled: set[asyncio.Task] = set()

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """Around one command's handler: a cancellation by `cancel_all`
        becomes the request's RequestCancelled error, so the client is
        answered (a bare CancelledError would leave the request open)."""
        task = asyncio.current_task()
        if task is None:  # not run as a task: nothing for shutdown to cancel
            yield
            return
        self._running.add(task)
        try:
            yield
        except asyncio.CancelledError:
            if task not in self._cancelled:
                raise
            raise JsonRpcRequestCancelled(message="SAGE is shutting down") from None
        finally:
            self._running.discard(task)
            self._cancelled.discard(task)

    async def cancel_all(self, timeout: float) -> None:
        """Cancel every command still running and wait until each has answered."""
        running = list(self._running)
        for task in running:
            self._cancelled.add(task)
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=timeout)


class SageLanguageServer(LanguageServer):
    """Owns the Engine (opened once, on first use after `initialize`, so the
    workspace folders can be allowed as task paths) and per-document state."""

    def __init__(self) -> None:
        super().__init__("sage-lsp", VERSION)
        self.db_path: str | None = None
        self.backend: str | None = None
        self.poll_seconds = 3.0
        self.settings = Settings(self)
        self._engine: Engine | None = None
        self.documents = Documents(lambda: self.engine, lambda: self.workspace)
        self.evaluations = Evaluations(self)
        self.actions = MemoryActions(self)
        self.commands = Commands()
        self.episodes: dict[str, int] = {}  # uri -> episode opened by "Retrieve rules"
        self.attempts: dict[str, EvalResult] = {}  # uri -> last evaluation this server ran
        self.seen_attempts: dict[str, int | None] = {}  # uri -> attempt shown in lenses
        self._watched_stamp: int | None = None
        self._told_too_large: set[str] = set()
        self._watcher: asyncio.Task | None = None

    # ------------------------------------------------------------------ engine

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            config = Config.from_env(db_path=self.db_path, backend=self.backend)
            roots = [r for r in config.candidate_roots.split(os.pathsep) if r]
            roots += [to_fs_path(f.uri) or "" for f in self.workspace.folders.values()]
            if self.workspace.root_path:
                roots.append(self.workspace.root_path)
            config = config.replace(candidate_roots=os.pathsep.join(dict.fromkeys(r for r in roots if r)))
            log.info("opening memory %s (backend %s)", config.db_path, config.backend)
            self._engine = Engine(config)
        return self._engine

    async def stop(self) -> None:
        """At shutdown: every command still running is answered as cancelled
        (an evaluation in flight goes on to be stored), then the server closes."""
        await self.commands.cancel_all(CANCEL_S)
        self.close()

    def close(self) -> None:
        """Returns at once: the engine is closed on the worker thread, after
        any evaluation in flight (closing the harness waits for it), so a
        shutdown request is answered before the client gives up on it."""
        if self._watcher is not None:
            self._watcher.cancel()
        self._watcher = None
        self.settings.close()
        engine, self._engine = self._engine, None
        if engine is None:  # never opened, or closed already
            self.actions.worker.shutdown(wait=False)
            self.evaluations.close(None)
            return
        self.evaluations.close(self.actions.closer(engine))

    def work_progress(self, title: str, on_cancel: Callable[[], None] | None = None) -> Progress:
        """Work-done progress for a long request (pygls's own `progress` sends a bare $/progress)."""
        return Progress(self, title, on_cancel)

    # ------------------------------------------------------------- publishing

    def publish(self, doc: TextDocument, result: EvalResult | None) -> None:
        kernels = self.documents.kernels(doc)
        diagnostics = views.to_lsp_diagnostics(result, kernels, len(doc.lines), doc.uri) if result else []
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=doc.uri, diagnostics=diagnostics, version=doc.version))

    def refresh_lenses(self) -> None:
        """Ask the client to request lenses again, when it can be asked; any
        other client sees the change on its next lens request."""
        caps = self.client_capabilities.workspace
        if caps and caps.code_lens and caps.code_lens.refresh_support:
            self.workspace_code_lens_refresh(None)

    def evaluated(self, uri: str, result: EvalResult) -> None:
        """An evaluation this server ran has been stored: show it."""
        self.attempts[uri] = result
        self.seen_attempts[uri] = result.attempt_id
        current = self.workspace.text_documents.get(uri)
        if current is not None:
            self.publish(current, result)
        self.refresh_lenses()

    def notice_new_results(self) -> None:
        """Pick up evaluations stored by other processes (an agent over MCP,
        the CLI) for open documents: new diagnostics, fresh lenses. Reads
        nothing but the change stamp while nothing changed."""
        stamp = self.documents.results.check()
        if stamp == self._watched_stamp:
            return
        self._watched_stamp = stamp
        changed = False
        for uri, doc in list(self.workspace.text_documents.items()):
            if not self.documents.analysis(doc).kernels:
                continue
            result = self.documents.last_result(doc)
            attempt = result.attempt_id if result else None
            if self.seen_attempts.get(uri, attempt) != attempt and result is not None:
                changed = True
                if not self.documents.is_stale(doc, result):
                    self.publish(doc, result)
            self.seen_attempts[uri] = attempt
        if changed:
            self.refresh_lenses()

    def start_watching(self) -> None:
        self._watcher = asyncio.get_running_loop().create_task(self.watch())

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_seconds)
            try:
                self.notice_new_results()
            except SageError as exc:
                log.warning("could not check for new results: %s", exc)

    # ------------------------------------------------------- what is shown

    def summary(self, doc: TextDocument, result: EvalResult | None) -> dict[str, Any]:
        link = self.documents.task_of(doc)
        other = self.evaluations.elsewhere(doc)
        # Another process's evaluation counts as running until its result is the one shown (it is stored before its note goes).
        running = self.evaluations.busy(doc.uri) or (other is not None and (result is None or result.attempt_id != other.attempt_id))
        if result is None:
            return {
                "uri": doc.uri,
                "task": link.task if link else None,
                "summary": "not evaluated yet",
                "stale": False,
                "running": running,
                "result": None,
            }
        stale = self.documents.is_stale(doc, result)
        text = views.result_summary(result, stale=stale, adopted=self.documents.results.adopted_count(result), created_at=result.created_at)
        return {
            "uri": doc.uri,
            "task": link.task if link else result.task,
            "summary": text,
            "stale": stale,
            "running": running,
            "result": result.model_dump(mode="json"),
        }

    def stored_summary(self, doc: TextDocument) -> dict[str, Any]:
        self.documents.results.check()
        return self.summary(doc, self.documents.last_result(doc))

    def roofline(self, doc: TextDocument) -> str | None:
        """The last result's roofline as inline SVG; None where it was not profiled."""
        result = self.documents.last_result(doc)
        return self.engine.roofline_svg(result, standalone=False) if result and result.profile else None

    def lenses(self, doc: TextDocument) -> list[types.CodeLens]:
        """The last result over each kernel, a "benchmark" lens before any
        result, "Set task…" when there is no task (views.code_lenses)."""
        try:
            found = self.documents.kernels(doc)
            if not found:
                return []
            self.documents.results.check()
            link = self.documents.task_of(doc)
            result = self.documents.last_result(doc)
        except SageError as exc:
            return [views.lens(0, f"SAGE: {exc}", "sage.setTask", [doc.uri])]
        if language_of(doc) != "python" and result is None:
            return []  # C/C++ sources are evaluated through the Python module that builds them
        summary = self.summary(doc, result)["summary"] if result is not None else None
        return views.code_lenses(doc.uri, found, link.task if link else None, summary)

    def code_actions(self, doc: TextDocument, line: int) -> list[types.Command]:
        """The lenses of the kernel at `line` as code actions, for clients
        that show no lenses (helix) or users who prefer the action menu.
        Plain commands: every client runs them the way it runs a lens."""
        kernel = kernel_at(self.documents.kernels(doc), line)
        if kernel is None:
            return []
        return [lens.command for lens in self.lenses(doc) if lens.range.start.line == kernel.start_line and lens.command]

    def hover(self, doc: TextDocument, line: int) -> str | None:
        """Markdown for a kernel's class/def lines: its last result (the whole
        error when it failed), resident rules and the top items for its task
        (search_items: hovering opens no episode)."""
        try:
            kernel = next((k for k in self.documents.kernels(doc) if k.start_line <= line <= k.line), None)
            if kernel is None:
                return None
            self.documents.results.check()
            link = self.documents.task_of(doc)
            result = self.documents.last_result(doc)
            rules = self.engine.resident_rules()
            items = self.engine.search_items(self.task_query(link.task), k=5) if link else []
        except SageError as exc:
            return f"**SAGE**: {exc}"
        resident = {r.id for r in rules}
        last = (self.summary(doc, result)["summary"], result) if result is not None else None
        return views.hover_markdown(kernel, link.task if link else None, rules, [i for i in items if i.id not in resident], last)

    def task_query(self, task: str) -> str:
        try:
            t = self.engine.get_task(task)
        except SageError:
            return task  # free text or a task that does not load: search by its name
        return " ".join(filter(None, [t.name, t.operator, t.family, t.description]))

    # ---------------------------------------------------------- open and save

    def on_open(self, doc: TextDocument) -> None:
        """Show the stored result's diagnostics when the file is unchanged since it was evaluated."""
        try:
            analysis = self.documents.analysis(doc)
            if analysis.too_large:
                self._tell_too_large(doc, analysis)
            if not analysis.kernels:
                return
            self.documents.results.check()
            result = self.documents.last_result(doc)
        except SageError as exc:
            log.warning("no last result for %s: %s", doc.uri, exc)
            return
        self.seen_attempts[doc.uri] = result.attempt_id if result else None
        if result is not None and not self.documents.is_stale(doc, result):
            self.publish(doc, result)

    def on_close(self, uri: str) -> None:
        self.seen_attempts.pop(uri, None)
        self.documents.cache.forget(uri)
        self._told_too_large.discard(uri)

    def on_save(self, doc: TextDocument) -> None:
        """The saved text may be what an agent evaluated from disk: show that
        result; then benchmark it when `benchmarkOnSave` is on."""
        self.on_open(doc)
        if self.settings.current.benchmark_on_save:
            self.evaluations.on_save(doc)

    def _tell_too_large(self, doc: TextDocument, analysis: Analysis) -> None:
        if doc.uri in self._told_too_large or language_of(doc) != "python":
            return
        self._told_too_large.add(doc.uri)
        limit = self.engine.config.max_candidate_chars
        self.window_log_message(
            types.LogMessageParams(
                type=types.MessageType.Info,
                message=f"SAGE: {self.documents.name_of(doc)} has {analysis.chars:,} characters, over the {limit:,}-character "
                "candidate limit (SAGE_MAX_CANDIDATE_CHARS): no lenses, hover or benchmark for it",
            )
        )
