"""Fixtures shared by every test: real SQLite files under tmp_path, and a real
PostgreSQL cluster (started once per session) for the suites that run on both
stores. Those suites (tests/memory, tests/mcp) override `store_kind` with
both values; everything else runs on SQLite.

Where a test needs a real part this machine lacks (PostgreSQL, bubblewrap, ...),
it is skipped with the reason, unless SAGE_TEST_REQUIRE names that part
(CI sets it): then the missing part fails the test instead
(`tests.support.parts.require`). Helpers are in tests/support/, not here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sage_engine.config import Config
from sage_engine.engine import Engine
from tests.support.engine import share_calibration
from tests.support.postgres import postgres_cluster


# Servers the tests start as subprocesses (`sage-mcp`, `sage serve`) wait
# for an evaluation's result however loaded the machine is, as the `config`
# fixture does; the tests of a call that stops waiting pass wait_s.
os.environ.setdefault("SAGE_EVAL_WAIT_S", "600")


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


@pytest.fixture
def config(db_spec: str, tmp_path: Path, calibration_dir: Path) -> Config:
    # Automatic consolidation off: tests consolidate when they mean to. A
    # call that waits for an evaluation waits for its result however loaded
    # the machine is; the tests of a call that stops waiting pass wait_s.
    cache = share_calibration(tmp_path / "cache", calibration_dir)
    return Config(cache_dir=cache, auto_consolidate_every=0, eval_wait_s=600.0).with_db(db_spec)


@pytest.fixture
def engine(config: Config):
    with Engine(config) as eng:
        yield eng
