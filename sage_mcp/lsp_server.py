"""The language server's state and behaviour: one Engine, the open
documents' kernels, tasks and results, settings, and the evaluations. The
protocol handlers in `sage_mcp.lsp` stay thin and call into this class.

Every request reads what it shows through two caches (lsp_documents): kernels
per document version, and stored results per path until the memory's change
stamp moves. So a lens costs one small query when nothing changed, a large
file is analysed once per edit, and the idle check for results stored by
other processes (an agent over MCP, the CLI) costs one query per poll.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, TypeVar

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from sage_engine import kernels as kernel_finder
from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.errors import InvalidInput, SageError
from sage_engine.kernels import Kernel, TaskLink
from sage_engine.models import EvalResult
from sage_mcp import lsp_views as views
from sage_mcp.lsp_actions import MemoryActions
from sage_mcp.lsp_documents import Analysis, DocumentCache, ResultCache, language_of
from sage_mcp.lsp_evaluations import Evaluations
from sage_mcp.lsp_progress import Progress
from sage_mcp.lsp_settings import SECTION, EditorSettings

log = logging.getLogger("sage.lsp")

VERSION = "0.1.0"
T = TypeVar("T")
# How long to wait for a client's answer to a request it should answer at once
# (work-done progress, configuration) before going on without it.
CLIENT_REPLY_S = 10


class SageLanguageServer(MemoryActions, LanguageServer):
    """Owns the Engine (opened once, on first use after `initialize`, so the
    workspace folders can be allowed as task paths) and per-document state."""

    def __init__(self) -> None:
        super().__init__("sage-lsp", VERSION)
        self.db_path: str | None = None
        self.backend: str | None = None
        self.poll_seconds = 3.0
        self.settings = EditorSettings()
        self._engine: Engine | None = None
        self.documents = DocumentCache()
        self.results = ResultCache(lambda: self.engine)
        self.evaluations = Evaluations(self)
        self.memory_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sage-memory")
        self.episodes: dict[str, int] = {}  # uri -> episode opened by "Retrieve rules"
        self.attempts: dict[str, EvalResult] = {}  # uri -> last evaluation this server ran
        self.seen_attempts: dict[str, int | None] = {}  # uri -> attempt shown in lenses
        self._watched_stamp: int | None = None
        self._told_too_large: set[str] = set()
        self._watcher: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()

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

    def cancel_requests(self) -> None:
        """Cancel every request still running except the current one.

        pygls 2.1 cancels them itself on shutdown, but while iterating the
        dict that each cancellation removes itself from ("dictionary changed
        size during iteration"); cancelled first, they are skipped there."""
        current = self.protocol.msg_id
        for msg_id, future in list(self.protocol._request_futures.items()):
            if msg_id != current and not future.done():
                future.cancel()

    def close(self) -> None:
        """Returns at once: the engine is closed on the worker thread, after
        any evaluation in flight (closing the harness waits for it), so a
        shutdown request is answered before the client gives up on it."""
        for task in [self._watcher, *self._background]:
            if task is not None:
                task.cancel()
        self._watcher = None
        engine, self._engine = self._engine, None
        memory = self.memory_worker
        if engine is None:  # never opened, or closed already
            memory.shutdown(wait=False)
            self.evaluations.close(None)
            return

        def after_work() -> None:
            memory.shutdown(wait=True)  # a memory write in flight finishes before the engine closes
            engine.close()

        self.evaluations.close(after_work)

    async def in_worker(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self.evaluations.in_worker(fn, *args, **kwargs)

    def progress(self, title: str) -> Progress:
        return Progress(self, title)

    # ---------------------------------------------------------------- settings

    def apply_settings(self, raw: Any) -> None:
        self.settings, problems = self.settings.updated(raw)
        for problem in problems:
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"SAGE: {problem}"))

    async def pull_settings(self) -> None:
        """Ask for the `sage` section when the client answers `workspace/configuration`."""
        caps = self.client_capabilities.workspace
        if not (caps and caps.configuration):
            return
        try:
            values = await asyncio.wait_for(self.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)])), CLIENT_REPLY_S)
        except (asyncio.TimeoutError, JsonRpcException) as exc:
            log.info("client did not send settings: %s", exc)
            return
        if values:
            self.apply_settings(values[0])

    def pull_settings_soon(self) -> None:
        task = asyncio.get_running_loop().create_task(self.pull_settings())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --------------------------------------------------------------- documents

    def document(self, uri: str) -> TextDocument:
        if not isinstance(uri, str) or not uri:
            raise InvalidInput("pass the document URI as the first argument")
        return self.workspace.get_text_document(uri)

    @staticmethod
    def path_of(doc: TextDocument) -> str | None:
        path = to_fs_path(doc.uri) if doc.uri.startswith("file:") else None
        return str(Path(path).resolve()) if path else None

    def name_of(self, doc: TextDocument) -> str:
        return Path(self.path_of(doc) or doc.uri).name

    def analysis(self, doc: TextDocument) -> Analysis:
        return self.documents.analyse(doc, self.engine.config.max_candidate_chars)

    def kernels_in(self, doc: TextDocument) -> list[Kernel]:
        return list(self.analysis(doc).kernels)

    def task_of(self, doc: TextDocument) -> TaskLink | None:
        path = self.path_of(doc)
        if path is None:
            found = kernel_finder.header_task(doc.source)
            return TaskLink(found[0], "header", doc.uri, found[1]) if found else None
        root = self.workspace.root_path
        return kernel_finder.find_task(Path(path), doc.source, stop_at=Path(root) if root else None)

    def require_task(self, doc: TextDocument) -> TaskLink:
        link = self.task_of(doc)
        if link is None:
            raise InvalidInput(
                f"no task set for {self.name_of(doc)}: add '# sage: task=<task id or path>' "
                "at the top, map it in .sage/tasks.json, or run 'SAGE: Set task for this file'"
            )
        return link

    def last_result(self, doc: TextDocument) -> EvalResult | None:
        """The newest stored result for the document's file, as of the last `results.check()`."""
        path = self.path_of(doc)
        return self.results.last_result(path) if path else None

    def is_stale(self, doc: TextDocument, result: EvalResult) -> bool:
        return result.candidate_hash != self.analysis(doc).digest

    def summary(self, doc: TextDocument, result: EvalResult | None) -> dict[str, Any]:
        link = self.task_of(doc)
        running = self.evaluations.busy(doc.uri)
        if result is None:
            return {"uri": doc.uri, "task": link.task if link else None, "summary": "not evaluated yet",
                    "stale": False, "running": running, "result": None}
        stale = self.is_stale(doc, result)
        text = views.result_summary(result, stale=stale, adopted=self.results.adopted_count(result),
                                    created_at=result.created_at)
        return {"uri": doc.uri, "task": link.task if link else result.task, "summary": text, "stale": stale,
                "running": running, "result": result.model_dump(mode="json")}

    def roofline(self, doc: TextDocument) -> str | None:
        result = self.last_result(doc)
        return self.engine.roofline_svg(result, standalone=False) if result and result.profile else None

    def stored_summary(self, doc: TextDocument) -> dict[str, Any]:
        self.results.check()
        return self.summary(doc, self.last_result(doc))

    # ------------------------------------------------------------- publishing

    def publish(self, doc: TextDocument, result: EvalResult | None) -> None:
        diagnostics = views.to_lsp_diagnostics(result, self.kernels_in(doc), len(doc.lines), doc.uri) if result else []
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=doc.uri, diagnostics=diagnostics, version=doc.version)
        )

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
        stamp = self.results.check()
        if stamp == self._watched_stamp:
            return
        self._watched_stamp = stamp
        changed = False
        for uri, doc in list(self.workspace.text_documents.items()):
            if not self.analysis(doc).kernels:
                continue
            result = self.last_result(doc)
            attempt = result.attempt_id if result else None
            if self.seen_attempts.get(uri, attempt) != attempt and result is not None:
                changed = True
                if not self.is_stale(doc, result):
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

    def lenses(self, doc: TextDocument) -> list[types.CodeLens]:
        """The last result over each kernel (clicking benchmarks again), a
        "benchmark" lens before any result, "Set task…" when there is no task."""
        try:
            found = self.kernels_in(doc)
            if not found:
                return []
            self.results.check()
            link = self.task_of(doc)
            result = self.last_result(doc)
        except SageError as exc:
            return [_lens(0, f"SAGE: {exc}", "sage.setTask", [doc.uri])]
        if language_of(doc) != "python" and result is None:
            return []  # C/C++ sources are evaluated through the Python module that builds them
        if result is not None:
            title = "SAGE: " + self.summary(doc, result)["summary"]
        elif link is not None:
            title = f"SAGE: benchmark vs {Path(link.task).name if os.sep in link.task else link.task}"
        else:
            title = ""  # no result and no task: only "Set task…"
        lenses = []
        for n, kernel in enumerate(found):
            if result is not None or link is not None:
                lenses.append(_lens(kernel.start_line, title, "sage.benchmark", [doc.uri, kernel.line]))
            if link is None and n == 0:
                lenses.append(_lens(kernel.start_line, "SAGE: Set task…", "sage.setTask", [doc.uri]))
        return lenses

    def code_actions(self, doc: TextDocument, line: int) -> list[types.Command]:
        """The lenses of the kernel at `line` as code actions, for clients
        that show no lenses (helix) or users who prefer the action menu.
        Plain commands: every client runs them the way it runs a lens."""
        kernel = kernel_finder.kernel_at(self.kernels_in(doc), line)
        if kernel is None:
            return []
        return [lens.command for lens in self.lenses(doc) if lens.range.start.line == kernel.start_line and lens.command]

    def hover(self, doc: TextDocument, line: int) -> str | None:
        """Markdown for a kernel's class/def lines: its last result (the whole
        error when it failed), resident rules and the top items for its task
        (search_items: hovering opens no episode)."""
        try:
            kernel = next((k for k in self.kernels_in(doc) if k.start_line <= line <= k.line), None)
            if kernel is None:
                return None
            self.results.check()
            link = self.task_of(doc)
            result = self.last_result(doc)
            rules = self.engine.resident_rules()
            items = self.engine.search_items(self.task_query(link.task), k=5) if link else []
        except SageError as exc:
            return f"**SAGE**: {exc}"
        resident = {r.id for r in rules}
        last = (self.summary(doc, result)["summary"], result) if result is not None else None
        return views.hover_markdown(kernel, link.task if link else None, rules,
                                    [i for i in items if i.id not in resident], last)

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
            analysis = self.analysis(doc)
            if analysis.too_large:
                self._tell_too_large(doc, analysis)
            if not analysis.kernels:
                return
            self.results.check()
            result = self.last_result(doc)
        except SageError as exc:
            log.warning("no last result for %s: %s", doc.uri, exc)
            return
        self.seen_attempts[doc.uri] = result.attempt_id if result else None
        if result is not None and not self.is_stale(doc, result):
            self.publish(doc, result)

    def on_close(self, uri: str) -> None:
        self.seen_attempts.pop(uri, None)
        self.documents.forget(uri)
        self._told_too_large.discard(uri)

    def on_save(self, doc: TextDocument) -> None:
        """The saved text may be what an agent evaluated from disk: show that
        result; then benchmark it when `benchmarkOnSave` is on."""
        self.on_open(doc)
        if self.settings.benchmark_on_save:
            self.evaluations.on_save(doc)

    def _tell_too_large(self, doc: TextDocument, analysis: Analysis) -> None:
        if doc.uri in self._told_too_large or language_of(doc) != "python":
            return
        self._told_too_large.add(doc.uri)
        limit = self.engine.config.max_candidate_chars
        self.window_log_message(types.LogMessageParams(
            type=types.MessageType.Info,
            message=f"SAGE: {self.name_of(doc)} has {analysis.chars:,} characters, over the {limit:,}-character "
                    "candidate limit (SAGE_MAX_CANDIDATE_CHARS): no lenses, hover or benchmark for it"))


def _lens(line: int, title: str, command: str, arguments: list[Any]) -> types.CodeLens:
    at = types.Range(start=types.Position(line=line, character=0), end=types.Position(line=line, character=0))
    return types.CodeLens(range=at, command=types.Command(title=title, command=command, arguments=arguments))
