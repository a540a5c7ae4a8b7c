"""The language server's state and behaviour: one Engine, the open
documents' kernels, tasks and results, and the evaluation worker. The
protocol handlers in `sage_mcp.lsp` stay thin and call into this class."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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
from sage_engine.errors import InvalidInput, NotFound, SageError
from sage_engine.kernels import Kernel, TaskLink
from sage_engine.models import Adoption, EvalResult, Lesson
from sage_mcp import lsp_views as views

log = logging.getLogger("sage.lsp")

VERSION = "0.1.0"
KERNEL_LANGUAGES = {"python", "cpp", "c"}
T = TypeVar("T")


@dataclass
class Evaluation:
    """One evaluation in flight, shared by identical requests (a double click)."""

    content_hash: str
    future: asyncio.Future


class SageLanguageServer(LanguageServer):
    """Owns the Engine (opened once, on first use after `initialize`, so the
    workspace folders can be allowed as task paths) and per-document state."""

    def __init__(self) -> None:
        super().__init__("sage-lsp", VERSION)
        self.db_path: str | None = None
        self.backend: str | None = None
        self.poll_seconds = 3.0
        self._engine: Engine | None = None
        # One thread: evaluations never overlap, so a timing is not disturbed
        # by another candidate running beside it.
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sage-eval")
        self.running: dict[str, Evaluation] = {}
        self.episodes: dict[str, int] = {}  # uri -> episode opened by "Retrieve rules"
        self.attempts: dict[str, EvalResult] = {}  # uri -> last evaluation this server ran
        self.seen_attempts: dict[str, int | None] = {}  # uri -> attempt shown in lenses
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
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        engine, self._engine = self._engine, None
        if engine is not None:
            self.worker.submit(engine.close)
            self.worker.shutdown(wait=False)

    async def in_worker(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.worker, functools.partial(fn, *args, **kwargs))

    # --------------------------------------------------------------- documents

    def document(self, uri: str) -> TextDocument:
        if not isinstance(uri, str) or not uri:
            raise InvalidInput("pass the document URI as the first argument")
        return self.workspace.get_text_document(uri)

    @staticmethod
    def path_of(doc: TextDocument) -> str | None:
        path = to_fs_path(doc.uri) if doc.uri.startswith("file:") else None
        return str(Path(path).resolve()) if path else None

    @staticmethod
    def language_of(doc: TextDocument) -> str:
        return doc.language_id or ("python" if doc.uri.endswith(".py") else "cpp")

    def kernels_in(self, doc: TextDocument) -> list[Kernel]:
        if doc.language_id and doc.language_id not in KERNEL_LANGUAGES:
            return []
        return kernel_finder.find_kernels(doc.source, self.language_of(doc))

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
                f"no task set for {Path(self.path_of(doc) or doc.uri).name}: add '# sage: task=<task id or path>' "
                "at the top, map it in .sage/tasks.json, or run 'SAGE: Set task for this file'"
            )
        return link

    def last_result(self, doc: TextDocument) -> EvalResult | None:
        path = self.path_of(doc)
        return self.engine.last_result(path) if path else None

    def adopted_count(self, result: EvalResult) -> int:
        if result.episode_id is None or result.attempt_id is None:
            return 0
        try:
            episode = self.engine.get_episode(result.episode_id)
        except NotFound:
            return 0
        return next((len(a.adopted_ids) for a in episode.attempt_list if a.id == result.attempt_id), 0)

    def summary(self, doc: TextDocument, result: EvalResult | None) -> dict[str, Any]:
        link = self.task_of(doc)
        if result is None:
            return {"uri": doc.uri, "task": link.task if link else None, "summary": "not evaluated yet",
                    "stale": False, "result": None}
        stale = views.is_stale(result, doc.source)
        text = views.result_summary(result, stale=stale, adopted=self.adopted_count(result), created_at=result.created_at)
        return {"uri": doc.uri, "task": link.task if link else result.task, "summary": text, "stale": stale,
                "result": result.model_dump(mode="json")}

    # ------------------------------------------------------------- publishing

    def publish(self, doc: TextDocument, result: EvalResult | None) -> None:
        diagnostics = views.to_lsp_diagnostics(result, self.kernels_in(doc), len(doc.lines)) if result else []
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=doc.uri, diagnostics=diagnostics, version=doc.version)
        )

    def refresh_lenses(self) -> None:
        caps = self.client_capabilities.workspace
        if caps and caps.code_lens and caps.code_lens.refresh_support:
            self.workspace_code_lens_refresh(None)

    def notice_new_results(self) -> None:
        """Pick up evaluations stored by other processes (an agent over MCP,
        the CLI) for open documents: new diagnostics, fresh lenses."""
        changed = False
        for uri, doc in list(self.workspace.text_documents.items()):
            if not self.kernels_in(doc):
                continue
            result = self.last_result(doc)
            attempt = result.attempt_id if result else None
            if self.seen_attempts.get(uri, attempt) != attempt and result is not None:
                changed = True
                if not views.is_stale(result, doc.source):
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

    # ----------------------------------------------------------- benchmarking

    async def benchmark(self, doc: TextDocument, kernel: Kernel | None) -> dict[str, Any]:
        if self.language_of(doc) != "python":
            raise InvalidInput(
                "SAGE evaluates Python candidate modules (class ModelNew); benchmark the .py file that builds this kernel"
            )
        link = self.require_task(doc)
        text, path = doc.source, self.path_of(doc)
        digest = views.content_hash(text)
        running = self.running.get(doc.uri)
        if running is not None and running.content_hash == digest:
            result = await asyncio.shield(running.future)
        else:
            future = asyncio.get_running_loop().create_future()
            self.running[doc.uri] = Evaluation(digest, future)
            try:
                result = await self._evaluate(doc, link, text, path, kernel)
                future.set_result(result)
            except asyncio.CancelledError:
                future.cancel()
                raise
            except Exception as exc:
                future.set_exception(exc)
                future.exception()  # mark retrieved: a failure nobody coalesced onto is not "never retrieved"
                raise
            finally:
                if self.running.get(doc.uri) is not None and self.running[doc.uri].future is future:
                    del self.running[doc.uri]
        self.attempts[doc.uri] = result
        self.seen_attempts[doc.uri] = result.attempt_id
        current = self.workspace.get_text_document(doc.uri)
        self.publish(current, result)
        self.refresh_lenses()
        return self.summary(current, result)

    async def _evaluate(self, doc: TextDocument, link: TaskLink, text: str, path: str | None,
                        kernel: Kernel | None) -> EvalResult:
        name = Path(path).name if path else doc.uri
        what = f"{kernel.name} in {name}" if kernel and kernel.kind != "model" else name
        episode = self.episodes.get(doc.uri)
        if episode is not None and self.engine.get_episode(episode).status != "open":
            # Closed elsewhere (idle timeout, adoption from another client):
            # the evaluation still counts, just outside it.
            self.episodes.pop(doc.uri, None)
            episode = None
        async with self.progress(f"SAGE: benchmarking {what}") as report:
            return await self.in_worker(
                self.engine.evaluate, text, link.task, candidate_path=path, progress=report, episode_id=episode
            )

    def progress(self, title: str) -> "_Progress":
        return _Progress(self, title)

    # ------------------------------------------------------- what is shown

    def lenses(self, doc: TextDocument) -> list[types.CodeLens]:
        """The last result over each kernel (clicking benchmarks again), a
        "benchmark" lens before any result, "Set task…" when there is no task."""
        found = self.kernels_in(doc)
        if not found:
            return []
        try:
            link = self.task_of(doc)
            result = self.last_result(doc)
        except SageError as exc:
            return [_lens(found[0].start_line, f"SAGE: {exc}", "sage.setTask", [doc.uri])]
        if self.language_of(doc) != "python" and result is None:
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

    def hover(self, doc: TextDocument, line: int) -> str | None:
        """Markdown for a kernel's class/def lines: resident rules and the top
        items for its task (search_items: hovering opens no episode)."""
        kernel = next((k for k in self.kernels_in(doc) if k.start_line <= line <= k.line), None)
        if kernel is None:
            return None
        try:
            link = self.task_of(doc)
            rules = self.engine.resident_rules()
            items = self.engine.search_items(self.task_query(link.task), k=5) if link else []
        except SageError as exc:
            return f"**SAGE**: {exc}"
        resident = {r.id for r in rules}
        return views.hover_markdown(kernel, link.task if link else None, rules, [i for i in items if i.id not in resident])

    def task_query(self, task: str) -> str:
        try:
            t = self.engine.get_task(task)
        except SageError:
            return task  # free text or a task that does not load: search by its name
        return " ".join(filter(None, [t.name, t.operator, t.family, t.description]))

    def on_open(self, doc: TextDocument) -> None:
        """Show the stored result's diagnostics when the file is unchanged since it was evaluated."""
        if not self.kernels_in(doc):
            return
        try:
            result = self.last_result(doc)
        except SageError as exc:
            log.warning("no last result for %s: %s", doc.uri, exc)
            return
        self.seen_attempts[doc.uri] = result.attempt_id if result else None
        if result is not None and not views.is_stale(result, doc.source):
            self.publish(doc, result)

    # ------------------------------------------------------ memory actions

    def retrieve(self, doc: TextDocument, k: int | None) -> dict[str, Any]:
        link = self.require_task(doc)
        retrieval = self.engine.retrieve(link.task, k=k, client="sage-lsp", backend=self.backend)
        self.episodes[doc.uri] = retrieval.episode_id
        return {"uri": doc.uri, "task": link.task, "retrieval": retrieval.model_dump(mode="json")}

    async def record_adoption(self, uri: str, ids: list[int], episode: int | None,
                              lesson: Lesson | None) -> dict[str, Any]:
        episode = episode or self.episodes.get(uri)
        if episode is None:
            raise InvalidInput("no episode for this file: run 'SAGE: Retrieve rules for this task' first, or pass episode_id")
        last = self.attempts.get(uri)
        # Credit the file's last evaluation only when it ran inside this episode.
        attempt = last.attempt_id if last is not None and last.episode_id == episode else None
        adopted = [Adoption(id=i, evidence=f"adopted in {Path(to_fs_path(uri) or uri).name}") for i in ids]
        report = await self.in_worker(self.engine.record_adoption, episode, adopted, attempt_id=attempt, lesson=lesson)
        if report.closed:
            self.episodes.pop(uri, None)
        self.refresh_lenses()
        return report.model_dump(mode="json")

    async def set_task(self, doc: TextDocument, task: str) -> dict[str, Any]:
        """Write the `sage: task=` header through the editor (so it lands in
        the buffer and undo history), or map the file in .sage/tasks.json when
        the client cannot apply edits."""
        value = task.strip()
        path = self.path_of(doc)
        resolved = kernel_finder.resolve_task_value(value, Path(path).parent) if path else value
        self.engine.get_task(resolved)  # a task that does not load is refused now, not at the first benchmark
        header = kernel_finder.header_line(value, doc.language_id or "python")
        caps = self.client_capabilities.workspace
        if caps and caps.apply_edit:
            existing = kernel_finder.header_task(doc.source)
            line = existing[1] if existing else kernel_finder.header_insert_line(doc.source)
            end = types.Position(line=line + 1 if existing else line, character=0)
            edit = types.TextEdit(range=types.Range(start=types.Position(line=line, character=0), end=end),
                                  new_text=header + "\n")
            applied = await self.workspace_apply_edit_async(
                types.ApplyWorkspaceEditParams(label="Set SAGE task", edit=types.WorkspaceEdit(changes={doc.uri: [edit]}))
            )
            if applied.applied:
                self.refresh_lenses()
                return {"uri": doc.uri, "task": resolved, "via": "header"}
            log.info("client did not apply the header edit (%s); writing .sage/tasks.json", applied.failure_reason)
        if path is None:
            raise InvalidInput("this document is not a file on disk; save it first, then set its task")
        root = Path(self.workspace.root_path or Path(path).parent)
        try:
            relative = Path(path).relative_to(root).as_posix()
        except ValueError:
            root, relative = Path(path).parent, Path(path).name
        project = kernel_finder.write_project_mapping(root, relative, value)
        self.refresh_lenses()
        return {"uri": doc.uri, "task": resolved, "via": "project", "project_file": str(project)}


