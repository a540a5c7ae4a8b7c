"""Every text field is checked the same way on both stores: a NUL in an
adoption's evidence is refused over MCP naming the field, before anything is
stored (SQLite would keep it, PostgreSQL cannot)."""

from __future__ import annotations

from tests.mcp.support import connect, seed, snapshot, text


async def test_a_nul_in_adoption_evidence_is_refused_naming_the_field_on_both_stores(config):
    (item, *_) = seed(config)
    async with connect(config) as client:
        r = await client.call_tool("retrieve_rules", {"task": "SiLU compute sigmoid in float32"})
        episode = r.structured_content["episode_id"]
        before = snapshot(config)
        refused = await client.call_tool("record_adoption", {"episode_id": episode, "adopted": [{"id": item, "evidence": "used\x00it"}]})
        assert refused.is_error and f"invalid_input: evidence for item {item} contains a NUL byte" in text(refused)
        assert snapshot(config) == before
        done = await client.call_tool("record_adoption", {"episode_id": episode, "adopted": [{"id": item, "evidence": "used it"}]})
        assert not done.is_error and done.structured_content["closed"] is True
