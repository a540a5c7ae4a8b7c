"""Bad input, tried systematically: every call comes back as a tool error or
a result, the server stays up, and a refused call leaves every table as it was.

Strategies lean towards invalid arguments: a candidate that passed
validation would run a real evaluation (a result, but seconds each)."""

from __future__ import annotations

import anyio
import anyio.from_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from tests.mcp.support import seed, snapshot, text

from sage_mcp.mcp.server import create_server

NASTY_PATHS = [
    "../../etc/passwd",
    "/etc/shadow",
    "/etc/passwd",
    "~/.ssh/id_rsa",
    "/proc/self/environ",
    "..",
    "~",
    "....//....//etc/passwd",
    "sage_engine/../../../etc/hosts",
    "C:\\Windows\\win.ini",
    "file:///etc/passwd",
    "/dev/zero",
    "/dev/urandom",
    "\\\\server\\share\\x.py",
    "x.py\x00.txt",
    "%2e%2e%2fetc%2fpasswd",
]
junk_text = st.one_of(
    st.text(max_size=60),
    st.sampled_from(NASTY_PATHS),
    st.binary(max_size=60).map(lambda b: b.decode("latin-1")),  # control bytes, NULs
    st.sampled_from(["", " ", "\x00", "\ud800", "\udfff lone surrogate", "\n\n\n", "ModelNew\x00", "class Model\n\x00"]),
    st.integers(1, 3).map(lambda n: "x" * (25_000 * n) + "\n"),  # past every text limit
)
wrong_type = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
bad_id = st.one_of(st.integers(-(2**63), 0), st.integers(10_000, 2**63 - 1), st.sampled_from([2**64, -(2**70)]), wrong_type)
bad_k = st.one_of(st.integers(-10, 0), st.integers(51, 10**9), wrong_type)
anything = st.one_of(junk_text, wrong_type)


def args(required: dict, optional: dict):
    """Required arguments (sometimes missing) plus any subset of optional ones."""
    req = st.fixed_dictionaries({k: v for k, v in required.items()})
    opt = st.fixed_dictionaries({}, optional={k: v for k, v in optional.items()})
    drop = st.sets(st.sampled_from(sorted(required) or [""]), max_size=1)
    return st.tuples(req, opt, drop).map(lambda t: {k: v for k, v in {**t[0], **t[1]}.items() if k not in t[2]})


adoption = st.one_of(st.fixed_dictionaries({"id": bad_id}, optional={"evidence": anything, "weight": st.floats(-2, 3)}), anything)
lesson = st.one_of(
    st.fixed_dictionaries(
        {"title": anything, "content": anything}, optional={"code": anything, "tags": st.lists(anything, max_size=40), "scope": anything}
    ),
    anything,
)
STRATEGIES = {
    "retrieve_rules": args(
        {"task": junk_text},
        {
            "operator": anything,
            "backend": anything,
            "hardware": anything,
            "k": bad_k,
            "episode_id": bad_id,
            "reference": junk_text,
            "scope": anything,
        },
    ),
    # task never names a real task, so no candidate reaches the sandbox
    "compile_and_bench": args(
        {"candidate": junk_text, "task": junk_text},
        {
            "backend": anything,
            "episode_id": bad_id,
            "adopted_ids": st.one_of(st.lists(bad_id, max_size=3), anything),
            "trials": st.one_of(st.integers(-5, 0), st.integers(21, 10**6), wrong_type),
        },
    ),
    "record_adoption": args(
        {"episode_id": st.one_of(bad_id, st.just(1))},
        {"adopted": st.one_of(st.lists(adoption, max_size=3), anything), "attempt_id": bad_id, "lesson": lesson, "close": anything},
    ),
    "consolidate": args(
        {}, {"dry_run": anything, "budget_tokens": st.one_of(st.integers(-(10**9), -1), st.integers(200_001, 10**12), wrong_type)}
    ),
    "list_tasks": args({}, {"level": anything, "family": anything}),
    "show_task": args({"task": junk_text}, {}),
    "search_memory": args({"query": junk_text}, {"k": bad_k, "backend": anything, "hardware": anything, "scope": anything}),
    "show_item": args({"item_id": bad_id}, {}),
    "add_experience": args(
        {"title": anything, "content": anything},
        {
            "code": anything,
            "operator": anything,
            "family": anything,
            "backend": anything,
            "hardware": anything,
            "tags": st.one_of(st.lists(anything, max_size=40), anything),
            "scope": anything,
        },
    ),
    "memory_stats": args({}, {"unexpected": anything}),
    "show_episode": args({"episode_id": bad_id}, {}),
}


async def bounded(client: Client, tool: str, arguments: dict):
    with anyio.fail_after(30):
        return await client.call_tool(tool, arguments)


@pytest.fixture
def session(config):
    """One server for all examples of a tool, driven from sync hypothesis code."""
    seed(config)
    with anyio.from_thread.start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(Client(create_server(config))) as client:
            # One open episode with shown items, so some ids in the examples exist.
            opened = portal.call(bounded, client, "retrieve_rules", {"task": "silu"})
            assert opened.structured_content["episode_id"] == 1
            yield portal, client, config


@pytest.mark.parametrize("tool", sorted(STRATEGIES))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_bad_arguments_get_an_error_or_a_result_and_refusals_change_nothing(session, tool, data):
    portal, client, config = session
    arguments = data.draw(STRATEGIES[tool], label="arguments")
    before = snapshot(config)
    result = portal.call(bounded, client, tool, arguments)
    if result.is_error:
        # A bare "Error executing tool X" is the SDK's message for a crash: it says nothing to fix.
        assert text(result).strip() != f"Error executing tool {tool}", f"{tool} crashed on {arguments!r}"
        assert snapshot(config) == before, f"refused {tool} call changed the database: {text(result)}"
    else:
        assert result.structured_content is not None
    alive = portal.call(bounded, client, "ping", {})
    assert not alive.is_error
