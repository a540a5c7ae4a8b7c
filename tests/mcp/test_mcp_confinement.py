"""Hostile candidates, cancellation and fairness through a real `sage-mcp`:
the server as editors start it (stdio) or as a team shares it (`sage
serve`), driven by the official MCP client, with the evaluation confined by
the real bubblewrap. Skipped where this host cannot confine (the reason is
printed); CI installs bubblewrap so these run there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from sage_engine.config import Config
from sage_engine.evaluation.host.confine import probe
from sage_engine.models import EvalResult
from tests.evaluation.hostile_support import HOSTILE, Victim, header, memory_rows, processes_with
from tests.mcp.support import stdio_params as config_params

CONFINEMENT = probe("auto")
pytestmark = pytest.mark.skipif(not CONFINEMENT.confined, reason=f"needs bubblewrap: {CONFINEMENT.describe()}")

SAGE = Path(sys.executable).parent / "sage"
RELU = Path(__file__).resolve().parents[1] / "evaluation" / "fixtures" / "tasks" / "relu"
GOOD_RELU = (RELU / "solutions" / "cpu_clamp.py").read_text()
HUNG_RELU = GOOD_RELU.replace("return torch.clamp(x, min=0.0)", "while True:\n            pass")
ATTACKS = ("deletes_memory", "reads_home_secret", "connects_loopback", "kills_supervisor", "poisons_reference")
CANCEL_LIMIT_S = 1.0  # a cancelled evaluation's processes are gone within this
SECOND_START_LIMIT_S = 2.0  # another client's evaluation starts within this while one hangs


def stdio_params(db: Path, cwd: Path, cache: Path, **env: str):
    return config_params(Config(db_path=db, cache_dir=cache), cwd, **env)


def _cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def server_pid(marker: str) -> int:
    """The server process whose command line names `marker` (its database path)."""
    found = [p for p in processes_with(marker) if any(b"sage" in a for a in _cmdline(p)[:2])]
    assert found, f"no server process names {marker}"
    return min(found)


def evaluation_processes(server: int) -> list[int]:
    """Processes an evaluation of `server` runs: forks of one of its sandboxed
    workers (the reference, the candidate, and anything the candidate forked)."""
    marker = f"sage-worker-{server}-"
    return [p for p in processes_with(marker) if _cmdline(_ppid(p))[1:3] == [b"-m", b"sage_engine.evaluation.worker"]]


async def gone_within(server: int, limit: float) -> float:
    """Seconds until no evaluation process of `server` is left (fails past `limit` x 10)."""
    start = time.monotonic()
    while evaluation_processes(server):
        assert time.monotonic() - start < 10 * limit, f"evaluation processes still alive: {evaluation_processes(server)}"
        await anyio.sleep(0.01)
    return time.monotonic() - start


def not_attempts(rows: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    """What an evaluation must not change: every table but the attempts the
    server records (and the counter their ids are reserved from)."""
    kept = {t: r for t, r in rows.items() if "attempt" not in t}
    kept["meta"] = [row for row in kept.get("meta", []) if row[0] != "attempt_id_reserved"]
    return kept


async def test_hostile_candidates_sent_over_stdio_reach_nothing_and_the_server_lives(tmp_path):
    root = tmp_path / "victim"
    victim = Victim.create(root, root / "data" / "cache")
    before = memory_rows(victim.db)
    try:
        params = stdio_params(victim.db, tmp_path, victim.db.parent / "cache", HOME=str(victim.home), SAGE_CANDIDATE_ROOTS=str(RELU.parent))
        with anyio.fail_after(600):
            async with Client(params) as c:
                pong = (await c.call_tool("ping", {})).structured_content
                assert pong["confinement"] == "bubblewrap", pong
                server = server_pid(str(victim.db))
                for name in ATTACKS:
                    path = HOSTILE / f"{name}.py"
                    task, expected = header(path)
                    r = await c.call_tool(
                        "compile_and_bench",
                        {
                            "candidate": victim.candidate(path, pids=[server, os.getpid()]),
                            "task": str(RELU) if task == "relu" else task,
                            "trials": 2,
                        },
                    )
                    assert not r.is_error, r.content
                    result = EvalResult.model_validate(r.structured_content)
                    assert result.status == expected, (name, result.status, result.message, result.stdout_tail[-800:])
                    assert result.confinement == "bubblewrap"
                    assert victim.secret not in json.dumps(r.structured_content)
                    assert victim.untouched() == [], name
                    assert not_attempts(memory_rows(victim.db)) == not_attempts(before), name
                    assert (await c.call_tool("ping", {})).structured_content["server"] == "sage"
                r = await c.call_tool("compile_and_bench", {"candidate": GOOD_RELU, "task": str(RELU), "trials": 2})
                assert r.structured_content["status"] == "correct"
        with anyio.fail_after(30):
            assert await gone_within(server, 3.0) < 30
        assert processes_with(f"sage-worker-{server}-") == []
        # A new server opens the memory, and every item is still there.
        with anyio.fail_after(120):
            async with Client(stdio_params(victim.db, tmp_path, victim.db.parent / "cache")) as c:
                listed = json.dumps((await c.call_tool("search_memory", {"query": "lesson"})).structured_content)
                assert all(f"lesson {i}" in listed for i in range(3)), listed
    finally:
        victim.close()


async def _bench_until_running(c: Client, source: str, running: anyio.Event, outcome: dict) -> None:
    async def on_progress(progress, total, message):
        if message and message.startswith("checking case"):
            running.set()

    outcome["result"] = await c.call_tool(
        "compile_and_bench", {"candidate": source, "task": str(RELU), "trials": 1}, progress_callback=on_progress
    )


async def test_a_cancelled_compile_and_bench_kills_its_evaluation_within_a_second(tmp_path):
    db = tmp_path / "memory.db"
    with anyio.fail_after(300):
        async with Client(stdio_params(db, tmp_path, tmp_path / "cache", SAGE_CANDIDATE_ROOTS=str(RELU.parent))) as c:
            server = server_pid(str(db))
            running, outcome = anyio.Event(), {}
            async with anyio.create_task_group() as tg:
                scope = anyio.CancelScope()

                async def hung() -> None:
                    with scope:
                        await _bench_until_running(c, HUNG_RELU, running, outcome)

                tg.start_soon(hung)
                await running.wait()
                assert evaluation_processes(server), "the hung candidate runs in the sandbox"
                scope.cancel()  # the client sends notifications/cancelled
                latency = await gone_within(server, CANCEL_LIMIT_S)
            print(f"cancel -> evaluation processes gone: {latency * 1000:.0f} ms")
            assert latency < CANCEL_LIMIT_S
            assert "result" not in outcome
            # The server lives and evaluates the next candidate on the same worker pool.
            r = await c.call_tool("compile_and_bench", {"candidate": GOOD_RELU, "task": str(RELU), "trials": 1})
            assert r.structured_content["status"] == "correct", r.structured_content["message"]


def _serve(db: Path, cwd: Path) -> tuple[subprocess.Popen, str, str]:
    env = {**os.environ, "SAGE_TIMING_BUDGET_S": "0.2", "SAGE_AUTO_CONSOLIDATE_EVERY": "0", "SAGE_CANDIDATE_ROOTS": str(RELU.parent)}
    proc = subprocess.Popen(
        [str(SAGE), "--db", str(db), "serve", "--port", "0"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=cwd, env=env
    )
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while not any(line.startswith("token") for line in lines):
        assert time.monotonic() < deadline, "no banner from sage serve"
        line = proc.stderr.readline()
        assert line, f"server exited: {''.join(lines)}"
        lines.append(line)
    banner = "".join(lines)
    return proc, re.search(r"listening on (\S+)", banner).group(1), re.search(r"^token \(.*\): (\S+)$", banner, re.M).group(1)


async def test_a_hung_evaluation_holds_up_only_its_own_client_of_a_shared_server(tmp_path):
    db = tmp_path / "memory.db"
    proc, url, token = _serve(db, tmp_path)
    try:
        with anyio.fail_after(300):
            headers = {"Authorization": f"Bearer {token}"}
            async with (
                Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))) as a,
                Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))) as b,
            ):
                # Both workers warm, as on a server that has been up a while.
                r = await b.call_tool("compile_and_bench", {"candidate": GOOD_RELU, "task": str(RELU), "trials": 1})
                assert r.structured_content["status"] == "correct"
                running, outcome = anyio.Event(), {}
                async with anyio.create_task_group() as tg:
                    scope = anyio.CancelScope()

                    async def hung() -> None:
                        with scope:
                            await _bench_until_running(a, HUNG_RELU, running, outcome)

                    tg.start_soon(hung)
                    await running.wait()
                    started: list[float] = []
                    t0 = time.monotonic()

                    async def on_progress(progress, total, message):
                        if message == "loading candidate" and not started:
                            started.append(time.monotonic() - t0)

                    r = await b.call_tool(
                        "compile_and_bench", {"candidate": GOOD_RELU, "task": str(RELU), "trials": 1}, progress_callback=on_progress
                    )
                    finished = time.monotonic() - t0
                    assert "result" not in outcome, "the hung evaluation is still running"
                    scope.cancel()  # client A gives up: over HTTP its request's stream is closed
                    latency = await gone_within(proc.pid, CANCEL_LIMIT_S)
                print(
                    f"second client: started after {started[0] * 1000:.0f} ms, finished after {finished:.2f} s; "
                    f"first client's cancel -> processes gone: {latency * 1000:.0f} ms"
                )
                assert r.structured_content["status"] == "correct", r.structured_content["message"]
                assert started and started[0] < SECOND_START_LIMIT_S
                assert latency < CANCEL_LIMIT_S
                assert (await a.call_tool("ping", {})).structured_content["server"] == "sage"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert processes_with(f"sage-worker-{proc.pid}-") == []
