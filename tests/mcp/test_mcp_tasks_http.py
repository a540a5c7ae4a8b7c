"""MCP tasks and polled evaluations on a team's `sage serve`, spoken as raw
JSON-RPC (protocol 2025-11-25) so each session can be opened and dropped at
will: a task or an attempt belongs to the token that started it, and both
outlive the connection that started them."""

from __future__ import annotations

import json

import httpx
import pytest

from sage_engine.engine import Engine
from tests.mcp.support import SILU_CPU
from tests.mcp.test_mcp_http import _serving

SLOW_SILU = "import time\ntime.sleep(3.0)\n" + SILU_CPU.read_text()
ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789abc"


class Session:
    """One MCP session over streamable HTTP: initialize, then numbered requests."""

    def __init__(self, url: str, token: str, version: str = "2025-11-25"):
        self.url, self.n = url, 0
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
        init = self.request("initialize", {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}})
        self.capabilities = init["result"]["capabilities"]
        self.headers["mcp-protocol-version"] = init["result"]["protocolVersion"]
        self.notify("notifications/initialized")

    def request(self, method: str, params: dict | None = None) -> dict:
        self.n += 1
        r = httpx.post(
            self.url, json={"jsonrpc": "2.0", "id": self.n, "method": method, "params": params or {}}, headers=self.headers, timeout=300
        )
        r.raise_for_status()
        if "mcp-session-id" in r.headers:
            self.headers["mcp-session-id"] = r.headers["mcp-session-id"]
        if r.headers["content-type"].startswith("text/event-stream"):
            replies = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
            return next(m for m in replies if m.get("id") == self.n)
        return r.json()

    def notify(self, method: str) -> None:
        httpx.post(self.url, json={"jsonrpc": "2.0", "method": method}, headers=self.headers, timeout=30)

    def close(self) -> None:
        httpx.delete(self.url, headers=self.headers, timeout=30)

    def tool(self, name: str, arguments: dict, **extra) -> dict:
        return self.request("tools/call", {"name": name, "arguments": arguments, **extra})


@pytest.fixture
def team(config, tmp_path):
    tokens = tmp_path / "team.tokens"
    tokens.write_text(f"alice {ALICE}\nbob {BOB}\n")
    tokens.chmod(0o600)
    with _serving(config, tmp_path, "--tokens", str(tokens), env={"SAGE_TIMING_BUDGET_S": "0.2"}) as (url, _):
        yield url


def test_a_task_belongs_to_its_token_and_outlives_the_session_that_made_it(team, config):
    alice = Session(team, ALICE)
    assert alice.capabilities["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    created = alice.tool("compile_and_bench", {"candidate": SLOW_SILU, "task": "silu", "trials": 1}, task={"ttl": 60000})
    task = created["result"]["task"]
    assert task["status"] == "working" and task["ttl"] == 60000
    alice.close()  # the client goes away; the evaluation does not

    bob = Session(team, BOB)
    refused = bob.request("tasks/get", {"taskId": task["taskId"]})
    assert "no task" in refused["error"]["message"]
    assert "no task" in bob.request("tasks/result", {"taskId": task["taskId"]})["error"]["message"]
    assert "no task" in bob.request("tasks/cancel", {"taskId": task["taskId"]})["error"]["message"]
    assert bob.request("tasks/list")["result"]["tasks"] == []

    again = Session(team, ALICE)  # a new session of the same token
    assert [t["taskId"] for t in again.request("tasks/list")["result"]["tasks"]] == [task["taskId"]]
    result = again.request("tasks/result", {"taskId": task["taskId"]})["result"]
    assert result["structuredContent"]["status"] == "correct", result
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task["taskId"]}
    assert again.request("tasks/get", {"taskId": task["taskId"]})["result"]["status"] == "completed"
    # The attempt is alice's: bob cannot poll it either.
    attempt = result["structuredContent"]["attempt_id"]
    assert "not_found" in bob.tool("get_result", {"attempt_id": attempt})["result"]["content"][0]["text"]
    assert again.tool("get_result", {"attempt_id": attempt})["result"]["structuredContent"]["status"] == "correct"
    with Engine(config) as engine:
        assert engine.stats().attempts == 1
    # A client of an older revision is offered none of it.
    old = Session(team, ALICE, version="2025-06-18")
    assert "tasks" not in old.capabilities and old.request("tasks/list")["error"]["code"] == -32601


def test_a_running_evaluation_polled_by_another_token_is_not_found(team):
    alice = Session(team, ALICE)
    running = alice.tool("compile_and_bench", {"candidate": SLOW_SILU, "task": "silu", "trials": 1, "wait_s": 0})["result"]
    assert running["structuredContent"]["status"] == "running"
    attempt = running["structuredContent"]["attempt_id"]
    bob = Session(team, BOB)
    assert "not_found" in bob.tool("get_result", {"attempt_id": attempt, "wait_s": 0})["result"]["content"][0]["text"]
    done = alice.tool("get_result", {"attempt_id": attempt, "wait_s": 120})["result"]["structuredContent"]
    assert done["status"] == "correct"


def test_a_tool_without_task_support_refuses_a_task_and_says_which_have_it(team):
    alice = Session(team, ALICE)
    refused = alice.tool("ping", {}, task={})
    assert "compile_and_bench, consolidate" in refused["error"]["message"]
    done = alice.tool("consolidate", {"dry_run": True}, task={})["result"]["task"]
    report = alice.request("tasks/result", {"taskId": done["taskId"]})["result"]
    assert "rulebook" in report["structuredContent"]
