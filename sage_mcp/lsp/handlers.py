"""`sage-lsp`: SAGE in the editor.

Code lenses over each kernel show its last evaluation (from any surface that
wrote to the same memory database, an agent over MCP included), diagnostics
carry compile errors and mismatches to their lines, hover lists the rules
memory holds for the kernel's task, and commands benchmark, retrieve, adopt
and consolidate. Handlers here are thin: `SageLanguageServer` (server.py)
owns the Engine and does the work.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import sys
from typing import Any, Awaitable, Callable

from lsprotocol import types
from pygls.exceptions import JsonRpcException

from sage_engine.errors import InvalidInput, SageError
from sage_engine.models import Lesson
from sage_mcp.lsp.server import SageLanguageServer

# LSP 3.17 "RequestFailed": the request was well formed but could not be done.
REQUEST_FAILED = -32803

server = SageLanguageServer()


def _command(fn: Callable[..., object]) -> Callable[..., Awaitable[Any]]:
    """Errors a user can fix go back as the request's error with SAGE's message
    (no traceback); anything else is pygls's internal error. Every command
    runs in `ls.commands`, so shutdown can answer one still running."""

    @functools.wraps(fn)
    async def wrapper(ls: SageLanguageServer, *args: Any) -> Any:
        with ls.commands.answering():
            try:
                out = fn(ls, *args)
                return await out if asyncio.iscoroutine(out) else out
            except SageError as exc:
                # The same `kind` MCP and the CLI show, for a client to act on.
                raise JsonRpcException(message=str(exc), code=REQUEST_FAILED, data={"kind": exc.kind}) from exc

    return wrapper


def _arg(args: tuple[Any, ...], index: int, kind: type, name: str, *, required: bool = True) -> Any:
    """Command arguments arrive as raw JSON; check each so a wrong call says which argument is wrong."""
    if index >= len(args) or args[index] is None:
        if required:
            raise InvalidInput(f"missing argument {index + 1}: {name}")
        return None
    value = args[index]
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidInput(f"argument {index + 1} ({name}) must be {kind.__name__}, got {type(value).__name__}")
    return value


# ---------------------------------------------------------------- lifecycle


@server.feature(types.INITIALIZE)
def initialize(ls: SageLanguageServer, params: types.InitializeParams) -> None:
    ls.settings.apply(params.initialization_options)


@server.feature(types.INITIALIZED)
async def initialized(ls: SageLanguageServer, params: types.InitializedParams) -> None:
    if ls.poll_seconds > 0:
        ls.start_watching()
    await ls.settings.pull()


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
def did_change_configuration(ls: SageLanguageServer, params: types.DidChangeConfigurationParams) -> None:
    """Settings pushed with the notification apply before the next message is
    handled; an empty push (the pull model) means "ask me"."""
    if isinstance(params.settings, dict) and params.settings:
        ls.settings.apply(params.settings)
    else:
        ls.settings.pull_soon()


@server.feature(types.SHUTDOWN)
async def shutdown(ls: SageLanguageServer, params: None) -> None:
    await ls.stop()


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: SageLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.on_open(ls.workspace.get_text_document(params.text_document.uri))


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: SageLanguageServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.on_close(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: SageLanguageServer, params: types.DidSaveTextDocumentParams) -> None:
    """Stored results for the saved text; a benchmark with `benchmarkOnSave`."""
    ls.on_save(ls.workspace.get_text_document(params.text_document.uri))


# ----------------------------------------------------------------- features


@server.feature(types.TEXT_DOCUMENT_CODE_LENS)
def code_lens(ls: SageLanguageServer, params: types.CodeLensParams) -> list[types.CodeLens]:
    """The last result over each kernel; "Set task…" when the file has no task."""
    return ls.lenses(ls.workspace.get_text_document(params.text_document.uri))


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: SageLanguageServer, params: types.HoverParams) -> types.Hover | None:
    """Rules and top items for the kernel's task, over its class/def lines."""
    markdown = ls.hover(ls.workspace.get_text_document(params.text_document.uri), params.position.line)
    if markdown is None:
        return None
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=markdown))


@server.feature(types.TEXT_DOCUMENT_CODE_ACTION)
def code_action(ls: SageLanguageServer, params: types.CodeActionParams) -> list[types.Command]:
    """The lenses of the kernel under the cursor, for clients without lenses."""
    return ls.code_actions(ls.workspace.get_text_document(params.text_document.uri), params.range.start.line)


# ----------------------------------------------------------------- commands


@server.command("sage.benchmark")
@_command
async def benchmark(ls: SageLanguageServer, *args: Any) -> dict[str, Any]:
    """Evaluate the document against its task: sage.benchmark(uri, line?)."""
    doc = ls.documents.get(_arg(args, 0, str, "uri"))
    return await ls.evaluations.benchmark(doc, _arg(args, 1, int, "line", required=False))


@server.command("sage.cancelBenchmark")
@_command
async def cancel_benchmark(ls: SageLanguageServer, *args: Any) -> dict[str, Any]:
    """Cancel the document's running evaluation (here, or in a server from before a window reload): sage.cancelBenchmark(uri)."""
    doc = ls.documents.get(_arg(args, 0, str, "uri"))
    return await ls.evaluations.in_worker(ls.evaluations.cancel, doc)


