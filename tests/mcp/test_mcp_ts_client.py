"""MCP tasks through the official TypeScript SDK (`@modelcontextprotocol/sdk`,
pinned in tests/mcp/ts/package.json; `scripts/test` runs `npm ci` there):
`callToolStream` on compile_and_bench yields the task, its status updates
and the result, and `tasks/cancel` stops the evaluation, over stdio and over
`sage serve`'s streamable HTTP."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sage_engine.config import Config
from sage_engine.engine import Engine
from tests.mcp.support import SAGE_MCP, SILU_CPU
from tests.mcp.test_mcp_http import _serving
from tests.support.parts import require

TS = Path(__file__).resolve().parent / "ts"
RELU = Path(__file__).resolve().parents[1] / "evaluation" / "fixtures" / "tasks" / "relu"
GOOD_RELU = (RELU / "solutions" / "cpu_clamp.py").read_text()
HUNG_RELU = GOOD_RELU.replace("return torch.clamp(x, min=0.0)", "while True:\n            pass")
ENV = {"SAGE_TIMING_BUDGET_S": "0.2", "SAGE_AUTO_CONSOLIDATE_EVERY": "0", "SAGE_CANDIDATE_ROOTS": str(RELU), "SAGE_EVAL_WAIT_S": "600"}


@pytest.fixture(scope="module")
def node() -> str:
    found = shutil.which("node")
    if found is None:
        require("node", "needs Node.js for the TypeScript SDK client")
    if not (TS / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        require("node", f"the TypeScript SDK is not installed: run `npm ci --prefix {TS}` (scripts/test does)")
    return str(found)


def run_client(node: str, spec: dict, cwd: Path) -> dict:
    out = subprocess.run([node, str(TS / "client.mjs"), json.dumps(spec)], cwd=TS, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def stdio(config: Config, tmp_path: Path) -> dict:
    env = {**{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}, **ENV, "SAGE_CACHE_DIR": str(config.cache_dir)}
    return {"transport": "stdio", "command": str(SAGE_MCP), "args": ["--db", config.database, "--quiet"], "cwd": str(tmp_path), "env": env}


def check_stream(seen: dict, config: Config) -> None:
    assert seen["capabilities"]["tasks"]["requests"]["tools"]["call"] == {}
    assert seen["task_tools"] == ["compile_and_bench", "consolidate"]
    messages = seen["messages"]
    assert messages[0] == "taskCreated" and seen["created"]["status"] == "working"
    assert "taskStatus:working" in messages and messages[-2:] == ["taskStatus:completed", "result"], messages
    assert seen["result"]["status"] == "correct" and seen["result"]["episode_id"] == seen["episode_id"]
    assert "timing" in seen["progress"] and seen["progress"][-1] == "done: correct", seen["progress"]
    assert [seen["created"]["taskId"], "completed"] in seen["listed"]
    # notifications/tasks/status as it goes, while the connection lasts (over HTTP on its standalone stream).
    assert seen["notified"] and seen["notified"][-1] == "completed" and "working" in seen["notified"], seen["notified"]
    assert seen["report"]["closed"] and seen["report"]["credited"]
    with Engine(config) as engine:
        assert [a.id for a in engine.get_episode(seen["episode_id"]).attempt_list] == [seen["result"]["attempt_id"]]


def check_cancel(seen: dict, config: Config) -> None:
    assert seen["cancelled"] == seen["after"] == "cancelled"
    assert "already ended (cancelled)" in seen["second_cancel"]
    assert seen["next"] == "correct"  # the workers live on
    with Engine(config) as engine:
        assert engine.stats().attempts == 1  # the cancelled evaluation stored nothing


def test_call_tool_stream_over_stdio_yields_the_task_its_status_and_the_result(node, config, tmp_path):
    seen = run_client(node, {**stdio(config, tmp_path), "scenario": "stream", "candidate": SILU_CPU.read_text(), "task": "silu"}, tmp_path)
    check_stream(seen, config)


def test_a_task_cancelled_over_stdio_stops_its_evaluation(node, config, tmp_path):
    spec = {**stdio(config, tmp_path), "scenario": "cancel", "candidate": HUNG_RELU, "good": GOOD_RELU, "task": str(RELU)}
    seen = run_client(node, spec, tmp_path)
    check_cancel(seen, config)


@pytest.fixture
def http(config, tmp_path, monkeypatch):
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    token_file = tmp_path / "memory.mcp-token"
    with _serving(config, tmp_path, "--token-file", str(token_file)) as (url, _):
        yield {"transport": "http", "url": url, "token": token_file.read_text().strip()}


def test_call_tool_stream_over_http_yields_the_task_its_status_and_the_result(node, config, tmp_path, http):
    seen = run_client(node, {**http, "scenario": "stream", "candidate": SILU_CPU.read_text(), "task": "silu"}, tmp_path)
    check_stream(seen, config)


def test_a_task_cancelled_over_http_stops_its_evaluation(node, config, tmp_path, http):
    seen = run_client(node, {**http, "scenario": "cancel", "candidate": HUNG_RELU, "good": GOOD_RELU, "task": str(RELU)}, tmp_path)
    check_cancel(seen, config)
