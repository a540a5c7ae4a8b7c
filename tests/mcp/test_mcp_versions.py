"""Every protocol revision the SDKs speak runs a whole episode (retrieve,
an evaluation read back by polling, adoption credited once, consolidate)
over HTTP and over stdio: 2024-11-05, 2025-06-18 and 2025-11-25 with the
initialize handshake, spoken as raw JSON-RPC; 2026-07-28 without it (its
version in every request's `_meta`), with the official Python client."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any, Callable

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from sage_engine.engine import Engine
from tests.mcp.support import SILU_CPU, fast, seed, stdio_params
from tests.mcp.test_mcp_http import _serving
from tests.mcp.test_mcp_tasks_http import Session

HANDSHAKE = ["2024-11-05", "2025-06-18", "2025-11-25"]
Call = Callable[[str, dict], dict]


def reply(result: dict) -> dict:
    """What a client of any revision reads: structuredContent where the
    revision has it, else the JSON text block (2024-11-05)."""
    assert not result.get("isError"), result
    if "structuredContent" in result:
        return result["structuredContent"]
    return json.loads(result["content"][0]["text"])


def episode(call: Call, version: str) -> tuple[int, int]:
    retrieved = call("retrieve_rules", {"task": "silu", "k": 3})
    adopted = retrieved["items"][0]["id"]
    started = call(
        "compile_and_bench",
        {
            "candidate": SILU_CPU.read_text(),
            "task": "silu",
            "episode_id": retrieved["episode_id"],
            "adopted_ids": [adopted],
            "trials": 1,
            "wait_s": 0,
        },
    )
    assert started["status"] == "running", (version, started)
    result = started
    while result["status"] == "running":
        result = call("get_result", {"attempt_id": started["attempt_id"], "wait_s": 5})
    assert result["status"] == "correct" and result["attempt_id"] == started["attempt_id"], (version, result["message"])
    report = call(
        "record_adoption", {"episode_id": retrieved["episode_id"], "attempt_id": result["attempt_id"], "adopted": [{"id": adopted}]}
    )
    assert report["closed"] and report["credited"], (version, report)
    assert "rulebook" in call("consolidate", {"dry_run": True})
    return retrieved["episode_id"], result["attempt_id"]


def check_stored(config, episodes: dict[str, tuple[int, int]]) -> None:
    with Engine(config) as engine:
        for version, (episode_id, attempt_id) in episodes.items():
            stored = engine.get_episode(episode_id)
            assert [a.id for a in stored.attempt_list] == [attempt_id] and stored.credited, version


class StdioSession:
    """`sage-mcp` spoken to as raw JSON lines on its stdin and stdout."""

    def __init__(self, config, cwd, version: str):
        params = stdio_params(config, cwd)
        self.proc = subprocess.Popen(
            [params.command, *params.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=cwd,
            env={**os.environ, **(params.env or {})},
            text=True,
        )
        self.n = 0
        init = self.request("initialize", {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}})
        assert init["result"]["protocolVersion"] == version
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        self.n += 1
        self.send({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            assert line, "sage-mcp closed its stdout"
            message = json.loads(line)
            if message.get("id") == self.n:
                return message

    def tool(self, name: str, arguments: dict) -> dict:
        return self.request("tools/call", {"name": name, "arguments": arguments})

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)


def test_each_handshake_revision_runs_a_whole_episode_over_http(config, tmp_path):
    config = fast(config)
    seed(config)
    done = {}
    with _serving(config, tmp_path, "--token-file", str(tmp_path / "token"), env={"SAGE_TIMING_BUDGET_S": "0.2"}) as (url, _):
        token = (tmp_path / "token").read_text().strip()
        for version in HANDSHAKE:
            session = Session(url, token, version=version)
            done[version] = episode(lambda name, args: reply(session.tool(name, args)["result"]), version)
            session.close()
    check_stored(config, done)


def test_each_handshake_revision_runs_a_whole_episode_over_stdio(config, tmp_path):
    config = fast(config)
    seed(config)
    done = {}
    for version in HANDSHAKE:
        session = StdioSession(config, tmp_path, version)
        try:
            done[version] = episode(lambda name, args: reply(session.tool(name, args)["result"]), version)
        finally:
            session.close()
    check_stored(config, done)


async def _modern_episode(client: Client) -> tuple[int, int]:
    assert client.protocol_version == "2026-07-28"

    async def call(name: str, args: dict) -> dict[str, Any]:
        r = await client.call_tool(name, args)
        assert not r.is_error, r.content
        return r.structured_content if "result" not in (r.structured_content or {}) else r.structured_content["result"]

    # The episode's steps, each a request of its own: no handshake, no session.
    def sync_call(name: str, args: dict) -> dict:
        return anyio.from_thread.run(call, name, args)

    return await anyio.to_thread.run_sync(episode, sync_call, "2026-07-28")


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_a_2026_client_runs_a_whole_episode_without_initialize(config, tmp_path, transport):
    config = fast(config)
    seed(config)
    with anyio.fail_after(300):
        if transport == "stdio":
            async with Client(stdio_params(config, tmp_path), mode="2026-07-28") as c:
                done = await _modern_episode(c)
        else:
            with _serving(config, tmp_path, "--token-file", str(tmp_path / "token"), env={"SAGE_TIMING_BUDGET_S": "0.2"}) as (url, _):
                http = create_mcp_http_client(headers={"Authorization": f"Bearer {(tmp_path / 'token').read_text().strip()}"})
                async with Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as c:
                    done = await _modern_episode(c)
    check_stored(config, {"2026-07-28": done})
