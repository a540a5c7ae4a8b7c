"""`sage serve`: streamable HTTP behind a bearer token, as a real subprocess."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from sage_engine.engine import Engine
from sage_mcp.mcp.http import BearerAuth, is_loopback, load_or_create_token
from tests.mcp.support import assert_every_schema_error_phrased, text

SAGE = Path(sys.executable).parent / "sage"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}},
}


@contextlib.contextmanager
def _serving(config, tmp_path, *args: str, env: dict[str, str] | None = None, started: list | None = None):
    """`sage serve --port 0 ARGS` running; yields (url, banner); `started` gets the process."""
    proc = subprocess.Popen(
        [str(SAGE), "--db", config.database, "serve", "--port", "0", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
        env={**os.environ, **(env or {})},
    )
    if started is not None:
        started.append(proc)
    try:
        lines = []
        with _deadline(60):
            while not any(line.startswith("connect:") for line in lines):
                line = proc.stderr.readline()
                assert line, f"server exited: {''.join(lines)}"
                lines.append(line)
        banner = "".join(lines)
        yield re.search(r"listening on (\S+)", banner).group(1), banner
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def served(config, tmp_path):
    """`sage serve --port 0` running; yields (url, token, token_file)."""
    token_file = tmp_path / "memory.mcp-token"
    with _serving(config, tmp_path, "--token-file", str(token_file)) as (url, banner):
        token = re.search(r"^token \(.*\): (\S+)$", banner, re.M).group(1)
        yield url, token, token_file


class _deadline:
    """Bound a blocking read loop: SIGALRM interrupts it if the server never speaks."""

    def __init__(self, seconds: int):
        self.seconds = seconds

    def __enter__(self):
        import signal

        def fail(*_):
            raise TimeoutError(f"no banner from `sage serve` within {self.seconds} s")

        self._old = signal.signal(signal.SIGALRM, fail)
        signal.alarm(self.seconds)

    def __exit__(self, *exc):
        import signal

        signal.alarm(0)
        signal.signal(signal.SIGALRM, self._old)


def test_requests_without_the_right_token_are_refused_with_401(served):
    url, token, token_file = served
    headers = {"Accept": "application/json, text/event-stream"}
    for auth in (None, "Bearer wrong-token-xxxxxxxxxxxxxxxx", f"Basic {token}", f"Bearer {token}x", f"Bearer {token[:-1]}"):
        sent = dict(headers, **({"Authorization": auth} if auth else {}))
        r = httpx.post(url, json=INIT, headers=sent, timeout=30)
        assert r.status_code == 401, auth
        assert r.headers["www-authenticate"].startswith("Bearer")
    assert httpx.get(url.replace("/mcp", "/"), timeout=30).status_code == 401
    r = httpx.post(url, json=INIT, headers=dict(headers, Authorization=f"Bearer {token}"), timeout=30)
    assert r.status_code == 200
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600 and token_file.read_text().strip() == token


async def test_a_client_with_the_token_runs_a_real_session_over_http(served):
    url, token, _ = served
    with anyio.fail_after(60):
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with Client(streamable_http_client(url, http_client=http)) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            assert {"retrieve_rules", "compile_and_bench", "record_adoption", "consolidate"} <= tools
            r = await c.call_tool("retrieve_rules", {"task": "silu"})
            assert not r.is_error and r.structured_content["episode_id"] == 1
            r = await c.call_tool("record_adoption", {"episode_id": 1})
            assert r.structured_content["closed"] is True
        http = create_mcp_http_client(headers={"Authorization": "Bearer nope-nope-nope-nope"})
        # The SDK reports the 401 as a generic error response; the status itself is checked above.
        with pytest.RaisesGroup(MCPError, flatten_subgroups=True):
            async with Client(streamable_http_client(url, http_client=http)) as c:
                await c.call_tool("ping", {})


async def test_a_schema_error_over_http_names_the_parameter_of_every_tool(served):
    url, token, _ = served
    with anyio.fail_after(60):
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with Client(streamable_http_client(url, http_client=http)) as c:
            await assert_every_schema_error_phrased(c)


def test_a_non_loopback_bind_needs_allow_remote(tmp_path):
    r = subprocess.run(
        [str(SAGE), "--db", str(tmp_path / "m.db"), "serve", "--host", "0.0.0.0", "--port", "0"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and "--allow-remote" in r.stderr
    assert not (tmp_path / "m.mcp-token").exists()
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("example.com")


def test_the_token_is_created_once_private_and_reused(tmp_path):
    path = tmp_path / "dir" / "t.token"
    token = load_or_create_token(path)
    assert len(token) >= 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_token(path) == token
    os.chmod(path, 0o644)
    with pytest.raises(Exception, match="chmod 600"):
        load_or_create_token(path)


async def test_the_auth_middleware_passes_lifespan_and_refuses_websockets():
    seen = []

    users = []

    async def app(scope, receive, send):
        seen.append(scope["type"])
        users.append([v for k, v in scope.get("headers", ()) if k == b"x-sage-user"])

    sent = []

    async def send(message):
        sent.append(message)

    guard = BearerAuth(app, {"s3cret-token-value": "alice", "another-token-value": "bob"})
    await guard({"type": "lifespan"}, None, send)
    await guard({"type": "websocket", "headers": []}, None, send)
    # A client naming itself is overruled by its token.
    await guard({"type": "http", "headers": [(b"authorization", b"bearer s3cret-token-value"), (b"x-sage-user", b"mallory")]}, None, send)
    await guard({"type": "http", "headers": [(b"authorization", b"Bearer s3cret-token-value")] * 2}, None, send)
    await guard({"type": "http", "headers": [(b"authorization", b"Bearer another-token-value")]}, None, send)
    assert seen == ["lifespan", "http", "http"]
    assert users[1:] == [[b"alice"], [b"bob"]]
    assert sent[0] == {"type": "websocket.close", "code": 1008} and sent[1]["status"] == 401


async def test_each_team_token_records_its_own_name(config, tmp_path):
    tokens = tmp_path / "team.tokens"
    tokens.write_text("# name token\nalice alice-token-0123456789\nbob bob-token-0123456789abc\n")
    tokens.chmod(0o600)
    with _serving(config, tmp_path, "--tokens", str(tokens)) as (url, banner):
        assert "alice, bob" in banner and "alice-token" not in banner
        with anyio.fail_after(60):
            for name, token in (("alice", "alice-token-0123456789"), ("bob", "bob-token-0123456789abc")):
                http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
                async with Client(streamable_http_client(url, http_client=http)) as c:
                    r = await c.call_tool(
                        "add_experience", {"title": f"{name}'s softmax note", "content": f"{name} keeps row sums in fp32 for softmax"}
                    )
                    assert not r.is_error
                    assert (await c.call_tool("ping", {})).structured_content["user"] == name
    with Engine(config) as engine:
        assert {i.title: i.author for i in engine.list_items()} == {"alice's softmax note": "alice", "bob's softmax note": "bob"}


def test_a_tokens_file_others_can_read_is_refused(config, tmp_path):
    tokens = tmp_path / "team.tokens"
    tokens.write_text("alice alice-token-0123456789\n")
    tokens.chmod(0o644)
    r = subprocess.run(
        [str(SAGE), "--db", config.database, "serve", "--port", "0", "--tokens", str(tokens)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and "chmod 600" in r.stderr


async def test_accepted_connections_send_small_responses_without_delay():
    """asyncio turns Nagle off on accepted connections only for sockets that
    say they are TCP; with it on, each response on a keep-alive connection
    waits ~40 ms for the client's delayed ACK."""
    import asyncio
    import socket

    from sage_mcp.mcp.http import listen_socket

    sock = listen_socket("127.0.0.1", 0)
    accepted = asyncio.get_running_loop().create_future()

    async def on_client(reader, writer):
        accepted.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(on_client, sock=sock)
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
        assert await asyncio.wait_for(accepted, 10) != 0
        writer.close()
    finally:
        server.close()
        await server.wait_closed()


