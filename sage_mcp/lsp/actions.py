"""The editor's commands that change the memory or a document's task:
retrieve rules (opening an episode), record adoption, set a file's task.

Memory writes run on one memory thread, never on the event loop (a write
transaction may wait for another process's, close idle episodes and
consolidate) and never behind an evaluation (which has a thread of its own).
A mixin of `SageLanguageServer`, which owns the state these read.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, TypeVar

from lsprotocol import types
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from sage_engine import kernels as kernel_finder
from sage_engine.errors import InvalidInput
from sage_engine.models import Adoption, Lesson
from sage_mcp.lsp import views

log = logging.getLogger("sage.lsp")
T = TypeVar("T")


class MemoryActions:
    memory_worker: ThreadPoolExecutor

    async def in_memory_worker(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.memory_worker, functools.partial(fn, *args, **kwargs))

    async def pick_task(self, doc: TextDocument) -> str | None:
        """Offer the bundled tasks through `window/showMessageRequest` (every
        client has it); the chosen task's id, or None when dismissed."""
        name = self.name_of(doc)
        tasks = views.order_tasks(name, self.engine.list_tasks())
        titles = {f"{t.id} · {t.name}": t.id for t in tasks}
        choice = await self.window_show_message_request_async(types.ShowMessageRequestParams(
            type=types.MessageType.Info,
            message=f"SAGE: which task does {name} implement? (For a task file of your own, add "
                    "'# sage: task=<path>' at the top.)",
            actions=[types.MessageActionItem(title=t) for t in titles],
        ))
        return titles.get(choice.title) if choice is not None else None

    async def retrieve(self, doc: TextDocument, k: int | None) -> dict[str, Any]:
        link = self.require_task(doc)
        # A write transaction that may close idle episodes and consolidate: off the event loop.
        retrieval = await self.in_memory_worker(self.engine.retrieve, link.task, k=k, client="sage-lsp",
                                                backend=self.backend)
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
        report = await self.in_memory_worker(self.engine.record_adoption, episode, adopted, attempt_id=attempt,
                                             lesson=lesson)
        if report.closed:
            self.episodes.pop(uri, None)
        self.refresh_lenses()
        return report.model_dump(mode="json")

    async def set_task(self, doc: TextDocument, task: str | None) -> dict[str, Any]:
        """Write the `sage: task=` header through the editor (so it lands in
        the buffer and undo history), or map the file in .sage/tasks.json when
        the client cannot apply edits. Without a task, offer the list first."""
        value = (task or "").strip()
        if not value:
            picked = await self.pick_task(doc)
            if picked is None:
                return {"uri": doc.uri, "task": None, "via": None}
            value = picked
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
