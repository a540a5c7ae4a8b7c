"""`sage-mcp` as editors run it: a subprocess speaking MCP over stdio, driven
by the official client; and two such processes sharing one database."""

from __future__ import annotations

import pytest

import anyio
from mcp import Client
from tests.support.engine import make_result
from tests.mcp.support import SILU_CPU, assert_every_schema_error_phrased, seed, stdio_params, text

from sage_engine.engine import Engine
from sage_engine.models import AdoptionReport, EvalResult, RetrievalResult


async def test_a_stdio_client_runs_a_whole_episode_and_utilities_move_as_atu_says(config, tmp_path):
    ids = seed(config)
    with anyio.fail_after(180):
        async with Client(stdio_params(config, tmp_path)) as c:
            r = await c.call_tool("retrieve_rules", {"task": "silu", "k": 3})
            retrieval = RetrievalResult.model_validate(r.structured_content)
            shown = {i.id for i in retrieval.items}
            adopted = ids[0]
            assert adopted in shown and len(shown) >= 2

            progress = []

            async def on_progress(p, total, message):
                progress.append(message)

            r = await c.call_tool(
                "compile_and_bench",
                {
                    "candidate": SILU_CPU.read_text(),
                    "task": "silu",
                    "episode_id": retrieval.episode_id,
                    "adopted_ids": [adopted],
                    "trials": 1,
                },
                progress_callback=on_progress,
            )
            result = EvalResult.model_validate(r.structured_content)
            assert result.status == "correct", result.message
            assert progress, "progress notifications reach a stdio client"

            r = await c.call_tool(
                "record_adoption",
                {
                    "episode_id": retrieval.episode_id,
                    "attempt_id": result.attempt_id,
                    "adopted": [{"id": adopted, "evidence": "float32 sigmoid then multiply"}],
                    "lesson": {"title": "SiLU: in-place mul after sigmoid", "content": "torch.sigmoid(xf).mul_(xf) saves one temporary."},
                },
            )
            report = AdoptionReport.model_validate(r.structured_content)
            # The reward depends on the measured speedup (any sign); ATU's moves follow from it.
            assert report.closed and report.reward is not None and report.new_item is not None

            r = await c.call_tool("consolidate", {})
            assert not r.is_error, text(r)

    with Engine(config) as engine:
        moved = {u.item_id: u for u in report.updates}
        assert set(moved) == shown and moved[adopted].adopted
        assert moved[adopted].target == pytest.approx(report.reward)
        for other in shown - {adopted}:
            assert moved[other].target == pytest.approx(-config.beta) and engine.get_item(other).utility < 0
        for item_id, u in moved.items():
            assert u.after == pytest.approx((1 - u.eta) * u.before + u.eta * u.target)
            assert engine.get_item(item_id).utility == pytest.approx(u.after)
        # A correct kernel's reward is at least correct_bonus - speedup_weight > -beta.
        assert engine.get_item(adopted).utility > max(engine.get_item(o).utility for o in shown - {adopted})
        episode = engine.get_episode(retrieval.episode_id)
        assert episode.status == "closed" and [a.id for a in episode.adopted] == [adopted]
        assert engine.stats().consolidations == 1
        log = engine.store.rows("SELECT item_id, before, after FROM utility_log WHERE episode_id = ?", (retrieval.episode_id,))
        assert {r["item_id"] for r in log} == shown


def _attempt(config, episode_id: int) -> None:
    with Engine(config) as engine:
        engine.record_result(make_result("correct"), episode_id=episode_id)


async def test_two_server_processes_on_one_database_lose_no_adoption(config, tmp_path):
    ids = seed(config)
    per_client, servers = 6, 2
    closed: list[AdoptionReport] = []

    async def episode(c: Client, n: int) -> None:
        r = await c.call_tool("retrieve_rules", {"task": f"silu variant {n} sigmoid float32", "k": 3})
        episode_id = r.structured_content["episode_id"]
        pick = r.structured_content["items"][n % len(r.structured_content["items"])]["id"]
        # An attempt, stored by a third process: without one the close credits nothing.
        await anyio.to_thread.run_sync(_attempt, config, episode_id)
        r = await c.call_tool("record_adoption", {"episode_id": episode_id, "adopted": [{"id": pick, "evidence": f"run {n}"}]})
        assert not r.is_error, text(r)
        closed.append(AdoptionReport.model_validate(r.structured_content))

    async def drive(server: int) -> None:
        async with Client(stdio_params(config, tmp_path)) as c:
            async with anyio.create_task_group() as tg:
                for n in range(per_client):
                    tg.start_soon(episode, c, server * per_client + n)

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for s in range(servers):
                tg.start_soon(drive, s)

    total = per_client * servers
    assert len(closed) == total and all(r.closed for r in closed)
    with Engine(config) as engine:
        q = engine.store.scalar
        assert q("SELECT COUNT(*) FROM episodes WHERE status = 'closed'") == total
        assert q("SELECT COUNT(*) FROM adoptions") == total
        assert q("SELECT CAST(SUM(n_adopted) AS BIGINT) FROM items WHERE id IN (%s)" % ",".join(map(str, ids))) == total
        shown = q("SELECT COUNT(*) FROM (SELECT DISTINCT episode_id, item_id FROM retrievals) AS s")
        assert q("SELECT COUNT(*) FROM utility_log") == shown == q("SELECT CAST(SUM(n_credited) AS BIGINT) FROM items")
        assert len({r["client"] for r in engine.store.rows("SELECT DISTINCT client FROM episodes")}) == servers


async def test_a_schema_error_over_stdio_names_the_parameter_of_every_tool(config, tmp_path):
    with anyio.fail_after(120):
        async with Client(stdio_params(config, tmp_path)) as c:
            await assert_every_schema_error_phrased(c)