async def test_two_agents_with_one_client_name_keep_their_own_episodes(served):
    # Every copy of one agent sends the same clientInfo name; over HTTP without
    # a session, a retrieval must not close the other copy's episode.
    url, token, _ = served
    with anyio.fail_after(120):
        clients = []
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(2):
                http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
                clients.append(await stack.enter_async_context(Client(streamable_http_client(url, http_client=http))))
            first = (await clients[0].call_tool("retrieve_rules", {"task": "silu"})).structured_content["episode_id"]
            second = (await clients[1].call_tool("retrieve_rules", {"task": "silu"})).structured_content["episode_id"]
            assert first != second
            for c, episode in zip(clients, (first, second)):
                r = await c.call_tool("record_adoption", {"episode_id": episode})
                assert not r.is_error, r.content
                assert r.structured_content["closed"] is True


SILU = (Path(__file__).resolve().parents[2] / "sage_engine" / "suite" / "tasks" / "silu" / "solutions" / "cpu_sigmoid_mul.py").read_text()
SLOW_SILU = "import time\n" + SILU.replace("        xf = x.float()", "        time.sleep(2.0)\n        xf = x.float()")


async def test_sigterm_during_an_evaluation_keeps_earlier_attempts_and_credits_only_what_was_evaluated(config, tmp_path):
    token_file = tmp_path / "token"
    started: list = []
    outcomes: list = []
    with _serving(config, tmp_path, "--token-file", str(token_file), started=started) as (url, _):
        token = token_file.read_text().strip()
        with anyio.fail_after(180):
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
            async with Client(streamable_http_client(url, http_client=http)) as c:
                episode = (await c.call_tool("retrieve_rules", {"task": "silu"})).structured_content["episode_id"]
                first = await c.call_tool("compile_and_bench", {"candidate": SILU, "task": "silu", "episode_id": episode, "trials": 1})
                assert not first.is_error and first.structured_content["status"] == "correct"

                async def second():
                    try:
                        outcomes.append(
                            await c.call_tool(
                                "compile_and_bench", {"candidate": SLOW_SILU, "task": "silu", "episode_id": episode, "trials": 1}
                            )
                        )
                    except Exception as exc:  # noqa: BLE001 - the connection may end with the server
                        outcomes.append(exc)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(second)
                    await anyio.sleep(3.0)  # inside the slow candidate's correctness run
                    started[0].send_signal(signal.SIGTERM)
                    await anyio.to_thread.run_sync(lambda: started[0].wait(60))
    assert started[0].returncode is not None
    # The client was answered: finished, or refused as cancelled; or its connection ended with the server.
    done = outcomes[0]
    if not isinstance(done, Exception) and done.is_error:
        assert "cancelled" in text(done), text(done)
    with Engine(config) as engine:
        stored = engine.get_episode(episode)
        finished = not isinstance(done, Exception) and not done.is_error
        assert stored.status == "open" and len(stored.attempt_list) == (2 if finished else 1)
        assert stored.attempt_list[0].status == "correct"
    # Restarted, the idle close credits the episode on what was evaluated.
    with _serving(config, tmp_path, "--token-file", str(token_file), env={"SAGE_EPISODE_IDLE_S": "0.5"}):
        await anyio.sleep(3.0)
    with Engine(config) as engine:
        stored = engine.get_episode(episode)
        assert (stored.status, stored.close_reason, stored.credited) == ("closed", "idle", True)
