"""Editor settings of `sage-lsp`, the same in every client.

A client passes them in any of the ways clients do: `initializationOptions`
at start, `workspace/didChangeConfiguration` later, or (when the client
supports it) answers to `workspace/configuration` for the section `sage`.
Each may hold the settings flat (`{"benchmarkOnSave": true}`) or under
`sage` (`{"sage": {"benchmarkOnSave": true}}`, VS Code's shape).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

log = logging.getLogger("sage.lsp")

SECTION = "sage"
# How long to wait for the client's answer to `workspace/configuration`,
# which it should send at once, before going on without it.
CLIENT_REPLY_S = 10


@dataclass(frozen=True)
class EditorSettings:
    # Evaluate a candidate each time it is saved. Off by default: an
    # evaluation takes seconds of CPU (minutes on some backends), and a save is
    # not a request for one.
    benchmark_on_save: bool = False

    def updated(self, raw: Any) -> tuple["EditorSettings", list[str]]:
        """These settings with the known keys of `raw` applied, and a message
        for each value of the wrong type (that key keeps its old value)."""
        section = _section(raw)
        if section is None:
            return self, []
        problems = []
        value = section.get("benchmarkOnSave")
        out = self
        if value is not None:
            if isinstance(value, bool):
                out = replace(out, benchmark_on_save=value)
            else:
                problems.append(
                    f"setting sage.benchmarkOnSave must be true or false, got {value!r}; keeping {str(self.benchmark_on_save).lower()}"
                )
        return out, problems


def _section(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        return None
    inner = raw.get(SECTION)
    return inner if isinstance(inner, dict) else raw


class Settings:
    """The settings a language server's client gave last, however it gave them."""

    def __init__(self, ls: "LanguageServer"):
        self.ls = ls
        self.current = EditorSettings()
        self._pulls: set[asyncio.Task] = set()

    def apply(self, raw: Any) -> None:
        self.current, problems = self.current.updated(raw)
        for problem in problems:
            self.ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"SAGE: {problem}"))

    async def pull(self) -> None:
        """Ask for the `sage` section when the client answers `workspace/configuration`."""
        caps = self.ls.client_capabilities.workspace
        if not (caps and caps.configuration):
            return
        try:
            values = await asyncio.wait_for(
                self.ls.workspace_configuration_async(types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)])),
                CLIENT_REPLY_S,
            )
        except (asyncio.TimeoutError, JsonRpcException) as exc:
            log.info("client did not send settings: %s", exc)
            return
        if values:
            self.apply(values[0])

    def pull_soon(self) -> None:
        task = asyncio.get_running_loop().create_task(self.pull())
        self._pulls.add(task)
        task.add_done_callback(self._pulls.discard)

    def close(self) -> None:
        for task in list(self._pulls):
            task.cancel()
