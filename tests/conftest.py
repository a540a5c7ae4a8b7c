"""Fixtures shared by every test: real SQLite files under tmp_path, and a real
PostgreSQL cluster (started once per session) for the suites that run on both
stores. Those suites (tests/memory, tests/mcp) override `store_kind` with
both values; everything else runs on SQLite.

Where a test needs a real part this machine lacks (PostgreSQL, bubblewrap, ...),
it is skipped with the reason, unless SAGE_TEST_REQUIRE names that part
(CI sets it): then the missing part fails the test instead.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.models import EvalResult, TimingStats

STORES = ["sqlite", "postgres"]


def require(part: str, reason: str) -> None:
    """Skip for a missing real part, or fail where CI says it must be there."""
    required = {p.strip() for p in os.environ.get("SAGE_TEST_REQUIRE", "").split(",") if p.strip()}
    if part in required or "all" in required:
        pytest.fail(f"{part} is required here (SAGE_TEST_REQUIRE) but unavailable: {reason}")
    pytest.skip(reason)


@contextlib.contextmanager
def postgres_cluster():
    """A throwaway PostgreSQL cluster, removed afterwards (or a skip saying why not)."""
    from tests.support.postgres import remove_cluster, start_cluster

    try:
        cluster = start_cluster()
    except (RuntimeError, OSError) as exc:
        require("postgres", f"no PostgreSQL server for the tests: {exc}")
    try:
        yield cluster
    finally:
        remove_cluster(cluster)


@pytest.fixture(scope="session")
def pg_cluster():
    with postgres_cluster() as cluster:
        yield cluster


@pytest.fixture
def store_kind() -> str:
    return "sqlite"


@pytest.fixture
def db_spec(store_kind: str, tmp_path: Path, request) -> str:
    """The memory a test uses: a SQLite file, or a fresh PostgreSQL database."""
    if store_kind == "sqlite":
        return str(tmp_path / "memory.db")
    cluster = request.getfixturevalue("pg_cluster")
    url = cluster.create_database()
    request.addfinalizer(lambda: cluster.drop_database(url))
    return url


@pytest.fixture
def new_db(store_kind: str, tmp_path: Path, request):
    """A factory of further empty memories of the test's store kind (or of `kind`)."""
    made = iter(range(1, 1000))

    def make(kind: str | None = None) -> str:
        kind = kind or store_kind
        if kind == "sqlite":
            return str(tmp_path / f"memory-{next(made)}.db")
        cluster = request.getfixturevalue("pg_cluster")
        url = cluster.create_database()
        request.addfinalizer(lambda: cluster.drop_database(url))
        return url

    return make


@pytest.fixture(scope="session")
def calibration_dir(tmp_path_factory) -> Path:
    """This host's measured limits, shared by the session's cache dirs:
    measuring takes seconds, and each test's own cache dir would measure
    again. The calibration tests use cache dirs of their own."""
    return tmp_path_factory.mktemp("calibration")


def share_calibration(cache_dir: Path, shared: Path) -> Path:
    cache_dir.mkdir(parents=True, exist_ok=True)
    (cache_dir / "calibration").symlink_to(shared, target_is_directory=True)
    return cache_dir


@pytest.fixture
def config(db_spec: str, tmp_path: Path, calibration_dir: Path) -> Config:
    # Automatic consolidation off: tests consolidate when they mean to.
    cache = share_calibration(tmp_path / "cache", calibration_dir)
    return Config(cache_dir=cache, auto_consolidate_every=0).with_db(db_spec)


@pytest.fixture
def engine(config: Config):
    with Engine(config) as eng:
        yield eng


def make_result(status: str = "correct", ms: float | None = 1.0, speedup: float | None = None, task: str = "t",
                trusted: bool | None = None) -> EvalResult:
    """An evaluation outcome as a harness would report it; used where a test
    is about memory and credit, not about running kernels. A speedup is
    trusted unless `trusted` says otherwise."""
    timing = TimingStats(median_ms=ms, iqr_ms=0.0, mean_ms=ms, min_ms=ms, reps=10) if ms else None
    if speedup is not None and trusted is None:
        trusted = True
    return EvalResult(status=status, task=task, backend="cpu", hardware="x86_64", candidate_hash="0" * 16,
                      correct=status == "correct", candidate_timing=timing, speedup=speedup, speedup_trusted=trusted,
                      speedup_note=None if trusted is not False else "unverified: skipped reading inputs")


def table_rows(engine: Engine) -> dict[str, list[dict]]:
    """Every stored row of every table, read through the store's own export."""
    from sage_engine.memory.store.transfer import export_rows

    out: dict[str, list[dict]] = {}
    for rec in export_rows(engine.store):
        out.setdefault(rec["table"], []).append(rec["row"])
    return out
