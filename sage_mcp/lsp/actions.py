"""The editor's commands that change the memory or a document's task:
retrieve rules (opening an episode), record adoption, consolidate, set a
file's task; and the memory view they keep current.

Memory writes run on one memory thread, never on the event loop (a write
transaction may wait for another process's, close idle episodes and
consolidate) and never behind an evaluation (which has a thread of its own).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Awaitable, Callable, Protocol, TypeVar

from lsprotocol import types
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument, Workspace

from sage_engine import kernels as kernel_finder
from sage_engine.engine import Engine
from sage_engine.errors import InvalidInput
from sage_engine.models import Adoption, EvalResult, Lesson
from sage_mcp.lsp import views
from sage_mcp.lsp.documents import Documents
from sage_mcp.lsp.progress import Progress

log = logging.getLogger("sage.lsp")
T = TypeVar("T")


class ActionHost(Protocol):
    """What the memory commands need of the language server that runs them."""

    backend: str | None
    documents: Documents
    episodes: dict[str, int]
    attempts: dict[str, EvalResult]

    @property
    def engine(self) -> Engine: ...

    @property
    def workspace(self) -> Workspace: ...

    @property
    def client_capabilities(self) -> types.ClientCapabilities: ...

    def refresh_lenses(self) -> None: ...

    def work_progress(self, title: str) -> Progress: ...

    def window_show_message_request_async(self, params: types.ShowMessageRequestParams) -> Awaitable[types.MessageActionItem | None]: ...

    def workspace_apply_edit_async(self, params: types.ApplyWorkspaceEditParams) -> Awaitable[types.ApplyWorkspaceEditResult]: ...


class MemoryActions:
    """The memory commands of one language server, on one memory thread."""

    def __init__(self, ls: ActionHost):
        self.ls = ls
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sage-memory")

    async def in_worker(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.worker, functools.partial(fn, *args, **kwargs))

    def closer(self, engine: Engine) -> Callable[[], None]:
        """What the evaluation thread runs last at shutdown: the memory write
        in flight finishes, then the engine closes."""
        worker = self.worker

        def close() -> None:
            worker.shutdown(wait=True)
            engine.close()

        return close

    async def retrieve(self, doc: TextDocument, k: int | None) -> dict[str, Any]:
        ls = self.ls
        link = ls.documents.require_task(doc)
        # A write transaction that may close idle episodes and consolidate: off the event loop.
        retrieval = await self.in_worker(ls.engine.retrieve, link.task, k=k, client="sage-lsp", backend=ls.backend)
        ls.episodes[doc.uri] = retrieval.episode_id
        return {"uri": doc.uri, "task": link.task, "retrieval": retrieval.model_dump(mode="json")}

    async def record_adoption(self, uri: str, ids: list[int], episode: int | None, lesson: Lesson | None) -> dict[str, Any]:
        ls = self.ls
        episode = episode or ls.episodes.get(uri)
        if episode is None:
            raise InvalidInput("no episode for this file: run 'SAGE: Retrieve rules for this task' first, or pass episode_id")
        last = ls.attempts.get(uri)
        # Credit the file's last evaluation only when it ran inside this episode.
        attempt = last.attempt_id if last is not None and last.episode_id == episode else None
        adopted = [Adoption(id=i, evidence=f"adopted in {Path(to_fs_path(uri) or uri).name}") for i in ids]
        report = await self.in_worker(ls.engine.record_adoption, episode, adopted, attempt_id=attempt, lesson=lesson)
        if report.closed:
            ls.episodes.pop(uri, None)
        ls.refresh_lenses()
        return report.model_dump(mode="json")

    async def consolidate(self, dry_run: bool) -> dict[str, Any]:
        async with self.ls.work_progress("SAGE: consolidating memory") as report:
            result = await self.in_worker(self.ls.engine.consolidate, dry_run=dry_run, progress=report)
        return result.model_dump(mode="json")

    def memory(self, limit: int) -> dict[str, Any]:
        """Resident rules and retrievable items, for the memory view."""
        rules = self.ls.engine.resident_rules()
        items = self.ls.engine.list_items(status="active", limit=limit)
        return {"rules": [r.model_dump(mode="json") for r in rules], "items": [i.model_dump(mode="json") for i in items]}

    async def pick_task(self, doc: TextDocument) -> str | None:
        """Offer the bundled tasks through `window/showMessageRequest` (every
        client has it); the chosen task's id, or None when dismissed."""
        name = self.ls.documents.name_of(doc)
        tasks = views.order_tasks(name, self.ls.engine.list_tasks())
        titles = {f"{t.id} · {t.name}": t.id for t in tasks}
        choice = await self.ls.window_show_message_request_async(
            types.ShowMessageRequestParams(
                type=types.MessageType.Info,
                message=f"SAGE: which task does {name} implement? (For a task file of your own, add '# sage: task=<path>' at the top.)",
                actions=[types.MessageActionItem(title=t) for t in titles],
            )
        )
        return titles.get(choice.title) if choice is not None else None

    async def set_task(self, doc: TextDocument, task: str | None) -> dict[str, Any]:
        """Write the `sage: task=` header through the editor (so it lands in
        the buffer and undo history), or map the file in .sage/tasks.json when
        the client cannot apply edits. Without a task, offer the list first."""
        ls = self.ls
        value = (task or "").strip()
        if not value:
            picked = await self.pick_task(doc)
            if picked is None:
                return {"uri": doc.uri, "task": None, "via": None}
            value = picked
        path = ls.documents.path_of(doc)
        resolved = kernel_finder.resolve_task_value(value, Path(path).parent) if path else value
        ls.engine.get_task(resolved)  # a task that does not load is refused now, not at the first benchmark
        header = kernel_finder.header_line(value, doc.language_id or "python")
        caps = ls.client_capabilities.workspace
        if caps and caps.apply_edit:
            existing = kernel_finder.header_task(doc.source)
            line = existing[1] if existing else kernel_finder.header_insert_line(doc.source)
            end = types.Position(line=line + 1 if existing else line, character=0)
            edit = types.TextEdit(range=types.Range(start=types.Position(line=line, character=0), end=end), new_text=header + "\n")
            applied = await ls.workspace_apply_edit_async(
                types.ApplyWorkspaceEditParams(label="Set SAGE task", edit=types.WorkspaceEdit(changes={doc.uri: [edit]}))
            )
            if applied.applied:
                ls.refresh_lenses()
                return {"uri": doc.uri, "task": resolved, "via": "header"}
            log.info("client did not apply the header edit (%s); writing .sage/tasks.json", applied.failure_reason)
        if path is None:
            raise InvalidInput("this document is not a file on disk; save it first, then set its task")
        root = Path(ls.workspace.root_path or Path(path).parent)
        try:
            relative = Path(path).relative_to(root).as_posix()
        except ValueError:
            root, relative = Path(path).parent, Path(path).name
        project = kernel_finder.write_project_mapping(root, relative, value)
        ls.refresh_lenses()
        return {"uri": doc.uri, "task": resolved, "via": "project", "project_file": str(project)}