@server.command("sage.lastResult")
@_command
def last_result(ls: SageLanguageServer, *args: Any) -> dict[str, Any]:
    """The document's last stored evaluation: sage.lastResult(uri)."""
    return ls.stored_summary(ls.documents.get(_arg(args, 0, str, "uri")))


@server.command("sage.roofline")
@_command
def roofline(ls: SageLanguageServer, *args: Any) -> str | None:
    """The document's last result's roofline as inline SVG (None: not profiled): sage.roofline(uri)."""
    ls.documents.results.check()
    return ls.roofline(ls.documents.get(_arg(args, 0, str, "uri")))


@server.command("sage.retrieveRules")
@_command
async def retrieve_rules(ls: SageLanguageServer, *args: Any) -> dict[str, Any]:
    """Open an episode for the document's task and return what it shows: sage.retrieveRules(uri, k?)."""
    doc = ls.documents.get(_arg(args, 0, str, "uri"))
    return await ls.actions.retrieve(doc, _arg(args, 1, int, "k", required=False))


@server.command("sage.recordAdoption")
@_command
async def record_adoption(ls: SageLanguageServer, *args: Any) -> dict[str, Any]:
    """sage.recordAdoption(uri, item_ids, episode_id?, lesson?): credit what was used and close the episode."""
    ids = _arg(args, 1, list, "item_ids")
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InvalidInput("item_ids must be a list of integer item ids")
    lesson = _arg(args, 3, dict, "lesson", required=False)
    return await ls.actions.record_adoption(
        _arg(args, 0, str, "uri"),
        ids,
        _arg(args, 2, int, "episode_id", required=False),
        Lesson(**lesson) if lesson else None,
    )


@server.command("sage.consolidate")
@_command
async def consolidate(ls: SageLanguageServer, *args: Any) -> dict[str, Any]:
    """Promote proven items into the resident rulebook: sage.consolidate(dry_run?)."""
    return await ls.actions.consolidate(bool(_arg(args, 0, bool, "dry_run", required=False)))


@server.command("sage.memory")
@_command
def memory(ls: SageLanguageServer, *args: Any) -> dict[str, Any]:
    """Resident rules and retrievable items, for the memory view: sage.memory(limit?)."""
    return ls.actions.memory(_arg(args, 0, int, "limit", required=False) or 200)


@server.command("sage.quarantine")
@_command
def quarantine(ls: SageLanguageServer, *args: Any) -> dict[str, Any]:
    """Never show an item again (kept for the audit trail): sage.quarantine(item_id, reason?)."""
    item = ls.engine.quarantine_item(_arg(args, 0, int, "item_id"), _arg(args, 1, str, "reason", required=False) or "")
    return item.model_dump(mode="json")


@server.command("sage.delete")
@_command
def delete(ls: SageLanguageServer, *args: Any) -> dict[str, Any]:
    """Soft-delete an item: sage.delete(item_id)."""
    return ls.engine.delete_item(_arg(args, 0, int, "item_id")).model_dump(mode="json")


@server.command("sage.listTasks")
@_command
def list_tasks(ls: SageLanguageServer, *args: Any) -> list[dict[str, Any]]:
    """The bundled tasks, for a task picker."""
    return [t.model_dump(mode="json") for t in ls.engine.list_tasks()]


@server.command("sage.setTask")
@_command
async def set_task(ls: SageLanguageServer, *args: Any) -> dict[str, Any]:
    """sage.setTask(uri, task?): name the task this file implements; without one, offer the task list."""
    doc = ls.documents.get(_arg(args, 0, str, "uri"))
    return await ls.actions.set_task(doc, _arg(args, 1, str, "task", required=False))


# ---------------------------------------------------------------------- main


# What language clients append to the server's command line: vscode-languageclient
# adds `--stdio` (and `--clientProcessId=PID` for Node servers), others
# `--pipe=NAME`, `--socket=PORT` or `--node-ipc` for their other transports.
OTHER_TRANSPORTS = ("--pipe", "--socket", "--port", "--node-ipc")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sage-lsp", description="SAGE language server (stdio).")
    parser.add_argument("--stdio", action="store_true", help="speak LSP on stdin/stdout (the only transport, and the default)")
    parser.add_argument("--clientProcessId", help=argparse.SUPPRESS)  # passed by some clients; the client's exit closes stdin
    parser.add_argument("--db", help="memory database (default: SAGE_DB or the user data dir)")
    parser.add_argument("--backend", help="evaluation backend (default: SAGE_BACKEND or cpu)")
    parser.add_argument(
        "--poll-seconds", type=float, default=3.0, help="how often to look for results stored by other processes (0 = never)"
    )
    parser.add_argument("--log-level", default=os.environ.get("SAGE_LOG_LEVEL", "INFO"))
    args, unknown = parser.parse_known_args(argv)
    transports = [a for a in unknown if a.split("=", 1)[0] in OTHER_TRANSPORTS]
    if transports:
        parser.error(
            f"{transports[0]}: sage-lsp speaks LSP over stdio only; start it with --stdio "
            "(vscode-languageclient: TransportKind.stdio) or with no transport argument"
        )
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    level = args.log_level.upper()
    # stdout carries the protocol; every log line goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if level != "DEBUG":
        # pygls logs every message it sends at INFO; that is protocol tracing, not news.
        logging.getLogger("pygls").setLevel(logging.WARNING)
    server.db_path, server.backend, server.poll_seconds = args.db, args.backend, args.poll_seconds
    try:
        server.start_io()
    finally:
        server.close()
