"""An evaluation that outlives the client's patience: compile_and_bench stops
waiting after wait_s and answers `running` with the attempt id, get_result
reads it back, and the attempt is evaluated, stored and credited once."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client

from sage_engine.engine import Engine
from sage_engine.models import AdoptionReport, EvalResult, RetrievalResult
from sage_mcp.mcp.server import create_server
from tests.mcp.support import SILU_CPU, fast, seed, text

# Correct, and slower than the client below is patient: importing it takes 4 s.
SLOW_SILU = "import time\ntime.sleep(4.0)\n" + SILU_CPU.read_text()
PATIENCE_S = 3.0  # the client's read timeout: a blocking call this long is lost


async def _poll(c: Client, attempt_id: int, **extra) -> tuple[EvalResult, int]:
    polls = 0
    while True:
        r = await c.call_tool("get_result", {"attempt_id": attempt_id, "wait_s": 1, **extra})
        assert not r.is_error, text(r)
        polls += 1
        result = EvalResult.model_validate(r.structured_content)
        if result.status != "running":
            return result, polls
        assert result.attempt_id == attempt_id and result.poll_after_s


async def test_a_client_that_waits_3_s_gets_its_result_by_polling_and_the_episode_is_credited_once(config):
    config = fast(config)
    ids = seed(config)
    with anyio.fail_after(300):
        async with Client(create_server(config), read_timeout_seconds=PATIENCE_S) as c:
            retrieval = RetrievalResult.model_validate((await c.call_tool("retrieve_rules", {"task": "silu", "k": 3})).structured_content)
            episode = retrieval.episode_id
            call = {"candidate": SLOW_SILU, "task": "silu", "episode_id": episode, "adopted_ids": [ids[0]], "trials": 1, "wait_s": 1}
            r = await c.call_tool("compile_and_bench", call)
            assert not r.is_error, text(r)
            first = EvalResult.model_validate(r.structured_content)
            assert first.status == "running" and first.attempt_id and first.episode_id == episode
            assert f"get_result(attempt_id={first.attempt_id})" in first.message and first.poll_after_s

            # Two polls at once wait on the one evaluation; neither starts another.
            results: list[tuple[EvalResult, int]] = []

            async def poll() -> None:
                results.append(await _poll(c, first.attempt_id))

            async with anyio.create_task_group() as tg:
                tg.start_soon(poll)
                tg.start_soon(poll)
            (done, polls), (other, _) = results
            assert done.status == "correct", done.message
            assert done.attempt_id == other.attempt_id == first.attempt_id and done.created_at == other.created_at
            assert polls >= 2, "the evaluation outlasted one poll"
            # Read again once stored: the same attempt, still nothing new.
            again = EvalResult.model_validate((await c.call_tool("get_result", {"attempt_id": first.attempt_id})).structured_content)
            assert again.created_at == done.created_at and again.speedup == done.speedup

            report = AdoptionReport.model_validate(
                (
                    await c.call_tool(
                        "record_adoption",
                        {"episode_id": episode, "attempt_id": first.attempt_id, "adopted": [{"id": ids[0], "evidence": "float32"}]},
                    )
                ).structured_content
            )
            assert report.closed and report.credited and report.reward > 0
    with Engine(config) as engine:
        stored = engine.get_episode(episode)
        assert [a.id for a in stored.attempt_list] == [first.attempt_id]
        assert [a.id for a in stored.adopted] == [ids[0]]
        credited = [u for u in engine.utility_history(ids[0]) if u.episode_id == episode]
        assert len(credited) == 1 and credited[0].after > credited[0].before


async def test_without_wait_s_a_quick_evaluation_answers_in_the_call_itself(config):
    config = fast(config.replace(eval_wait_s=300.0))
    with anyio.fail_after(300):
        async with Client(create_server(config)) as c:
            r = await c.call_tool("compile_and_bench", {"candidate": str(SILU_CPU), "task": "silu", "trials": 1})
            result = EvalResult.model_validate(r.structured_content)
            assert result.status == "correct" and result.poll_after_s is None
            # A finished attempt reads back by its id like any other.
            again = await c.call_tool("get_result", {"attempt_id": result.attempt_id, "wait_s": 0})
            assert EvalResult.model_validate(again.structured_content).created_at == result.created_at


async def test_get_result_for_an_attempt_that_never_existed_says_so(config):
    async with Client(create_server(config), raise_exceptions=True) as c:
        r = await c.call_tool("get_result", {"attempt_id": 4242})
        assert r.is_error and "not_found" in text(r) and "4242" in text(r)


@pytest.mark.parametrize("wait_s", [-1, 601])
async def test_wait_s_outside_its_range_is_refused_and_says_so(config, wait_s):
    async with Client(create_server(config)) as c:
        r = await c.call_tool("compile_and_bench", {"candidate": str(SILU_CPU), "task": "silu", "wait_s": wait_s})
        assert r.is_error and "wait_s" in text(r)