class _Progress:
    """Work-done progress when the client supports it; a no-op otherwise.
    The callable it yields may be called from the worker thread."""

    def __init__(self, ls: SageLanguageServer, title: str):
        self.ls, self.title = ls, title
        self.token: str | None = None

    async def __aenter__(self) -> Callable[[float, float | None, str], None]:
        window = self.ls.client_capabilities.window
        if window and window.work_done_progress:
            token = f"sage-{uuid.uuid4().hex[:12]}"
            try:
                await asyncio.wait_for(self.ls.work_done_progress.create_async(token), timeout=10)
                self.token = token
                self.ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(title=self.title, percentage=0))
            except (asyncio.TimeoutError, JsonRpcException) as exc:
                log.info("client refused progress: %s", exc)
        loop = asyncio.get_running_loop()

        def report(done: float, total: float | None, message: str) -> None:
            token = self.token
            if token is None or loop.is_closed():
                return
            pct = int(100 * done / total) if total else None
            value = types.WorkDoneProgressReport(message=message, percentage=pct)
            try:
                loop.call_soon_threadsafe(self.ls.work_done_progress.report, token, value)
            except RuntimeError:
                # The server shut down while this evaluation ran on: the
                # client is gone, and the evaluation must still finish cleanly.
                log.debug("progress after shutdown dropped: %s", message)

        return report

    async def __aexit__(self, *exc: object) -> None:
        token, self.token = self.token, None
        if token is not None:
            self.ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message="done" if exc[0] is None else "stopped"))




def _lens(line: int, title: str, command: str, arguments: list[Any]) -> types.CodeLens:
    at = types.Range(start=types.Position(line=line, character=0), end=types.Position(line=line, character=0))
    return types.CodeLens(range=at, command=types.Command(title=title, command=command, arguments=arguments))
