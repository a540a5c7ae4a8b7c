"""A PostgreSQL memory that goes away mid-session: the call gets a clear
store error, the server stays up, and the next call works once the database
is back. Runs on its own cluster, so stopping it disturbs no other test."""

import anyio
import pytest

from sage_engine.config import Config
from tests.support.postgres import postgres_cluster
from tests.mcp.support import connect, seed, text


@pytest.fixture
def own_cluster():
    with postgres_cluster() as cluster:
        yield cluster


async def test_a_database_that_goes_away_is_a_clear_error_and_the_next_call_works(own_cluster, tmp_path):
    config = Config(cache_dir=tmp_path / "cache", auto_consolidate_every=0, pg_connect_timeout_s=2.0).with_db(own_cluster.create_database())
    seed(config)
    async with connect(config) as client:
        first = await client.call_tool("retrieve_rules", {"task": "silu"})
        assert not first.is_error
        await anyio.to_thread.run_sync(own_cluster.stop, "fast")
        with anyio.fail_after(30):
            down = await client.call_tool("retrieve_rules", {"task": "silu"})
        assert down.is_error and "store_error: " in text(down) and "retry" in text(down)
        assert not (await client.call_tool("ping", {})).is_error
        await anyio.to_thread.run_sync(own_cluster.start)
        with anyio.fail_after(30):
            back = await client.call_tool("retrieve_rules", {"task": "silu"})
        assert not back.is_error, text(back)
        assert back.structured_content["episode_id"] == first.structured_content["episode_id"] + 1


async def test_a_restart_during_record_adoption_applies_all_of_it_or_none_and_the_retry_credits_once(own_cluster, tmp_path):
    import psycopg

    from sage_engine.engine import Engine
    from tests.mcp.support import SILU_CPU

    url = own_cluster.create_database()
    config = Config(cache_dir=tmp_path / "cache", auto_consolidate_every=0, pg_connect_timeout_s=2.0, eval_wait_s=600.0).with_db(url)
    ids = seed(config)
    async with connect(config) as client:
        shown = await client.call_tool("retrieve_rules", {"task": "silu"})
        episode = shown.structured_content["episode_id"]
        evaluated = await client.call_tool(
            "compile_and_bench", {"candidate": SILU_CPU.read_text(), "task": "silu", "episode_id": episode, "trials": 1}
        )
        assert not evaluated.is_error, text(evaluated)
        adopted = [{"id": ids[0], "evidence": "sigmoid times x"}]
        # Another session holds the episode's row, so record_adoption waits inside its transaction ...
        holder = await anyio.to_thread.run_sync(lambda: psycopg.connect(url, autocommit=False))
        await anyio.to_thread.run_sync(lambda: holder.execute("SELECT id FROM episodes WHERE id = %s FOR UPDATE", (episode,)))
        results: list = []

        async def adopt():
            results.append(await client.call_tool("record_adoption", {"episode_id": episode, "adopted": adopted}))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(adopt)
                await anyio.sleep(1.5)
                # ... when the server restarts under it.
                await anyio.to_thread.run_sync(own_cluster.stop, "fast")
        assert results[0].is_error and "store_error: " in text(results[0]), text(results[0])
        holder.close()
        await anyio.to_thread.run_sync(own_cluster.start)
        with Engine(config) as engine:  # nothing of it was applied
            stored = engine.get_episode(episode)
            assert stored.status == "open" and not stored.adopted and not stored.updates
        with anyio.fail_after(30):
            again = await client.call_tool("record_adoption", {"episode_id": episode, "adopted": adopted})
        assert not again.is_error, text(again)
        assert again.structured_content["credited"] and again.structured_content["closed"]
    with Engine(config) as engine:
        stored = engine.get_episode(episode)
        assert [a.id for a in stored.adopted] == [ids[0]]
        assert len({u.item_id for u in stored.updates}) == len(stored.updates) > 0  # credited once
