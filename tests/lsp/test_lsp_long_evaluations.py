"""A long evaluation in the editor: the engine's background job (the path an
MCP task or a `get_result` poll takes), cancelled from the editor, and
picked up by the server a reloaded window starts instead of run again."""

from __future__ import annotations

import asyncio
import json

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from sage_engine.engine import Engine

from tests.lsp.support import GOOD, execute, open_doc

BOUND_S = 120
# Loading the module takes seconds: time to cancel it, or to reload the window, while it runs.
SLOW = GOOD.replace("import torch\n", "import time\ntime.sleep(4.0)\nimport torch\n", 1)


def ledger(workspace) -> list[dict]:
    """The running evaluations the servers of this workspace have noted."""
    return [json.loads(p.read_text()) for p in (workspace.root / ".cache" / "running").glob("*/*.json")]


async def until(predicate, what: str, bound: float = BOUND_S):
    async def poll():
        while not (found := predicate()):
            await asyncio.sleep(0.05)  # a file another process writes: there is no event to wait on
        return found

    try:
        return await asyncio.wait_for(poll(), bound)
    except asyncio.TimeoutError:
        pytest.fail(f"no {what} within {bound} s")


async def test_a_running_benchmark_is_cancelled_from_the_editor_and_stores_nothing(lsp, workspace):
    path = workspace.write("kernels/slow.py", SLOW)
    uri = open_doc(lsp, path)
    benchmark = asyncio.ensure_future(execute(lsp, "sage.benchmark", uri))
    (entry,) = await until(lambda: ledger(workspace), "running evaluation noted")
    assert entry["candidate_path"] == str(path) and entry["task"]
    assert (await execute(lsp, "sage.lastResult", uri))["running"] is True

    cancelled = await execute(lsp, "sage.cancelBenchmark", uri)
    assert cancelled["cancelled"] is True and cancelled["attempt_id"] == entry["attempt_id"]
    with pytest.raises(JsonRpcException) as failure:
        await asyncio.wait_for(benchmark, BOUND_S)
    assert failure.value.data == {"kind": "cancelled"}
    summary = await execute(lsp, "sage.lastResult", uri)
    assert summary["running"] is False and summary["result"] is None
    assert ledger(workspace) == []
    with Engine(workspace.config()) as engine:
        assert engine.results_for(str(path)) == []
    # Nothing left running: asking again says so.
    assert (await execute(lsp, "sage.cancelBenchmark", uri))["cancelled"] is False


async def test_the_progress_notifications_cancel_button_cancels_the_evaluation(lsp, workspace):
    path = workspace.write("kernels/slow.py", SLOW)
    uri = open_doc(lsp, path)
    benchmark = asyncio.ensure_future(execute(lsp, "sage.benchmark", uri))
    await until(lambda: ledger(workspace), "running evaluation noted")
    begin = await until(
        lambda: next((v for t, v in lsp.progress_reports.items() if v and getattr(v[0], "kind", "") == "begin"), None), "progress"
    )
    assert begin[0].cancellable is True
    token = next(t for t, v in lsp.progress_reports.items() if v is begin)
    lsp.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
    with pytest.raises(JsonRpcException) as failure:
        await asyncio.wait_for(benchmark, BOUND_S)
    assert failure.value.data == {"kind": "cancelled"}
    with Engine(workspace.config()) as engine:
        assert engine.results_for(str(path)) == []


async def test_a_reloaded_window_shows_the_running_evaluation_and_gets_its_result_without_a_second_run(start_lsp, workspace):
    path = workspace.write("kernels/slow.py", SLOW)
    before = await start_lsp()
    uri = open_doc(before, path)
    asyncio.ensure_future(execute(before, "sage.benchmark", uri)).add_done_callback(lambda f: f.exception())
    (entry,) = await until(lambda: ledger(workspace), "running evaluation noted")

    # The window reloads: the old server is told to shut down and exit, and finishes the evaluation first.
    closing = asyncio.ensure_future(before.shutdown_session())
    after = await start_lsp()
    uri = open_doc(after, path)
    summary = await execute(after, "sage.lastResult", uri)
    assert summary["running"] is True and summary["result"] is None
    # Benchmarking the same text waits for that evaluation's result instead of running another.
    done = await asyncio.wait_for(execute(after, "sage.benchmark", uri), BOUND_S)
    assert done["result"]["attempt_id"] == entry["attempt_id"] and done["result"]["status"] == "correct"
    await asyncio.wait_for(closing, BOUND_S)
    await before.stop()
    with Engine(workspace.config()) as engine:
        assert [r.attempt_id for r in engine.results_for(str(path))] == [entry["attempt_id"]]
    assert ledger(workspace) == []
