"""SAGE's MCP server: the agent protocol (retrieve_rules -> compile_and_bench
-> record_adoption -> consolidate), memory and task tools (`tools`),
resources and a protocol prompt, over stdio (`sage-mcp`) or streamable HTTP
(`sage serve`). The Engine opens in the server's lifespan; a background task
closes and credits episodes left idle.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import re
import sys
import uuid
from contextlib import asynccontextmanager
from typing import Annotated, Any, AsyncIterator, Callable

import anyio
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError, UnexpectedToolError
from mcp.server.mcpserver.resources import Resource
from mcp.shared.exceptions import MCPError
from mcp.server.mcpserver.tools import Tool
from mcp.types import INVALID_PARAMS, ToolExecution
from mcp.types import Tool as MCPTool
from pydantic import Field, PrivateAttr, ValidationError

from sage_engine.config import BACKENDS, Config
from sage_engine.engine import Engine
from sage_engine.errors import InvalidInput, NotFound, SageError
from sage_engine.models import AdoptionReport, Item
from sage_mcp.mcp.arguments import describe
from sage_mcp.mcp.clients import connect_hint
from sage_mcp.mcp.tasks import TASK_TOOLS, TaskMiddleware
from sage_mcp.mcp.tools import INPUT_FAULTS, TOOLS, AppContext, AppState, engine_of, refusal

log = logging.getLogger("sage_mcp.mcp.server")

INSTRUCTIONS = """\
SAGE is an experience memory and evaluator for NPU (Ascend) kernels. Per task:
1. retrieve_rules(task) -> episode_id, resident rules and ranked items.
2. Write a candidate (class ModelNew, same interface as the reference Model).
3. compile_and_bench(candidate, task, episode_id=..., adopted_ids=[ids you used]).
   A failing kernel is a result: read status and diagnostics, fix, call again.
   Status running means it is still evaluating: call get_result(attempt_id), do not evaluate again.
4. record_adoption(episode_id, adopted=[{id, evidence}], attempt_id=best, lesson={title, content}).
   This credits the items you used and stores your lesson for the next agent.
5. consolidate() now and then promotes proven items into the rulebook.
Only ids shown in your episode may be adopted. An open episode is closed after a
period of inactivity or when you retrieve again for the same task; only an episode
with an evaluation is credited."""


SweepHook = Callable[[list[AdoptionReport]], None]


def sweep_interval(config: Config) -> float:
    # A quarter of the idle limit closes an idle episode at most 25% late;
    # at least every minute so a long limit still sweeps, at most 20 Hz.
    return min(max(config.episode_idle_s / 4, 0.05), 60.0)


async def _sweep_idle(state: AppState, interval: float, on_sweep: SweepHook | None) -> None:
    """Close episodes nobody touched for episode_idle_s (crediting those with
    an attempt), even when no agent calls retrieve_rules again (the engine
    also does it then)."""
    while True:
        await anyio.sleep(interval)
        reports: list[AdoptionReport] = []
        try:
            reports = await anyio.to_thread.run_sync(state.engine.close_idle_episodes)
            if reports:
                log.info("closed %d idle episodes: %s", len(reports), [r.episode_id for r in reports])
        except Exception:  # a failed sweep (say a locked database) must not take the server down
            log.exception("idle-episode sweep failed; retrying in %.1f s", interval)
        if on_sweep is not None:
            on_sweep(reports)


class _Published:
    """The state of the running lifespan, for the one static resource: the
    SDK hands static resources no Context, so they cannot reach the
    lifespan context the way tools do."""

    state: AppState | None = None

    def get(self) -> AppState:
        if self.state is None:
            raise ResourceError("the SAGE server is not running")
        return self.state


class RulebookResource(Resource):
    _published: _Published = PrivateAttr()

    def __init__(self, published: _Published, **data: Any):
        super().__init__(**data)
        self._published = published

    async def read(self) -> str:
        # A static resource is read with no request context, so no reader is
        # known: it shows the team's rules alone (a private rule reaches its
        # owner through retrieve_rules).
        engine = self._published.get().engine
        rules = await anyio.to_thread.run_sync(lambda: engine.resident_rules(shared_only=True))
        return render_rulebook(rules)


def render_rulebook(rules: list[Item]) -> str:
    """Markdown whose structure is SAGE's own: every rule's words (title,
    text, code) are quoted data, so an item cannot add a heading, a rule or
    a utility line of its own."""
    if not rules:
        return "# SAGE rulebook\n\nNo resident rules yet: run episodes and `consolidate` to promote proven items.\n"
    parts = [f"# SAGE rulebook ({len(rules)} rules, {sum(r.tokens for r in rules)} tokens)\n"]
    for r in rules:
        authors = ", ".join(r.authors or ([r.author] if r.author else [])) or "unknown"
        parts.append(f"## Rule {r.id}: {_inline(r.title)}\n\n{_fenced(r.content, 'text')}")
        if r.code:
            parts.append(_fenced(r.code, "python"))
        parts.append(
            f"_rule {r.id}: by {_inline(authors)}; utility {r.utility:.3f}, adopted {r.n_adopted}x by "
            f"{_inline(', '.join(r.operators_adopted)) or 'none'}_\n"
        )
    return "\n".join(parts)


def _inline(text: str) -> str:
    """One line of text that markdown shows as written."""
    line = " ".join(text.split())
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|<>~])", r"\\\1", line)


def _fenced(text: str, info: str) -> str:
    """A code fence longer than any backtick run inside, so the text cannot close it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}\n"


