"""MCP tasks (protocol 2025-11-25): `compile_and_bench` and `consolidate`
called with a `task` field answer at once with a handle, run as an engine
job, and are read with `tasks/get`, `tasks/result`, `tasks/cancel` and
`tasks/list`.

The SDK (mcp 2.3) knows the task types but serves none of the methods and
sieves a `tools/call` result down to a `CallToolResult`, so this is server
middleware: it answers the task methods itself, short-circuits a
task-augmented call with its `CreateTaskResult`, and adds the `tasks`
capability to a 2025-11-25 handshake. A task is the same job a polled
`compile_and_bench` is: stored and credited once, cancelled for real,
owned by the token that made it, kept `ttl` after it ends.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Mapping, Protocol

import anyio
import anyio.to_thread
from mcp.server.mcpserver.tools import Tool
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, METHOD_NOT_FOUND, CallToolResult, TextContent
from mcp_types import TaskStatusNotification, TaskStatusNotificationParams
from pydantic import ValidationError

from sage_engine.engine import Engine, Job
from sage_engine.errors import SageError
from sage_mcp.mcp.arguments import describe
from sage_mcp.mcp.tools import INPUT_FAULTS, USER_HEADER, AppState, adoptions, refusal
from sage_mcp.mcp.waiting import follow

log = logging.getLogger(__name__)

TASKS_VERSION = "2025-11-25"  # the revision whose core has tasks (2026-07-28 moves them to an extension)
RELATED = "io.modelcontextprotocol/related-task"
CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
PAGE = 50  # tasks per tasks/list page
POLL_MS = 1000  # the poll interval a task suggests: tasks/get reads memory, not the database
CANCEL_WAIT_S = 30.0  # how long tasks/cancel waits for the evaluation's processes to go


def _start_evaluation(engine: Engine, args: dict[str, Any]) -> Job:
    return engine.start_evaluation(
        args["candidate"],
        args["task"],
        backend=args.get("backend"),
        episode_id=args.get("episode_id"),
        adopted=adoptions(args.get("adopted_ids") or []),
        trials=args.get("trials"),
    )


def _start_consolidation(engine: Engine, args: dict[str, Any]) -> Job:
    return engine.start_consolidation(dry_run=bool(args.get("dry_run")), budget_tokens=args.get("budget_tokens"))


# The tools that may run as tasks (their `execution.taskSupport` is "optional").
TASK_TOOLS: dict[str, Callable[[Engine, dict[str, Any]], Job]] = {
    "compile_and_bench": _start_evaluation,
    "consolidate": _start_consolidation,
}
CANCELLABLE = {"evaluation"}  # a consolidation is one short transaction: it runs to its end


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat().replace("+00:00", "Z")


def task_view(job: Job, poll_ms: int) -> dict[str, Any]:
    """A job as the protocol's Task."""
    view: dict[str, Any] = {
        "taskId": job.id,
        "status": job.state,
        "createdAt": _iso(job.created_at),
        "lastUpdatedAt": _iso(job.updated_at),
        "ttl": int(job.ttl_s * 1000),
        "pollInterval": poll_ms,
    }
    if job.state == "working" and job.progress is not None and job.progress[2]:
        view["statusMessage"] = job.progress[2]
    elif job.error is not None:
        view["statusMessage"] = str(refusal(job.error)) if isinstance(job.error, (SageError, *INPUT_FAULTS)) else "internal error"
    return view


class Tools(Protocol):
    """The server's tools by name (`SageServer.tool_named`)."""

    def tool_named(self, name: str) -> Tool: ...


