"""The MCP tools: typed, thin handlers, each one Engine call on a worker
thread, plus the plumbing that turns engine errors into tool errors and
engine progress into MCP progress notifications.

Engine calls never run on the event loop: the store may wait on another
process's write lock and evaluations take seconds, and neither may stall a
server that is answering other requests.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Annotated, Any, Callable, TypeVar

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from sage_engine.config import BACKENDS
from sage_engine.engine import Engine, Job
from sage_engine.errors import SageError
from sage_engine.models import (
    AddResult,
    Adoption,
    AdoptionReport,
    ConsolidationReport,
    EpisodeDetail,
    EvalResult,
    Item,
    Lesson,
    MemoryStats,
    NewItem,
    RetrievalResult,
    ScoredItem,
    TaskDetail,
    TaskSummary,
)

from sage_mcp.mcp.budget import fit_episode, fit_items, fit_retrieval, fit_source
from sage_mcp.mcp.waiting import answer_evaluation

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class AppState:
    """What the lifespan opens; tools reach it through the request context."""

    engine: Engine
    instance: str  # unique per server process: part of every client id
    # Where work outliving a request runs (an MCP task's notifications): the lifespan's task group.
    background: anyio.abc.TaskGroup | None = None


# The context the SDK hands each tool, typed by what this server's lifespan yields.
AppContext = Context[AppState, Any]


def state_of(ctx: AppContext) -> AppState:
    return ctx.request_context.lifespan_context


# Set by the HTTP transport's authentication from the caller's bearer token
# (any such header a client sends itself is dropped first); absent on stdio.
USER_HEADER = "x-sage-user"
ROLE_HEADER = "x-sage-role"


def engine_of(ctx: AppContext) -> Engine:
    """The engine acting for whoever is calling: the HTTP token's name (and
    role), or the OS user that started a stdio server."""
    engine = state_of(ctx).engine
    headers = ctx.headers or {}
    user = headers.get(USER_HEADER)
    return engine.as_user(user, admin=headers.get(ROLE_HEADER) == "admin") if user else engine


# What an argument can provoke below the engine's own checks: text JSON can
# carry but SQLite cannot store, numbers past 64 bits, names the filesystem
# refuses. Each becomes a refusal that says what to fix, not an opaque crash.
INPUT_FAULTS = (UnicodeEncodeError, OverflowError, OSError)


def refusal(exc: Exception) -> ToolError:
    if isinstance(exc, UnicodeEncodeError):
        return ToolError("a text argument is not valid Unicode (it holds a lone surrogate such as \\ud800); send UTF-8 text")
    if isinstance(exc, OverflowError):
        return ToolError("a number is out of range: ids and counts must fit in a signed 64-bit integer")
    if isinstance(exc, OSError):
        name = str(exc.filename)[:80] if exc.filename else "a path argument"
        return ToolError(f"cannot use {name!r}: {exc.strerror or exc}; pass a bundled task id, source code, or a readable path")
    if isinstance(exc, SageError):
        return ToolError(f"{exc.kind}: {exc}")
    return ToolError(str(exc))


async def _call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
    except (SageError, *INPUT_FAULTS) as exc:
        raise refusal(exc) from exc


async def _call_with_progress(ctx: AppContext, fn: Callable[..., T], **kwargs: Any) -> T:
    """Run `fn(progress=callback, **kwargs)` on a worker thread and forward
    each callback to the client as a progress notification. (An evaluation
    runs as an engine job instead, `sage_mcp/mcp/waiting.py`, so it can
    outlive the call.)"""
    send, receive = anyio.create_memory_object_stream[tuple[float, float | None, str]](64)
    token = anyio.lowlevel.current_token()

    def offer(update: tuple[float, float | None, str]) -> None:
        try:
            send.send_nowait(update)
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # progress is advisory: drop an update rather than stall the work

    def progress(done: float, total: float | None, message: str) -> None:
        anyio.from_thread.run_sync(offer, (float(done), total, message), token=token)

    async def forward() -> None:
        async with receive:
            async for done, total, message in receive:
                try:
                    await ctx.report_progress(done, total, message)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    log.debug("client went away; progress dropped")

    # Collected here rather than raised inside the task group, which would
    # wrap a refusal in an ExceptionGroup the SDK reports as a crash.
    error: Exception | None = None
    result: Any = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(forward)
        with send:
            try:
                result = await anyio.to_thread.run_sync(functools.partial(fn, progress=progress, **kwargs))
            except (SageError, *INPUT_FAULTS) as exc:
                error = exc
    if error is not None:
        raise refusal(error) from error
    return result


def client_id(ctx: AppContext) -> tuple[str, bool]:
    """Who is calling, and whether that label names one agent.

    The label is the client's name and this server process, plus the
    transport's session where there is one. It names one agent on stdio (a
    server process per agent) and over HTTP with a session; over session-less
    HTTP every copy of a client sends the same name, so there it names no one
    and a retrieval closes nobody's episode (docs/mcp.md, "Who owns an episode")."""
    params = ctx.session.client_params
    name = params.client_info.name if params is not None else "mcp-client"
    cid = f"{name[:60]}@{state_of(ctx).instance}"
    headers = ctx.headers
    session = (headers or {}).get("mcp-session-id")
    if session:
        return f"{cid}/{session[:40]}", True
    return cid, headers is None  # no headers: stdio


