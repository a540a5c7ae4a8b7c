"""Evaluation on a real Ray cluster through the MCP server: the task runs on
a host that has the backend's resource, progress streams back, a host killed
mid-evaluation is retried elsewhere or reported as lost, cancellation reaches
the host, two clients evaluate at once, and the memory is written once, by
the server."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.errors import BackendUnavailable
from sage_engine.models import EvalResult
from sage_mcp.cli import cli
from tests.mcp.support import connect
from tests.ray.conftest import LABEL

REFERENCE = """import torch
import torch.nn as nn

n = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.clamp(x, min=0.0) * 2.0


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
"""


def candidate(delay_s: float = 0.0) -> str:
    return f"""import time
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        time.sleep({delay_s})

    def forward(self, x):
        return x.clamp(min=0.0).mul(2.0)
"""


def ray_config(cluster, tmp_path, **changes) -> Config:
    base = dict(
        db_path=tmp_path / "memory.db",
        cache_dir=tmp_path / "cache",
        executor="ray",
        ray_address=cluster.address,
        ray_resources={"cpu": dict(LABEL)},
        timing_budget_s=0.2,
        correctness_trials=1,
        auto_consolidate_every=0,
        eval_timeout_s=90.0,
        ray_queue_timeout_s=60.0,
        eval_wait_s=600.0,  # the result, not "running": these tests read it from the call
    )
    base.update(changes)
    return Config(**base)


def running_node(cluster, since: float, within: float = 60.0):
    """The worker node running the (only) evaluation submitted after `since`
    (time.time()), once Ray says it runs: the state API lags, so a finished
    earlier evaluation can still read RUNNING for a moment."""
    from sage_engine.evaluation.cluster.ray import evaluation_tasks

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for t in evaluation_tasks("RUNNING", detail=True):
            node = cluster.node_of(t.node_id)
            if node is not None and (t.creation_time_ms or 0) >= since * 1000:
                return node
        time.sleep(0.2)  # polling the cluster's own state API
    raise AssertionError("no evaluation started on a worker node")


async def test_an_evaluation_runs_on_a_host_with_the_resource_and_streams_progress(ray_cluster, tmp_path):
    config = ray_config(ray_cluster, tmp_path)
    messages: list[str] = []

    async def on_progress(p, total, message):
        messages.append(message)

    async with connect(config, within=240) as c:
        r = await c.call_tool("compile_and_bench", {"candidate": candidate(), "task": REFERENCE}, progress_callback=on_progress)
    result = EvalResult.model_validate(r.structured_content)
    assert result.status == "correct", result.message
    assert result.host and result.speedup is not None and result.attempt_id == 1
    assert any("(on " in m for m in messages) and "checking case 1/1" in " ".join(messages)
    with Engine(config) as engine:
        assert engine.store.scalar("SELECT host FROM attempts WHERE id = 1") == result.host
        assert engine.stats().attempts == 1


async def test_a_host_running_python_through_a_symlinked_virtualenv_evaluates_in_the_sandbox(ray_cluster, tmp_path):
    # The virtualenv reached through a link under /tmp, which the sandbox
    # covers with its own /tmp: the link's path does not exist inside it.
    links = Path(tempfile.mkdtemp(prefix="sage-linked-venv-", dir="/tmp"))
    (links / "venv").symlink_to(sys.prefix, target_is_directory=True)
    python = links / "venv" / Path(sys.executable).relative_to(sys.prefix)
    ray_cluster.add_worker("linked", {"LINKED": 1}, python=str(python))
    try:
        ray_cluster.wait_for_nodes()
        config = ray_config(ray_cluster, tmp_path, ray_resources={"cpu": {"LINKED": 1}})
        async with connect(config, within=240) as c:
            r = await c.call_tool("compile_and_bench", {"candidate": candidate(), "task": REFERENCE})
        result = EvalResult.model_validate(r.structured_content)
        assert result.status == "correct", result.message
        assert result.confinement.startswith("bubblewrap") and result.speedup is not None
    finally:
        ray_cluster.remove_worker("linked")
        shutil.rmtree(links)


async def bench_and_kill_its_host(config: Config, cluster) -> tuple[EvalResult, object]:
    """Send a 6 s evaluation through the MCP server; kill the raylet of the node that runs it."""
    got: dict[str, EvalResult] = {}
    since = time.time()
    async with connect(config, within=300) as c:

        async def submit():
            r = await c.call_tool("compile_and_bench", {"candidate": candidate(6.0), "task": REFERENCE})
            got["r"] = EvalResult.model_validate(r.structured_content)

        async with anyio.create_task_group() as tg:
            tg.start_soon(submit)
            node = await anyio.to_thread.run_sync(running_node, cluster, since)
            node.kill_raylet()
    return got["r"], node


async def test_a_host_killed_mid_evaluation_is_retried_on_another(ray_cluster, tmp_path):
    config = ray_config(ray_cluster, tmp_path)
    result, node = await bench_and_kill_its_host(config, ray_cluster)
    assert result.status == "correct", result.message
    assert "retried on" in result.message and "evaluation host lost" in result.message
    with Engine(config) as engine:
        assert engine.stats().attempts == 1  # recorded once
    ray_cluster.add_worker(f"{node.name}2", LABEL)  # back to two labelled hosts for the next tests
    ray_cluster.wait_for_nodes()


async def test_losing_the_only_host_with_the_resource_reports_the_host_lost(ray_cluster, tmp_path):
    # A label only one worker carries: once it is gone, no host can take the retry.
    only = ray_cluster.add_worker("solo", {"SOLO": 1})
    ray_cluster.wait_for_nodes()
    config = ray_config(ray_cluster, tmp_path, ray_resources={"cpu": {"SOLO": 1}}, ray_queue_timeout_s=15.0)
    result, node = await bench_and_kill_its_host(config, ray_cluster)
    assert node is only
    assert result.status == "host_error" and result.message.startswith("evaluation host lost"), result.message


async def test_two_clients_evaluate_at_once(ray_cluster, tmp_path):
    config = ray_config(ray_cluster, tmp_path)
    results: list[EvalResult] = []

    async def client(n: int) -> None:
        async with connect(config, within=300) as c:
            r = await c.call_tool("compile_and_bench", {"candidate": candidate(1.0), "task": REFERENCE})
            results.append(EvalResult.model_validate(r.structured_content))

    async with anyio.create_task_group() as tg:
        for n in range(2):
            tg.start_soon(client, n)
    assert [r.status for r in results] == ["correct", "correct"]
    assert sorted(r.attempt_id for r in results) == [1, 2]


async def test_cancelling_the_request_cancels_the_remote_evaluation(ray_cluster, tmp_path):
    from sage_engine.evaluation.cluster.ray import evaluation_tasks

    config = ray_config(ray_cluster, tmp_path)
    since = time.time()
    async with connect(config, within=300) as c:
        async with anyio.create_task_group() as tg:
            tg.start_soon(c.call_tool, "compile_and_bench", {"candidate": candidate(60.0), "task": REFERENCE})
            await anyio.to_thread.run_sync(running_node, ray_cluster, since)
            tg.cancel_scope.cancel()  # the client cancels its request
        with anyio.fail_after(60):
            while evaluation_tasks("RUNNING"):
                await anyio.sleep(0.2)  # polling the cluster's state API
        assert not (await c.call_tool("ping", {})).is_error
    with Engine(config) as engine:
        assert engine.stats().attempts == 0


def test_an_unreachable_cluster_is_a_clear_error_naming_ray_address_and_local_still_works(tmp_path):
    from sage_engine.evaluation.cluster.ray import connect as ray_connect

    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="RAY_ADDRESS=127.0.0.1:1"):
        ray_connect(Config(executor="ray", ray_address="127.0.0.1:1"))
    assert time.monotonic() - started < 30
    local = Config(db_path=tmp_path / "m.db", cache_dir=tmp_path / "cache", executor="local", timing_budget_s=0.2, correctness_trials=1)
    with Engine(local) as engine:
        assert engine.evaluate(candidate(), REFERENCE).status == "correct"


async def test_hosts_and_evaluations_in_flight_are_visible(ray_cluster, tmp_path):
    config = ray_config(ray_cluster, tmp_path)
    with Engine(config) as engine:
        hosts = engine.evaluation_hosts()
        assert sum(h.total.get("NPU", 0) for h in hosts if h.alive) >= 2
        assert all("CPU" in h.total for h in hosts if h.alive)
        # Nothing runs yet: every host's NPUs are free (read per node, not left at 0).
        assert all(h.free.get("NPU", 0) == h.total.get("NPU", 0) for h in hosts if h.alive)
    listing = CliRunner().invoke(
        cli, ["--db", str(config.db_path), "--executor", "ray", "--json", "backends", "list"], env={"RAY_ADDRESS": ray_cluster.address}
    )
    assert listing.exit_code == 0, listing.output
    shown = json.loads(listing.output)
    assert {b["name"] for b in shown["backends"]} >= {"cpu", "npu"}
    assert sum(h["total"].get("NPU", 0) for h in shown["hosts"] if h["alive"]) >= 2
    since = time.time()
    async with connect(config, within=300) as c:
        async with anyio.create_task_group() as tg:
            tg.start_soon(c.call_tool, "compile_and_bench", {"candidate": candidate(4.0), "task": REFERENCE})
            await anyio.to_thread.run_sync(running_node, ray_cluster, since)
            with Engine(config) as engine:
                running = engine.running_evaluations()
            assert [r.state for r in running] == ["running"] and running[0].host
            assert running[0].backend == "cpu" and running[0].task.startswith("inline-")
