"""Hostile candidates against the real, confined harness (bubblewrap, no
stand-ins): none of them reaches the memory database, a secret in the
user's home, a loopback listener, the harness's process, the task's files or
another candidate's build; the cheats among them are rejected; and nothing
they started outlives the harness.

Each candidate in hostile/ passes the static checks: the sandbox and the
dynamic checks are what stop it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sage_engine.engine import Engine
from sage_engine.evaluation.harness import Harness
from sage_engine.evaluation.host.tasks import load_task

from tests.evaluation.support import fast_config
from tests.evaluation.hostile_support import HOSTILE, RELU, Victim, header, memory_rows, processes_with

CANDIDATES = sorted(HOSTILE.glob("*.py"))
GOOD = (RELU / "solutions" / "cpu_clamp.py").read_text()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("victim")
    cache = root / "cache"
    victim = Victim.create(root, cache)
    victim.saved[victim.db] = victim.db.read_bytes()  # the harness never writes the memory
    config = fast_config(cache, db_path=victim.db, home_dir=str(victim.home), correctness_trials=2, eval_timeout_s=60.0)
    harness = Harness(config)
    if not harness.confinement.confined:
        harness.close()
        victim.close()
        pytest.skip(f"needs bubblewrap: {harness.confinement.describe()}")
    yield victim, harness
    harness.close()
    victim.close()


def test_the_hostile_folder_covers_each_attack():
    assert {p.stem for p in CANDIDATES} >= {
        "deletes_memory",
        "reads_home_secret",
        "connects_loopback",
        "kills_supervisor",
        "poisons_reference",
        "returns_tensor_subclass",
        "patches_torch",
        "works_after_returning",
        "caches_across_calls",
        "stops_reference",
        "slows_reference",
    }


@pytest.mark.parametrize("path", CANDIDATES, ids=lambda p: p.stem)
def test_hostile_candidate_is_contained_by_the_harness(world, path: Path):
    victim, harness = world
    task_id, expected = header(path)
    task = load_task(str(RELU)) if task_id == "relu" else load_task(task_id)
    source = victim.candidate(path, pids=[os.getpid(), *harness.pool.worker_pids()])
    result = harness.evaluate(task, source)
    assert result.status == expected, (result.status, result.message, result.stdout_tail[-1500:])
    assert result.confinement == "bubblewrap"
    assert victim.secret not in result.model_dump_json()
    assert victim.untouched() == []
    with Engine(harness.config) as engine:  # the memory still opens, with everything in it
        assert sum(engine.stats().items_by_kind.values()) == 3
    if expected == "rejected":
        assert any(d.category == "cheat" for d in result.diagnostics), result.diagnostics
    if "HOSTILE" in path.read_text() and expected == "correct":
        assert "HOSTILE blocked" in result.stdout_tail and "HOSTILE wrote" not in result.stdout_tail
    # The harness (this process) is alive, and serves the next candidate.
    assert harness.evaluate(task, GOOD).status == "correct"


def test_nothing_a_hostile_candidate_started_outlives_the_harness(tmp_path):
    victim = Victim.create(tmp_path, tmp_path / "cache")
    marker = f"sage-worker-{os.getpid()}-"
    before = set(processes_with(marker))
    try:
        with Harness(fast_config(tmp_path / "cache", db_path=victim.db, home_dir=str(victim.home))) as harness:
            if not harness.confinement.confined:
                pytest.skip(f"needs bubblewrap: {harness.confinement.describe()}")
            seen: set[int] = set()
            for name in ("works_after_returning", "kills_supervisor", "works_after_returning"):
                harness.evaluate(load_task(str(RELU)), victim.candidate(HOSTILE / f"{name}.py", pids=[]))
                seen |= set(processes_with(marker)) - before
            assert seen, "the sandboxes ran"
        assert set(processes_with(marker)) - before == set()
        assert memory_rows(victim.db)["items"], "the memory is intact"
    finally:
        victim.close()