# ------------------------------------------------------------------- tools
# Annotated descriptions become the JSON schema an agent reads.

# SQLite integers are signed 64-bit: larger ids cannot exist.
ID_BOUNDS = {"ge": 1, "lt": 2**63}


async def retrieve_rules(
    ctx: AppContext,
    task: Annotated[
        str, Field(description="Bundled task id (see list_tasks), path to a reference .py, or a sentence describing the operator")
    ],
    operator: Annotated[str | None, Field(description="Operator name, e.g. 'softmax'; inferred for bundled tasks")] = None,
    family: Annotated[
        str | None,
        Field(description="Operator family, e.g. 'normalization'; inferred for bundled tasks. Selects the rules learned for that family"),
    ] = None,
    backend: Annotated[str | None, Field(description=f"Target backend: {', '.join(BACKENDS)}")] = None,
    hardware: Annotated[str | None, Field(description="Chip, e.g. 'Ascend910B3', to filter hardware-specific items")] = None,
    k: Annotated[int | None, Field(description="How many items besides the rulebook: 1-50 (default 5)", ge=1, le=50)] = None,
    episode_id: Annotated[int | None, Field(description="Continue this episode instead of opening a new one", **ID_BOUNDS)] = None,
    reference: Annotated[str | None, Field(description="Reference source, to sharpen retrieval for a free-text task")] = None,
    scope: Annotated[
        str | None,
        Field(description="'team' (default) or 'project:NAME' to include that project's items; your private items are always included"),
    ] = None,
) -> RetrievalResult:
    """Start here before writing a kernel: SAGE's rules and past lessons for a task.

    Returns episode_id, the resident rules that apply to this task and the top-k items, each with
    id, title, content, utility and score. Keep episode_id for compile_and_bench and
    record_adoption, and pass the ids of items you actually follow as adopted_ids: only ids
    shown in this episode are accepted. Retrieving again for the same task without
    episode_id closes your previous episode for it (credited only if it had an attempt) on
    stdio or a session; over session-less HTTP nothing is closed for you: record_adoption ends it.
    """
    client, owned = client_id(ctx)
    result = await _call(
        engine_of(ctx).retrieve,
        task,
        operator=operator,
        family=family,
        backend=backend,
        hardware=hardware,
        k=k,
        episode_id=episode_id,
        reference=reference,
        client=client,
        scope=scope,
        close_previous=owned,
    )
    return fit_retrieval(result)


WAIT_S = (
    "Seconds to wait for the result before answering status running with attempt_id (0-600; default 25, "
    "under the time the common clients give a tool call)"
)


