"""Work-done progress for a long request (an evaluation, a consolidation),
when the client supports it; a no-op otherwise. With `on_cancel` the
progress is cancellable: the client's Cancel button calls it."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Callable

from lsprotocol import types
from pygls.exceptions import JsonRpcException

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

log = logging.getLogger("sage.lsp")


class Progress:
    """Work-done progress when the client supports it; a no-op otherwise.
    The callable it yields may be called from the worker thread."""

    def __init__(self, ls: "LanguageServer", title: str, on_cancel: Callable[[], None] | None = None):
        self.ls, self.title, self.on_cancel = ls, title, on_cancel
        self.token: str | None = None

    async def __aenter__(self) -> Callable[[float, float | None, str], None]:
        window = self.ls.client_capabilities.window
        if window and window.work_done_progress:
            token = f"sage-{uuid.uuid4().hex[:12]}"
            try:
                await asyncio.wait_for(self.ls.work_done_progress.create_async(token), timeout=10)
                self.token = token
                on_cancel = self.on_cancel
                begin = types.WorkDoneProgressBegin(title=self.title, percentage=0, cancellable=on_cancel is not None)
                self.ls.work_done_progress.begin(token, begin)
                if on_cancel is not None:
                    # pygls cancels the token's future on window/workDoneProgress/cancel (the notification's Cancel button).
                    self.ls.work_done_progress.tokens[token].add_done_callback(lambda f: on_cancel() if f.cancelled() else None)
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
            self.ls.work_done_progress.tokens.pop(token, None)
            self.ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message="done" if exc[0] is None else "stopped"))