# --------------------------------------------------------- resources, prompt


async def item_resource(item_id: str, ctx: AppContext) -> str:
    if not item_id.isdigit():
        raise ResourceNotFoundError(f"item ids are integers, got {item_id!r}")
    try:
        item = await anyio.to_thread.run_sync(engine_of(ctx).get_item, int(item_id))
    except NotFound as exc:
        raise ResourceNotFoundError(str(exc)) from exc
    return item.model_dump_json(indent=2)


async def attempt_roofline_resource(attempt_id: str, ctx: AppContext) -> str:
    if not attempt_id.isdigit():
        raise ResourceNotFoundError(f"attempt ids are integers, got {attempt_id!r}")
    engine = engine_of(ctx)
    try:
        return await anyio.to_thread.run_sync(lambda: engine.roofline_svg(engine.get_attempt(int(attempt_id))))
    except NotFound as exc:
        raise ResourceNotFoundError(str(exc)) from exc
    except SageError as exc:  # forbidden: another person's attempt
        raise ResourceError(str(refusal(exc))) from exc


async def task_resource(task_id: str, ctx: AppContext) -> str:
    engine = engine_of(ctx)
    try:
        summary, source = await anyio.to_thread.run_sync(lambda: (engine.get_task(task_id), engine.task_source(task_id)))
    except NotFound as exc:
        raise ResourceNotFoundError(str(exc)) from exc
    except (SageError, *INPUT_FAULTS) as exc:
        raise ResourceError(str(refusal(exc))) from exc
    return (
        f"# {summary.name} (`{summary.id}`)\n\n{summary.description}\n\n"
        f"operator `{summary.operator}`, family `{summary.family}`, level {summary.level}, {summary.cases} cases\n\n"
        f"```python\n{source}\n```\n"
    )


def sage_protocol(
    task: Annotated[str, Field(description="The task: a bundled id (see list_tasks), a reference path, or a sentence")],
) -> str:
    """How to work with SAGE on one kernel task, step by step."""
    target = f"the task `{task}`"
    return f"""You are writing an NPU kernel for {target} with SAGE's memory and evaluator.

1. Call `retrieve_rules` with the task (a bundled id, a reference path, or a description).
   Read the resident rules and the items. Note the `episode_id`.
2. Write a candidate module: `class ModelNew(nn.Module)` with the same constructor and
   forward signature as the reference `Model` (see `show_task`). Follow the rules and the
   items that fit; remember the ids of the items you actually follow.
3. Call `compile_and_bench` with the candidate, the task, `episode_id` and
   `adopted_ids=[...]`. A status other than `correct` is information, not failure: read
   `message`, `mismatch` and `diagnostics` (line numbers are in your candidate), fix, retry.
4. Once correct, try to make it faster; each call reports `speedup` over the reference.
5. Call `record_adoption` with `episode_id`, `adopted=[{{"id": ..., "evidence": "how it helped"}}]`,
   `attempt_id` of your best attempt and a `lesson` ({{"title", "content", "code"}}) that
   would have saved you time: the pitfall, the fix, when it applies.
6. After several episodes, call `consolidate` so proven lessons become resident rules.

Only adopt ids that `retrieve_rules` showed in this episode. Do not call the reference or
the torch operator the task forbids; SAGE checks for that."""


# ------------------------------------------------------------------ server


class SageServer(MCPServer):
    """MCPServer whose mistakes a caller can fix say what to fix: arguments
    that fail a tool's schema come back as `invalid_input` in the words of
    the tool's parameters, and an unknown prompt or a missing required
    argument is invalid params, not an internal error logged with a
    traceback."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None):
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            # The SDK validates arguments before a tool runs and reports the
            # pydantic error as it is; only that case (its direct cause) is reworded.
            if isinstance(exc, UnexpectedToolError) or not isinstance(exc.__cause__, ValidationError):
                raise
            tool = self._tool_manager.get_tool(name)
            problem = InvalidInput(describe(exc.__cause__, tool.parameters if tool is not None else {}))
            # Chained to the ValidationError still, so the SDK logs the field names, never the values.
            raise ToolError(f"Error executing tool {name}: {refusal(problem)}") from exc.__cause__

    def tool_named(self, name: str) -> Tool:
        """A registered tool (the SDK's own `tool` is its decorator)."""
        found = self._tool_manager.get_tool(name)
        if found is None:
            raise MCPError(code=INVALID_PARAMS, message=f"unknown tool {name!r}")
        return found

    async def list_tools(self) -> list[MCPTool]:
        # The tools that run as MCP tasks say so (clients before 2025-11-25 never see the field).
        return [
            t.model_copy(update={"execution": ToolExecution(task_support="optional")}) if t.name in TASK_TOOLS else t
            for t in await super().list_tools()
        ]

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None, context: Any = None):
        prompt = self._prompt_manager.get_prompt(name)
        if prompt is None:
            known = ", ".join(p.name for p in await self.list_prompts()) or "none"
            raise MCPError(code=INVALID_PARAMS, message=f"unknown prompt {name!r}; this server has: {known}")
        missing = [a.name for a in prompt.arguments or [] if a.required and not (arguments or {}).get(a.name)]
        if missing:
            raise MCPError(code=INVALID_PARAMS, message=f"prompt {name!r} needs the argument(s) {', '.join(missing)}")
        return await super().get_prompt(name, arguments, context)