async def compile_and_bench(
    ctx: AppContext,
    candidate: Annotated[str, Field(description="Source of a module defining class ModelNew, or a path to such a .py file in the project")],
    task: Annotated[
        str, Field(description="Bundled task id, path to a reference .py, or reference source (class Model, get_inputs, get_init_inputs)")
    ],
    backend: Annotated[str | None, Field(description=f"Where to compile and time: {', '.join(BACKENDS)} (default: the server's)")] = None,
    episode_id: Annotated[
        int | None, Field(description="The episode from retrieve_rules; the attempt is recorded in it", **ID_BOUNDS)
    ] = None,
    adopted_ids: Annotated[
        list[Annotated[int, Field(**ID_BOUNDS)]], Field(description="Ids of retrieved items this kernel follows (needs episode_id)")
    ] = [],  # noqa: B006 - pydantic copies defaults
    trials: Annotated[int | None, Field(description="Seeded correctness trials per case, 1-20")] = None,
    wait_s: Annotated[float | None, Field(description=WAIT_S, ge=0, le=600)] = None,
) -> EvalResult:
    """Compile, check and time a candidate kernel against the task's PyTorch reference.

    Returns status (correct, incorrect, compile_error, runtime_error, timeout, crashed,
    rejected, task_error, sandbox_error, host_error), max errors and the first mismatch, reference and candidate
    timings, speedup (speedup_trusted false with speedup_note: unverified, not credited), the seed,
    the shape variants checked beyond the declared sizes (a kernel must work at sizes it was not
    written for), diagnostics with candidate line numbers, and attempt_id. A correct kernel also gets a profile:
    the kernels each side launched and their time, the bytes and FLOPs of a call, the share of this
    machine's measured bandwidth and matmul peak each side reached, the binding limit (memory,
    compute or latency) and profile.summary, one sentence saying why it is slow; a time faster than
    the machine can go is flagged (profile.impossible). A failing kernel is a result, not an error:
    read message and diagnostics, fix the code and call again; host_error is the host's fault, not
    your kernel's: evaluate again. A `busy` error means too many evaluations wait already: nothing
    ran, retry after the seconds it names. Takes seconds to minutes; progress is reported. If it
    is not done within wait_s (default 25 s), the call returns status running with attempt_id:
    the evaluation goes on and is stored once; call get_result(attempt_id) for it instead of
    evaluating again. Finish with record_adoption.
    """
    adopted = adoptions(adopted_ids)
    engine = engine_of(ctx)
    job = await _call(engine.start_evaluation, candidate, task, backend=backend, episode_id=episode_id, adopted=adopted, trials=trials)
    return await _answer(ctx, job, wait_s, cancel_on_abort=True)


def adoptions(adopted_ids: list[int]) -> list[Adoption]:
    return [Adoption(id=i, evidence="reported with compile_and_bench") for i in dict.fromkeys(adopted_ids)]


async def get_result(
    ctx: AppContext,
    attempt_id: Annotated[int, Field(description="The attempt_id compile_and_bench returned (status running or done)", **ID_BOUNDS)],
    wait_s: Annotated[float | None, Field(description=WAIT_S, ge=0, le=600)] = None,
) -> EvalResult:
    """The result of an evaluation by its attempt_id: for one compile_and_bench answered as running.

    Waits up to wait_s (default 25 s) for an evaluation still running and returns its result
    (the same one compile_and_bench would have returned, recorded once in its episode), or status
    running again with poll_after_s: call again then. Reading a result never evaluates again; a
    finished attempt can be read any time.
    """
    engine = engine_of(ctx)
    job = await _call(engine.evaluation_job, attempt_id)
    if job is None:
        return await _call(engine.get_attempt, attempt_id)
    return await _answer(ctx, job, wait_s, cancel_on_abort=False)


async def _answer(ctx: AppContext, job: Job, wait_s: float | None, *, cancel_on_abort: bool) -> EvalResult:
    engine = state_of(ctx).engine
    try:
        wait = engine.config.eval_wait_s if wait_s is None else wait_s
        return await answer_evaluation(ctx, engine, job, wait, cancel_on_abort=cancel_on_abort)
    except (SageError, *INPUT_FAULTS) as exc:
        raise refusal(exc) from exc


