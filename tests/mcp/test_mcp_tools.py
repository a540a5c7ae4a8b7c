"""Every MCP tool, resource and the prompt, through the official in-memory
client against a real SQLite database in tmp_path."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import anyio
import pytest
from mcp import MCPError
from tests.support.engine import make_result
from tests.mcp.support import (
    SILU_CPU,
    WRONG_SILU,
    assert_phrased,
    connect,
    fast,
    schema_violations,
    seed,
    text,
)

from sage_engine.engine import Engine
from sage_engine.models import (
    AddResult,
    AdoptionReport,
    ConsolidationReport,
    EpisodeDetail,
    EvalResult,
    Item,
    MemoryStats,
    RetrievalResult,
    ScoredItem,
    TaskDetail,
    TaskSummary,
)

PROTOCOL_TOOLS = {"retrieve_rules", "compile_and_bench", "record_adoption", "consolidate"}
READ_ONLY = {"list_tasks", "show_task", "search_memory", "show_item", "memory_stats", "show_episode", "ping", "get_result"}


async def test_every_tool_is_listed_with_an_output_schema_and_truthful_hints(config):
    async with connect(config) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert PROTOCOL_TOOLS | READ_ONLY | {"add_experience"} == set(tools)
    for name, tool in tools.items():
        assert tool.output_schema, name
        assert tool.description and "    " not in tool.description, name
        hints = tool.annotations
        assert hints.read_only_hint is (name in READ_ONLY), name
        assert hints.idempotent_hint is (name in READ_ONLY), name
        assert hints.destructive_hint is (name == "consolidate"), name
        assert hints.open_world_hint is False
    assert "episode_id" in tools["compile_and_bench"].input_schema["properties"]
    assert tools["retrieve_rules"].input_schema["required"] == ["task"]
    # Where the time goes is part of every evaluation's structured output, and the description says so.
    assert "profile" in tools["compile_and_bench"].output_schema["properties"]
    assert "profile.summary" in tools["compile_and_bench"].description


async def test_a_whole_episode_credits_the_adopted_item_up_and_the_unused_ones_down(config):
    config = fast(config)
    ids = seed(config)
    async with connect(config) as c:
        r = await c.call_tool("retrieve_rules", {"task": "silu", "k": 3})
        retrieval = RetrievalResult.model_validate(r.structured_content)
        shown = [i.id for i in retrieval.items]
        assert set(ids) <= set(shown)
        adopted = ids[0]

        updates: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress, total, message):
            updates.append((progress, total, message))

        r = await c.call_tool(
            "compile_and_bench",
            {
                "candidate": str(SILU_CPU),
                "task": "silu",
                "episode_id": retrieval.episode_id,
                "adopted_ids": [adopted],
                "trials": 1,
            },
            progress_callback=on_progress,
        )
        assert not r.is_error, text(r)
        result = EvalResult.model_validate(r.structured_content)
        assert result.status == "correct" and result.attempt_id and result.speedup
        assert result.episode_id == retrieval.episode_id
        assert result.profile.bound in ("memory", "compute", "latency") and result.profile.summary
        assert len(updates) >= 2 and updates[-1][0] == updates[-1][1]
        assert [u[0] for u in updates] == sorted(u[0] for u in updates)

        r = await c.call_tool(
            "record_adoption",
            {
                "episode_id": retrieval.episode_id,
                "attempt_id": result.attempt_id,
                "adopted": [{"id": adopted, "evidence": "computed in float32"}],
                "lesson": {
                    "title": "SiLU on CPU: torch.sigmoid then in-place mul",
                    "content": "sigmoid(x).mul_(x) in float32 matches the reference; cast back at the end.",
                },
            },
        )
        assert not r.is_error, text(r)
        report = AdoptionReport.model_validate(r.structured_content)
        assert report.closed and report.reward > 0
        moved = {u.item_id: u for u in report.updates}
        assert moved[adopted].adopted and moved[adopted].after > moved[adopted].before
        for other in set(shown) - {adopted}:
            assert not moved[other].adopted and moved[other].after < moved[other].before
        assert report.new_item is not None and report.new_item.source_attempt == result.attempt_id

        r = await c.call_tool("show_episode", {"episode_id": retrieval.episode_id})
        detail = EpisodeDetail.model_validate(r.structured_content)
        assert detail.status == "closed" and [a.id for a in detail.adopted] == [adopted]
        assert detail.attempt_list[0].status == "correct"

    with Engine(config) as engine:  # what the server wrote is what the database holds
        assert engine.get_item(adopted).utility > 0
        assert all(engine.get_item(i).utility < 0 for i in set(shown) - {adopted})


# What credit may change on an item; browsing must leave all of it alone.
LEARNED = ("utility", "n_adopted", "n_credited", "adoption_rate", "operators_adopted", "families_adopted", "status")


def learned(config) -> dict[int, tuple]:
    with Engine(config) as engine:
        return {i.id: tuple(getattr(i, f) for f in LEARNED) for i in engine.list_items(limit=1000)}


async def test_twelve_retrievals_without_an_evaluation_leave_every_utility_unchanged(config):
    # Automatic consolidation every 2 credited closes: browsing must not make one due either.
    config = config.replace(auto_consolidate_every=2)
    ids = seed(config)
    before = learned(config)
    async with connect(config) as c:
        episodes = []
        for _ in range(12):
            r = await c.call_tool("retrieve_rules", {"task": "silu"})
            assert not r.is_error, text(r)
            episodes.append(r.structured_content["episode_id"])
        # The last one adopts an item and closes without having evaluated anything.
        r = await c.call_tool("record_adoption", {"episode_id": episodes[-1], "adopted": [{"id": ids[0]}]})
        report = AdoptionReport.model_validate(r.structured_content)
        assert report.closed and not report.credited and report.reward is None and not report.updates
        assert report.close_reason == "explicit" and report.consolidation is None
        stats = MemoryStats.model_validate((await c.call_tool("memory_stats", {})).structured_content)
        first = EpisodeDetail.model_validate((await c.call_tool("show_episode", {"episode_id": episodes[0]})).structured_content)
        last = EpisodeDetail.model_validate((await c.call_tool("show_episode", {"episode_id": episodes[-1]})).structured_content)
    assert learned(config) == before
    assert stats.episodes_closed == stats.episodes_without_evidence == 12
    assert stats.utility_updates == 0 and stats.consolidations == 0 and stats.resident_rules == 0
    assert first.shown and (first.status, first.close_reason, first.credited, first.reward) == ("closed", "next_retrieval", False, None)
    assert not first.updates
    assert [a.id for a in last.adopted] == [ids[0]] and last.credited is False  # kept, but counted for nothing


async def test_an_evaluated_adopted_episode_after_browsing_is_credited(config):
    config = fast(config)
    ids = seed(config)
    async with connect(config) as c:
        for _ in range(2):
            await c.call_tool("retrieve_rules", {"task": "silu", "k": 3})
        r = await c.call_tool("retrieve_rules", {"task": "silu", "k": 3})
        retrieval = RetrievalResult.model_validate(r.structured_content)
        shown = {i.id for i in retrieval.items}
        adopted = ids[0]
        r = await c.call_tool(
            "compile_and_bench",
            {"candidate": str(SILU_CPU), "task": "silu", "trials": 1, "episode_id": retrieval.episode_id, "adopted_ids": [adopted]},
        )
        assert EvalResult.model_validate(r.structured_content).status == "correct", text(r)
        r = await c.call_tool(
            "record_adoption", {"episode_id": retrieval.episode_id, "adopted": [{"id": adopted, "evidence": "float32 sigmoid"}]}
        )
        report = AdoptionReport.model_validate(r.structured_content)
        stats = MemoryStats.model_validate((await c.call_tool("memory_stats", {})).structured_content)
    assert report.closed and report.credited and report.close_reason == "explicit" and report.reward > 0
    moved = {u.item_id: u for u in report.updates}
    assert set(moved) == shown and moved[adopted].after > moved[adopted].before == 0.0
    assert all(moved[i].after < moved[i].before for i in shown - {adopted})
    assert stats.episodes_without_evidence == 2 and stats.utility_updates == len(shown)
    with Engine(config) as engine:
        item = engine.get_item(adopted)
        assert item.n_adopted == 1 and item.n_credited == 1 and item.utility == pytest.approx(moved[adopted].after)


async def test_a_failing_kernel_is_a_result_and_the_server_answers_while_it_runs(config):
    config = fast(config)
    async with connect(config) as c:
        started = anyio.Event()
        outcome: dict = {}

        async def on_progress(progress, total, message):
            started.set()

        async def bench():
            outcome["r"] = await c.call_tool(
                "compile_and_bench", {"candidate": WRONG_SILU, "task": "silu", "trials": 1}, progress_callback=on_progress
            )

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                tg.start_soon(bench)
                await started.wait()
                pong = await c.call_tool("ping", {})
                assert "r" not in outcome  # answered while the evaluation was still running
                assert pong.structured_content["server"] == "sage"
        r = outcome["r"]
        assert not r.is_error
        result = EvalResult.model_validate(r.structured_content)
        assert result.status == "incorrect" and not result.correct and result.mismatch
        assert result.attempt_id is not None


async def test_adopting_an_item_the_episode_never_showed_is_refused_and_says_why(config):
    ids = seed(config, [("Softmax: subtract the row max", "exp after subtracting the max")])
    async with connect(config) as c:
        r = await c.call_tool("retrieve_rules", {"task": "layer norm with fused affine", "k": 1})
        episode = r.structured_content["episode_id"]
        shown = {i["id"] for i in r.structured_content["items"]}
        stranger = max(ids + list(shown)) + 100
        r = await c.call_tool(
            "compile_and_bench", {"candidate": str(SILU_CPU), "task": "silu", "episode_id": episode, "adopted_ids": [stranger]}
        )
        assert r.is_error and f"[{stranger}]" in text(r) and "not shown" in text(r)
        r = await c.call_tool("record_adoption", {"episode_id": episode, "adopted": [{"id": stranger}]})
        assert r.is_error and f"[{stranger}]" in text(r) and "retrieve_rules" in text(r)
        r = await c.call_tool("compile_and_bench", {"candidate": str(SILU_CPU), "task": "silu", "adopted_ids": [1]})
        assert r.is_error and "episode_id" in text(r)


async def test_record_adoption_can_keep_the_episode_open_and_close_it_later(config):
    ids = seed(config)
    async with connect(config) as c:
        r = await c.call_tool("retrieve_rules", {"task": "silu"})
        episode = r.structured_content["episode_id"]
        r = await c.call_tool("record_adoption", {"episode_id": episode, "adopted": [{"id": ids[1]}], "close": False})
        report = AdoptionReport.model_validate(r.structured_content)
        assert not report.closed and report.reward is None and not report.updates
        with Engine(config) as engine:  # an attempt stored by another process: the evidence credit needs
            engine.record_result(make_result("correct", task="silu"), episode_id=episode)
        r = await c.call_tool("record_adoption", {"episode_id": episode})
        report = AdoptionReport.model_validate(r.structured_content)
        assert report.closed and {u.item_id for u in report.updates if u.adopted} == {ids[1]}
        r = await c.call_tool("record_adoption", {"episode_id": episode, "adopted": [{"id": ids[1]}]})
        assert r.is_error and "closed" in text(r)


async def test_retrieving_again_for_the_same_task_closes_that_clients_previous_episode(config):
    seed(config)
    async with connect(config) as c, connect(config) as other:
        first = (await c.call_tool("retrieve_rules", {"task": "silu"})).structured_content["episode_id"]
        theirs = (await other.call_tool("retrieve_rules", {"task": "silu"})).structured_content["episode_id"]
        elsewhere = (await c.call_tool("retrieve_rules", {"task": "gelu"})).structured_content["episode_id"]
        second = (await c.call_tool("retrieve_rules", {"task": "silu"})).structured_content["episode_id"]
        assert len({first, theirs, elsewhere, second}) == 4
        status = {}
        for ep in (first, theirs, elsewhere, second):
            r = await c.call_tool("show_episode", {"episode_id": ep})
            status[ep] = r.structured_content["status"]
    # Only the same client's episode for the same task was closed and credited.
    assert status == {first: "closed", theirs: "open", elsewhere: "open", second: "open"}


async def test_the_background_sweep_closes_an_idle_episode_and_credits_it_only_with_an_attempt(config):
    # Long enough that retrieve_rules finishes before its episode counts as idle.
    config = config.replace(episode_idle_s=1.0)
    swept: list[int] = []
    closed = anyio.Event()

    def on_sweep(reports):
        swept.extend(r.episode_id for r in reports)
        if len(swept) == 2:
            closed.set()

    seed(config)
    async with connect(config, on_sweep=on_sweep) as c:
        browsed = (await c.call_tool("retrieve_rules", {"task": "silu"})).structured_content["episode_id"]
        tried = (await c.call_tool("retrieve_rules", {"task": "gelu"})).structured_content["episode_id"]
        with Engine(config) as engine:
            engine.record_result(make_result("incorrect", task="gelu"), episode_id=tried)
        with anyio.fail_after(10):
            await closed.wait()
        browsed_, tried_ = [
            EpisodeDetail.model_validate((await c.call_tool("show_episode", {"episode_id": e})).structured_content)
            for e in (browsed, tried)
        ]
    assert sorted(swept) == [browsed, tried]
    assert (browsed_.status, browsed_.close_reason, browsed_.credited, browsed_.reward) == ("closed", "idle", False, None)
    assert not browsed_.updates
    assert (tried_.status, tried_.close_reason, tried_.credited) == ("closed", "idle", True)
    assert tried_.reward == pytest.approx(-config.delta) and tried_.updates


async def test_closing_every_nth_episode_consolidates_automatically(config):
    config = config.replace(auto_consolidate_every=2)
    ids = seed(config)
    async with connect(config) as c:
        reports = []
        for _ in range(2):
            episode = (await c.call_tool("retrieve_rules", {"task": "silu"})).structured_content["episode_id"]
            with Engine(config) as engine:
                engine.record_result(make_result("correct", task="silu"), episode_id=episode)
            r = await c.call_tool("record_adoption", {"episode_id": episode, "adopted": [{"id": ids[0]}]})
            reports.append(AdoptionReport.model_validate(r.structured_content))
    assert reports[0].consolidation is None
    assert reports[1].consolidation is not None and not reports[1].consolidation.dry_run


async def test_consolidate_reports_progress_and_the_rulebook(config):
    seed(config)
    async with connect(config) as c:
        updates = []

        async def on_progress(progress, total, message):
            updates.append((progress, total, message))

        r = await c.call_tool("consolidate", {"dry_run": True}, progress_callback=on_progress)
        report = ConsolidationReport.model_validate(r.structured_content)
        assert report.dry_run and report.consolidation_id is None
        assert updates and updates[-1][0] == updates[-1][1] and all(m for _, _, m in updates)
        r = await c.call_tool("consolidate", {"budget_tokens": 500})
        report = ConsolidationReport.model_validate(r.structured_content)
        assert not report.dry_run and report.consolidation_id is not None and report.budget_tokens == 500
        r = await c.call_tool("consolidate", {"budget_tokens": -1})
        assert r.is_error and "budget_tokens" in text(r)


async def test_tasks_can_be_listed_and_shown_with_their_reference_source(config):
    async with connect(config) as c:
        r = await c.call_tool("list_tasks", {"level": 1})
        tasks = [TaskSummary.model_validate(t) for t in r.structured_content["result"]]
        assert tasks and all(t.level == 1 for t in tasks) and "silu" in {t.id for t in tasks}
        r = await c.call_tool("show_task", {"task": "silu"})
        detail = TaskDetail.model_validate(r.structured_content)
        assert detail.operator == "silu" and "class Model" in detail.reference_source
        r = await c.call_tool("show_task", {"task": "sillu"})
        assert r.is_error and "silu" in text(r)  # the message suggests the close id


async def test_memory_tools_search_show_add_and_count_without_opening_episodes(config):
    ids = seed(config)
    async with connect(config) as c:
        r = await c.call_tool("search_memory", {"query": "silu float32 sigmoid", "k": 2})
        found = [ScoredItem.model_validate(i) for i in r.structured_content["result"]]
        assert found and found[0].id in ids and len(found) <= 2
        r = await c.call_tool("show_item", {"item_id": ids[0]})
        assert Item.model_validate(r.structured_content).title == "SiLU: compute sigmoid in float32"
        r = await c.call_tool("show_item", {"item_id": 10_000})
        assert r.is_error and "10000" in text(r)
        r = await c.call_tool(
            "add_experience",
            {
                "title": "GELU: use erf, not tanh",
                "content": "The reference is the exact erf form; the tanh approximation fails fp32 tolerance.",
                "tags": ["gelu"],
            },
        )
        added = AddResult.model_validate(r.structured_content)
        assert not added.merged and added.item.tags == ["gelu"]
        r = await c.call_tool(
            "add_experience",
            {
                "title": "GELU: use erf, not tanh",
                "content": "The reference is the exact erf form; the tanh approximation fails fp32 tolerance.",
            },
        )
        assert AddResult.model_validate(r.structured_content).merged
        r = await c.call_tool("add_experience", {"title": "x", "content": "y", "scope": "../../etc"})
        assert r.is_error and "scope" in text(r)
        r = await c.call_tool("memory_stats", {})
        stats = MemoryStats.model_validate(r.structured_content)
        assert stats.db_path == config.database and stats.episodes_open == 0 and stats.items_by_kind["experience"] == 4
        r = await c.call_tool("ping", {})
        assert r.structured_content["db"] == config.database


async def test_resources_serve_the_rulebook_items_and_tasks(config):
    ids = seed(config)
    async with connect(config) as c:
        listed = {str(r.uri) for r in (await c.list_resources()).resources}
        templates = {t.uri_template for t in (await c.list_resource_templates()).resource_templates}
        assert listed == {"sage://rulebook"} and templates == {
            "sage://items/{item_id}",
            "sage://tasks/{task_id}",
            "sage://attempt/{attempt_id}/roofline.svg",
        }
        rulebook = (await c.read_resource("sage://rulebook")).contents[0]
        assert rulebook.mime_type == "text/markdown" and "No resident rules" in rulebook.text
        item = (await c.read_resource(f"sage://items/{ids[0]}")).contents[0]
        assert Item.model_validate_json(item.text).id == ids[0]
        task = (await c.read_resource("sage://tasks/silu")).contents[0]
        assert "class Model" in task.text and "SiLU" in task.text
        for bad in (
            "sage://items/999",
            "sage://items/abc",
            "sage://tasks/no_such_task",
            "sage://tasks/..%2F..%2Fetc%2Fpasswd",
            "sage://attempt/999/roofline.svg",
            "sage://attempt/abc/roofline.svg",
        ):
            with pytest.raises(MCPError):
                await c.read_resource(bad)


async def test_an_attempts_roofline_is_a_resource_an_agents_client_can_show(config):
    config = fast(config)
    async with connect(config) as c:
        r = await c.call_tool("compile_and_bench", {"candidate": str(SILU_CPU), "task": "silu", "trials": 1})
        result = EvalResult.model_validate(r.structured_content)
        assert result.status == "correct" and result.profile is not None, text(r)
        chart = (await c.read_resource(f"sage://attempt/{result.attempt_id}/roofline.svg")).contents[0]
    assert chart.mime_type == "image/svg+xml" and chart.text.startswith("<svg")
    root = ET.fromstring(chart.text)
    points = {e.get("class") for e in root.iter("{http://www.w3.org/2000/svg}circle") if e.get("class")}
    assert points == {"point reference", "point candidate"}
    assert root.find("{http://www.w3.org/2000/svg}title").text.startswith("silu on cpu")


async def test_the_protocol_prompt_walks_an_agent_through_an_episode(config):
    async with connect(config) as c:
        prompts = {p.name: p for p in (await c.list_prompts()).prompts}
        assert "sage_protocol" in prompts
        text_ = (await c.get_prompt("sage_protocol", {"task": "silu"})).messages[0].content.text
    order = ["retrieve_rules", "compile_and_bench", "adopted_ids", "record_adoption", "lesson", "consolidate"]
    positions = [text_.index(word) for word in order]
    assert positions == sorted(positions) and "`silu`" in text_


async def test_prompt_mistakes_are_invalid_params_that_say_what_to_fix(config):
    async with connect(config) as c:
        with pytest.raises(MCPError) as unknown:
            await c.get_prompt("sage_protocl", {})
        assert unknown.value.code == -32602 and "sage_protocol" in unknown.value.error.message
        with pytest.raises(MCPError) as missing:
            await c.get_prompt("sage_protocol", {})
        assert missing.value.code == -32602 and "task" in missing.value.error.message
        prompt = (await c.list_prompts()).prompts[0]
        assert [(a.name, a.required) for a in prompt.arguments] == [("task", True)]


async def test_k_outside_its_bounds_is_refused_and_the_schema_says_so(config):
    async with connect(config) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        k = tools["retrieve_rules"].input_schema["properties"]["k"]
        assert any(option.get("minimum") == 1 and option.get("maximum") == 50 for option in k["anyOf"])
        for bad in (0, 51):
            r = await c.call_tool("retrieve_rules", {"task": "silu", "k": bad})
            assert r.is_error and text(r) == f"Error executing tool retrieve_rules: invalid_input: k must be between 1 and 50; got {bad}"


async def test_a_schema_error_says_what_to_fix_in_the_words_of_every_tools_parameters(config):
    async with connect(config) as c:
        tools = (await c.list_tools()).tools
        calls = schema_violations(tools)
        assert len(calls) == len([t for t in tools if t.input_schema.get("properties")]) >= 10
        for tool, param, arguments in calls:
            r = await c.call_tool(tool, arguments)
            assert r.is_error
            assert_phrased(tool, param, text(r))
        # Nested values are named by their path, with the schema's whole range.
        r = await c.call_tool("record_adoption", {"episode_id": 1, "adopted": [{"id": 1, "weight": 2}]})
        assert text(r).endswith("invalid_input: adopted[0].weight must be greater than 0 and at most 1; got 2")
        r = await c.call_tool("record_adoption", {"episode_id": 1, "lesson": {"title": "t"}, "close": "maybe"})
        assert text(r).endswith('invalid_input: lesson.content is required. close must be true or false; got "maybe"')
        r = await c.call_tool("compile_and_bench", {"candidate": "x", "task": "silu", "adopted_ids": "1,2"})
        assert "adopted_ids must be a list of integers between 1 and " in text(r)


async def test_expected_refusals_are_logged_without_tracebacks(config, caplog):
    import logging

    caplog.set_level(logging.INFO)
    async with connect(config) as c:
        await c.call_tool("show_item", {"item_id": 99})
        await c.call_tool("record_adoption", {"episode_id": 4242})
        await c.call_tool("retrieve_rules", {"task": "silu", "k": 987654})
        with pytest.raises(MCPError):
            await c.get_prompt("nope", {})
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    # A rejected argument is logged by name; its value is the caller's data.
    assert any("'k'" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if "987654" in r.getMessage()]
