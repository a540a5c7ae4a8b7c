"""Waiting on background work from a tool call: forward the job's progress to
the caller, stop waiting after `wait_s` and answer what there is.

An evaluation outlives the call that waits for it: a call that stops
waiting answers `running` with the attempt id, `get_result` reads the same
job (or, once it is stored, the attempt) again, and the evaluation runs and
is stored once whoever asks.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

import anyio
import anyio.from_thread
import anyio.lowlevel
from mcp.server.mcpserver import Context

from sage_engine.engine import Engine, Job
from sage_engine.models import EvalResult

log = logging.getLogger(__name__)

Update = tuple[float, float | None, str]
Sink = Callable[[float, float | None, str], Awaitable[None]]


async def follow(job: Job, wait_s: float, sink: Sink | None, *, cancel_on_abort: bool) -> bool:
    """Wait up to `wait_s` for `job`, passing its progress to `sink`;
    whether it ended. With `cancel_on_abort`, the waiting task being
    cancelled (`notifications/cancelled`, the client going away) cancels the
    job: the call that started an evaluation owns it until it answers."""
    done = anyio.Event()
    send, receive = anyio.create_memory_object_stream[Update](64)
    token = anyio.lowlevel.current_token()

    def offer(update: Update) -> None:
        try:
            send.send_nowait(update)
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # progress is advisory: drop an update rather than stall the job's thread

    def listener(changed: Job) -> None:
        if changed.finished:
            anyio.from_thread.run_sync(done.set, token=token)
        elif changed.progress is not None:
            anyio.from_thread.run_sync(offer, changed.progress, token=token)

    unsubscribe = job.subscribe(listener)
    if unsubscribe is None:
        return True
    if job.progress is not None:
        offer(job.progress)  # where it stands now, for a poll that joins late

    async def forward() -> None:
        async with receive:
            async for done_, total, message in receive:
                if sink is None:
                    continue
                try:
                    await sink(done_, total, message)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    log.debug("client went away; progress dropped")

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(forward)
            with send:
                with anyio.move_on_after(wait_s):
                    await done.wait()
    except anyio.get_cancelled_exc_class():
        if cancel_on_abort and not job.finished:
            job.cancel.set()
        raise
    finally:
        unsubscribe()
    return job.finished


async def answer_evaluation(ctx: Context[Any, Any], engine: Engine, job: Job, wait_s: float, *, cancel_on_abort: bool) -> EvalResult:
    """The evaluation's stored result if it ends within `wait_s`, else
    `running`; raises what the evaluation ended with (a refusal, a cancel)."""
    if not await follow(job, wait_s, ctx.report_progress, cancel_on_abort=cancel_on_abort):
        return engine.running_result(job)
    return job.outcome()