async def record_adoption(
    ctx: AppContext,
    episode_id: Annotated[int, Field(description="The episode from retrieve_rules", **ID_BOUNDS)],
    adopted: Annotated[list[Adoption], Field(description="Items that shaped your kernel: [{id, evidence}] with evidence saying how")] = [],  # noqa: B006
    attempt_id: Annotated[int | None, Field(description="Your best attempt (from compile_and_bench)", **ID_BOUNDS)] = None,
    lesson: Annotated[
        Lesson | None, Field(description="A reusable insight: {title, content, code?, tags?}; what failed and what fixed it")
    ] = None,
    close: Annotated[bool, Field(description="Close and credit the episode now (default); false keeps it open")] = True,
) -> AdoptionReport:
    """Finish an episode: which retrieved items you used, and what you learned.

    Closing credits every shown item (ATU) when the episode has an attempt: adopted items
    move toward the episode's reward, items shown but unused move down. An episode without
    an attempt closes without credit (credited=false, utilities untouched). Returns the
    reward, each item's utility before and after, the memory item created (or strengthened)
    from your lesson, and whether the episode closed. Ids not shown in this episode are refused.
    """
    return await _call(
        engine_of(ctx).record_adoption,
        episode_id,
        adopted,
        attempt_id=attempt_id,
        lesson=lesson,
        close=close,
    )


async def consolidate(
    ctx: AppContext,
    dry_run: Annotated[bool, Field(description="Report what would change without writing")] = False,
    budget_tokens: Annotated[int | None, Field(description="Token budget of the resident rulebook (default from config)")] = None,
) -> ConsolidationReport:
    """Promote proven memory items into the resident rulebook (UGC).

    Items with positive utility, adopted repeatedly across different operators, are
    abstracted into rules; the rulebook is chosen under a token budget; rules that stopped
    helping go back to the pool (never deleted; every run is reversible). Returns promoted,
    demoted, merged clusters, the rulebook and its tokens. SAGE also runs it automatically
    every few closed episodes.
    """
    report = await _call_with_progress(ctx, engine_of(ctx).consolidate, dry_run=dry_run, budget_tokens=budget_tokens)
    return report.model_copy(update={"rulebook": fit_items(report.rulebook)})


async def list_tasks(
    ctx: AppContext,
    level: Annotated[int | None, Field(description="1 single op, 2 fused ops, 3 multi-op blocks")] = None,
    family: Annotated[str | None, Field(description="Operator family, e.g. 'elementwise', 'softmax'")] = None,
) -> list[TaskSummary]:
    """List the bundled operator tasks (id, operator, family, level, example solutions).
    Pass an id to show_task for its reference, or straight to retrieve_rules."""
    return await _call(engine_of(ctx).list_tasks, level=level, family=family)


async def show_task(
    ctx: AppContext,
    task: Annotated[str, Field(description="Bundled task id or path to a reference .py")],
) -> TaskDetail:
    """A task's summary and the PyTorch reference source your ModelNew must match
    (same constructor and forward signature, same outputs within tolerance)."""
    engine = engine_of(ctx)
    detail = await _call(lambda: TaskDetail(**engine.get_task(task).model_dump(), reference_source=engine.task_source(task)))
    return detail.model_copy(update={"reference_source": fit_source(detail.reference_source, task)})


async def search_memory(
    ctx: AppContext,
    query: Annotated[str, Field(description="What you are looking for, e.g. 'UB overflow tiling softmax'")],
    k: Annotated[int, Field(description="How many items: 1-50", ge=1, le=50)] = 10,
    backend: Annotated[str | None, Field(description="Only items for this backend (or for any)")] = None,
    hardware: Annotated[str | None, Field(description="Only items for this chip (or for any)")] = None,
    scope: Annotated[str | None, Field(description="'team' (default) or 'project:NAME'")] = None,
) -> list[ScoredItem]:
    """Search memory without opening an episode (nothing is logged or credited).
    To use an item in a kernel, retrieve it through retrieve_rules so adoption counts."""
    return fit_items(await _call(engine_of(ctx).search_items, query, k=k, backend=backend, hardware=hardware, scope=scope))


async def show_item(ctx: AppContext, item_id: Annotated[int, Field(description="Memory item id", **ID_BOUNDS)]) -> Item:
    """One memory item in full: content, code, tags, utility, adoption counts, provenance."""
    return await _call(engine_of(ctx).get_item, item_id)