class TaskMiddleware:
    """Server middleware that serves MCP tasks for TASK_TOOLS."""

    def __init__(self, server: Tools):
        self.server = server

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        method, params = ctx.method, ctx.params if isinstance(ctx.params, Mapping) else {}
        if method == "initialize":
            result = await call_next(ctx)
            if isinstance(result, dict) and result.get("protocolVersion") == TASKS_VERSION:
                result["capabilities"] = {**result.get("capabilities", {}), "tasks": CAPABILITY}
            return result
        if method == "tools/call" and params.get("task") is not None and ctx.protocol_version == TASKS_VERSION:
            return await self._create(ctx, params)
        handler = {"tasks/get": self._get, "tasks/result": self._result, "tasks/cancel": self._cancel, "tasks/list": self._list}.get(method)
        if handler is None or ctx.protocol_version != TASKS_VERSION:
            return await call_next(ctx)
        return await handler(ctx, params)

    # ------------------------------------------------------------ plumbing

    def _state(self, ctx: Any) -> AppState:
        return ctx.lifespan_context

    def _engine(self, ctx: Any) -> Engine:
        """The engine acting for the caller (the HTTP token's name), as the tools do."""
        engine = self._state(ctx).engine
        headers = getattr(ctx.request, "headers", None)
        user = headers.get(USER_HEADER) if headers is not None else None
        return engine.as_user(user) if user else engine

    def _job(self, ctx: Any, params: Mapping[str, Any]) -> tuple[Engine, Job]:
        task_id = params.get("taskId")
        if not isinstance(task_id, str):
            raise MCPError(code=INVALID_PARAMS, message="taskId is required: the id tools/call returned in its task")
        engine = self._engine(ctx)
        try:
            return engine, engine.jobs.get(task_id, owner=engine.user)
        except SageError as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from exc

    def _poll_ms(self, ctx: Any) -> int:
        return POLL_MS

    # ------------------------------------------------------------- methods

    async def _create(self, ctx: Any, params: Mapping[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str) or name not in TASK_TOOLS:
            raise MCPError(code=METHOD_NOT_FOUND, message=f"{name!r} does not run as a task; these do: {', '.join(TASK_TOOLS)}")
        start = TASK_TOOLS[name]
        tool = self.server.tool_named(name)
        try:
            args = tool.fn_metadata.validate_arguments(dict(params.get("arguments") or {}))
        except ValidationError as exc:
            raise MCPError(code=INVALID_PARAMS, message=f"invalid_input: {describe(exc, tool.parameters)}") from exc
        engine = self._engine(ctx)
        try:
            job = await anyio.to_thread.run_sync(start, engine, args)
        except (SageError, *INPUT_FAULTS) as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(refusal(exc))) from exc
        requested = (params.get("task") or {}).get("ttl")
        if isinstance(requested, (int, float)) and requested > 0:
            job.ttl_s = min(requested / 1000, engine.config.task_ttl_s)
        job.meta["tool"] = name
        token = (params.get("_meta") or {}).get("progressToken")
        background = self._state(ctx).background
        if background is not None:
            background.start_soon(self._notify, ctx.session, job, token, self._poll_ms(ctx))
        return {"task": task_view(job, self._poll_ms(ctx))}

    async def _notify(self, session: Any, job: Job, token: str | int | None, poll_ms: int) -> None:
        """Progress (on the call's token) and the task's status at each phase
        and at its end, while the client's connection lasts; a client gone
        is no reason to stop the job."""

        async def status() -> None:
            view = TaskStatusNotificationParams.model_validate(task_view(job, poll_ms))
            await session.send_notification(TaskStatusNotification(params=view))

        async def progress(done: float, total: float | None, message: str) -> None:
            if token is not None:
                await session.send_progress_notification(token, done, total, message)
            await status()  # its statusMessage is the phase just reached

        try:
            await follow(job, math.inf, progress, cancel_on_abort=False)
            await status()
        except Exception:  # the connection ended: status stays readable with tasks/get
            log.debug("task %s: client gone, notifications stop", job.id, exc_info=True)

    async def _get(self, ctx: Any, params: Mapping[str, Any]) -> dict[str, Any]:
        _, job = self._job(ctx, params)
        return task_view(job, self._poll_ms(ctx))

    async def _result(self, ctx: Any, params: Mapping[str, Any]) -> dict[str, Any]:
        """Waits for the end (the spec's blocking read), then the tool's own result."""
        _, job = self._job(ctx, params)
        await follow(job, math.inf, None, cancel_on_abort=False)
        tool = self.server.tool_named(job.meta.get("tool", ""))
        if job.error is None:
            result = tool.fn_metadata.convert_result(job.result)
        else:
            text = str(refusal(job.error)) if isinstance(job.error, (SageError, *INPUT_FAULTS)) else "internal error"
            result = CallToolResult(content=[TextContent(type="text", text=f"Error executing tool {tool.name}: {text}")], is_error=True)
        wire = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        wire["_meta"] = {**(wire.get("_meta") or {}), RELATED: {"taskId": job.id}}
        return wire

    async def _cancel(self, ctx: Any, params: Mapping[str, Any]) -> dict[str, Any]:
        _, job = self._job(ctx, params)
        if job.finished:
            raise MCPError(code=INVALID_PARAMS, message=f"task {job.id} already ended ({job.state}); only a working task can be cancelled")
        if job.kind not in CANCELLABLE:
            raise MCPError(code=INVALID_PARAMS, message=f"a {job.kind} cannot be stopped once it runs; it ends in seconds")
        job.cancel.set()
        # The evaluation's processes are killed at once; its thread returns within a second or so.
        await anyio.to_thread.run_sync(job.wait, CANCEL_WAIT_S)
        return task_view(job, self._poll_ms(ctx))

    async def _list(self, ctx: Any, params: Mapping[str, Any]) -> dict[str, Any]:
        engine = self._engine(ctx)
        jobs = [j for j in engine.jobs.owned_by(engine.user) if j.meta.get("tool")]
        cursor = params.get("cursor")
        start = int(cursor) if isinstance(cursor, str) and cursor.isdigit() else 0
        page = jobs[start : start + PAGE]
        out: dict[str, Any] = {"tasks": [task_view(j, self._poll_ms(ctx)) for j in page]}
        if start + PAGE < len(jobs):
            out["nextCursor"] = str(start + PAGE)
        return out
