"""No tool result passes what an agent's client accepts (Claude Code: 25,000
tokens), however large the memory's items and however long the episode;
what a reply leaves out it says where to find."""

from __future__ import annotations

import pytest
from mcp import Client

from sage_engine.engine import Engine
from sage_engine.models import Adoption, EpisodeDetail, EvalResult, NewItem, RetrievalResult, ScoredItem
from sage_mcp.mcp.server import create_server
from tests.mcp.support import text

CAP_TOKENS = 25_000


def tokens(reply) -> int:
    # Three characters a token errs high for JSON and code (a tokenizer packs them denser).
    return -(-sum(len(getattr(block, "text", "")) for block in reply.content) // 3)


@pytest.fixture
def crowded(config):
    """Sixty items at every size limit, and an episode that was shown all of them and tried 300 times."""
    with Engine(config) as engine:
        for i in range(60):
            engine.add_item(
                NewItem(
                    title=f"softmax lesson {i} " + "t" * 180,
                    content=(f"softmax tiling row block {i} " * 400)[: config.max_content_chars],
                    code=(f"# {i}\n" + "x = load(ptr + offs)\n" * 3000)[: config.max_code_chars],
                    operator="softmax",
                    tags=[f"tag{j}" for j in range(32)],
                ),
                dedup=False,
            )
        first = engine.retrieve("softmax tiling row block", operator="softmax", k=50, client="c")
        engine.retrieve("softmax tiling row block", operator="softmax", k=50, episode_id=first.episode_id, client="c")
        failed = EvalResult(status="incorrect", message="m" * 2000, task="t", backend="cpu", hardware="x", candidate_hash="h")
        ids = [i.id for i in first.items]
        for n in range(300):
            engine.record_result(failed, episode_id=first.episode_id, adopted=[Adoption(id=ids[n % 50], evidence=f"{n} " + "e" * 1500)])
    return config, first.episode_id


async def test_the_largest_search_retrieval_and_episode_stay_under_the_cap_and_say_where_the_rest_is(crowded):
    config, episode = crowded
    async with Client(create_server(config)) as c:
        found = await c.call_tool("search_memory", {"query": "softmax tiling row block", "k": 50})
        assert tokens(found) < CAP_TOKENS, tokens(found)
        items = [ScoredItem.model_validate(i) for i in found.structured_content["result"]]
        assert len(items) == 50 and all(f"show_item({i.id})" in i.content for i in items)

        retrieved = await c.call_tool("retrieve_rules", {"task": "softmax tiling row block", "operator": "softmax", "k": 50})
        assert tokens(retrieved) < CAP_TOKENS, tokens(retrieved)
        assert len(RetrievalResult.model_validate(retrieved.structured_content).items) == 50

        shown = await c.call_tool("show_episode", {"episode_id": episode})
        assert tokens(shown) < CAP_TOKENS, tokens(shown)
        detail = EpisodeDetail.model_validate(shown.structured_content)
        assert detail.attempts == 300 and detail.cut["attempt_list"] == 300 - len(detail.attempt_list)
        assert detail.attempt_list[-1].id == max(a.id for a in detail.attempt_list)  # the newest are kept

        # One item is whole where it fits.
        whole = await c.call_tool("show_item", {"item_id": items[0].id})
        assert tokens(whole) < CAP_TOKENS and "[cut" not in text(whole)