async def add_experience(
    ctx: AppContext,
    title: Annotated[str, Field(description="One line naming the insight")],
    content: Annotated[str, Field(description="What to do and why; when it does not apply")],
    code: Annotated[str | None, Field(description="A short code example")] = None,
    operator: Annotated[str | None, Field(description="Operator it is about, e.g. 'softmax'")] = None,
    family: Annotated[str | None, Field(description="Operator family, e.g. 'reduction'")] = None,
    backend: Annotated[str | None, Field(description="Backend it applies to, if specific")] = None,
    hardware: Annotated[str | None, Field(description="Chip it applies to, if specific")] = None,
    tags: Annotated[list[str], Field(description="Short tags: letters, digits, _ . : + -")] = [],  # noqa: B006
    scope: Annotated[str, Field(description="'team' (everyone on this memory), 'private' (only you) or 'project:NAME'")] = "team",
) -> AddResult:
    """Store an experience outside an episode. A near-duplicate strengthens the existing
    item instead (merged=true). Inside an episode prefer record_adoption's lesson, which
    links the lesson to the attempt it came from."""
    new = NewItem(
        title=title,
        content=content,
        code=code,
        operator=operator,
        family=family,
        backend=backend,
        hardware=hardware,
        tags=tags,
        scope=scope,
    )
    return await _call(engine_of(ctx).add_item, new)


async def memory_stats(ctx: AppContext) -> MemoryStats:
    """Counts of items by kind and status, episodes, attempts, adoptions, the rulebook's
    size and the database path this server uses."""
    return await _call(engine_of(ctx).stats)


async def show_episode(ctx: AppContext, episode_id: Annotated[int, Field(description="Episode id", **ID_BOUNDS)]) -> EpisodeDetail:
    """An episode in full: items shown, adoptions, attempts with status and speedup, and the
    utility updates applied when it closed."""
    return fit_episode(await _call(engine_of(ctx).get_episode, episode_id))


async def ping(ctx: AppContext) -> dict[str, str]:
    """Check that the SAGE server is up, which memory database it uses and how candidates are
    confined (bubblewrap, or limits-only with the command that fixes it). Touches nothing."""
    state = state_of(ctx)
    confinement = await _call(state.engine.confinement)
    return {
        "server": "sage",
        "db": state.engine.store.describe(),
        "instance": state.instance,
        "user": engine_of(ctx).user,
        "confinement": confinement.mode,
        "confinement_detail": confinement.describe(),
    }


def _hints(*, read_only: bool = False, destructive: bool = False, idempotent: bool = False) -> ToolAnnotations:
    # Everything here acts on the local memory database and sandbox: closed world.
    return ToolAnnotations(read_only_hint=read_only, destructive_hint=destructive, idempotent_hint=idempotent, open_world_hint=False)


READ = _hints(read_only=True, idempotent=True)
TOOLS: list[tuple[Callable[..., Any], str, ToolAnnotations]] = [
    # Opens an episode and logs what was shown: that log is what credit is applied against.
    (retrieve_rules, "Retrieve rules", _hints()),
    # Runs the candidate in a sandbox and stores an attempt; each call adds one.
    (compile_and_bench, "Compile and benchmark a kernel", _hints()),
    # Reads an evaluation (waiting for it); never starts one.
    (get_result, "Get an evaluation's result", READ),
    # Credit rewrites utilities, but every update is appended to an audit log.
    (record_adoption, "Record adoption and lesson", _hints()),
    # Can demote rules and merge items out of retrieval (reversible, but it changes what every agent sees).
    (consolidate, "Consolidate the rulebook", _hints(destructive=True)),
    (list_tasks, "List tasks", READ),
    (show_task, "Show a task", READ),
    (search_memory, "Search memory", READ),
    (show_item, "Show a memory item", READ),
    # A repeat strengthens the existing item's support: additive, not idempotent.
    (add_experience, "Add an experience", _hints()),
    (memory_stats, "Memory statistics", READ),
    (show_episode, "Show an episode", READ),
    (ping, "Ping", READ),
]
