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
    config = Config(cache_dir=tmp_path / "cache", auto_consolidate_every=0, pg_connect_timeout_s=2.0).with_db(
        own_cluster.create_database())
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