def create_server(config: Config | None = None, *, on_sweep: SweepHook | None = None) -> MCPServer:
    """An MCP server bound to one memory database; the Engine opens when a
    transport starts the server's lifespan and closes with it. `on_sweep`
    observes each idle-episode sweep (with the episodes it closed)."""
    config = config or Config.from_env()
    published = _Published()

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[AppState]:
        engine = await anyio.to_thread.run_sync(Engine, config)
        state = AppState(engine=engine, instance=f"{os.getpid()}-{uuid.uuid4().hex[:6]}")
        published.state = state
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_sweep_idle, state, sweep_interval(config), on_sweep)
                state.background = tg
                yield state
                tg.cancel_scope.cancel()
        finally:
            published.state = None
            engine.close()

    server = SageServer(
        "sage",
        title="SAGE kernel memory",
        instructions=INSTRUCTIONS,
        version=_version(),
        lifespan=lifespan,
        log_level="INFO" if log.isEnabledFor(logging.INFO) else "WARNING",
    )
    server.middleware.append(TaskMiddleware(server))
    for fn, title, hints in TOOLS:
        server.add_tool(fn, title=title, description=inspect.cleandoc(fn.__doc__ or ""), annotations=hints)
    server.add_resource(
        RulebookResource(
            published,
            uri="sage://rulebook",
            name="rulebook",
            title="SAGE resident rulebook",
            description="The rules every agent sees first (markdown)",
            mime_type="text/markdown",
        )
    )
    server.resource(
        "sage://items/{item_id}", name="item", title="Memory item", description="One memory item as JSON", mime_type="application/json"
    )(item_resource)
    server.resource(
        "sage://attempt/{attempt_id}/roofline.svg",
        name="attempt_roofline",
        title="Attempt roofline",
        description="Where an attempt's time goes, drawn: its roofline as SVG",
        mime_type="image/svg+xml",
    )(attempt_roofline_resource)
    server.resource(
        "sage://tasks/{task_id}",
        name="task",
        title="Bundled task",
        description="A task's summary and reference source (markdown)",
        mime_type="text/markdown",
    )(task_resource)
    server.prompt(name="sage_protocol", title="SAGE protocol")(sage_protocol)
    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sage-npu")
    except PackageNotFoundError:
        return "0"


def check_executor(config: Config) -> None:
    """A server told to evaluate on a cluster it cannot reach says so at
    start, naming RAY_ADDRESS, rather than at its first evaluation."""
    if config.executor == "ray":
        Engine.connect_cluster(config)


def banner(config: Config, confinement: str = "") -> str:
    return (
        f"sage-mcp {_version()}: memory {Engine.redact(config.database)} (backend {config.backend}, "
        f"{'evaluating on the Ray cluster' if config.executor == 'ray' else 'evaluating here'}); speaking MCP on stdin/stdout.\n"
        + (f"confinement: {confinement}\n" if confinement else "")
        + f"Connect a client:\n{connect_hint(config.database)}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sage-mcp", description="SAGE MCP server over stdio: what MCP clients launch. Logs go to stderr.")
    parser.add_argument("--db", help="memory: a SQLite file (default: your data dir) or a postgresql:// URL; env SAGE_DB")
    parser.add_argument("--backend", choices=BACKENDS, help="default evaluation backend (env SAGE_BACKEND)")
    parser.add_argument(
        "--executor",
        choices=("local", "ray"),
        help="evaluate here (local) or on a Ray cluster's hosts (ray; RAY_ADDRESS; env SAGE_EXECUTOR)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log requests to stderr")
    parser.add_argument("--quiet", action="store_true", help="no banner")
    args = parser.parse_args(argv)
    # stdout carries the protocol: every log line goes to stderr.
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        config = Config.from_env(db=args.db, backend=args.backend, executor=args.executor)
        check_executor(config)
    except SageError as exc:
        print(f"sage-mcp: {exc}", file=sys.stderr)
        return 2
    if not args.quiet:
        confinement = Engine.probe_confinement(config)
        print(banner(config, confinement.describe()), file=sys.stderr, flush=True)
    create_server(config).run()
    return 0
