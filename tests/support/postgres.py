"""A throwaway PostgreSQL cluster for tests: Debian's `postgresql` binaries,
`initdb` + `pg_ctl` on a temporary directory, listening on 127.0.0.1 only
(and a unix socket inside that directory), one fresh database per test.

initdb refuses to run as root, so as root the cluster belongs to the
`postgres` system user the Debian package creates.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tests.support.parts import require

# The stores the suites that run on both (tests/memory, tests/mcp) take as `store_kind`.
STORES = ["sqlite", "postgres"]
SUPERUSER = "sage"
_counter = itertools.count(1)


def bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    bin: Path
    data: Path
    port: int
    owner: str | None  # run the server as this user (when we are root)

    def _cmd(self, *args: str) -> list[str]:
        return (["runuser", "-u", self.owner, "--"] if self.owner else []) + list(args)

    def url(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        subprocess.run(
            self._cmd(
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-o",
                options,
                "-l",
                str(self.data / "server.log"),
                "-w",
                "-t",
                "60",
                "start",
            ),
            check=True,
            capture_output=True,
            timeout=90,
        )

    def stop(self, mode: str = "fast") -> None:
        subprocess.run(self._cmd(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"), capture_output=True, timeout=60)

    def create_database(self) -> str:
        import psycopg

        name = f"sage_test_{os.getpid()}_{next(_counter)}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def start_cluster() -> Cluster:
    """initdb and start; raises RuntimeError with the reason when it cannot."""
    bin_ = bindir()
    if bin_ is None:
        raise RuntimeError("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    owner = None
    root = Path(tempfile.mkdtemp(prefix="sage-pg-"))
    data = root / "data"
    data.mkdir()
    if os.geteuid() == 0:
        try:
            entry = pwd.getpwnam("postgres")
        except KeyError as exc:
            raise RuntimeError("running as root needs the 'postgres' user (from the Debian package)") from exc
        owner = "postgres"
        for path in (root, data):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    cluster = Cluster(bin_, data, _free_port(), owner)
    init = subprocess.run(
        cluster._cmd(str(bin_ / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {init.stderr.strip()[-500:]}")
    cluster.start()
    return cluster


def remove_cluster(cluster: Cluster) -> None:
    cluster.stop("immediate")
    shutil.rmtree(cluster.data.parent, ignore_errors=True)


@contextlib.contextmanager
def postgres_cluster() -> Iterator[Cluster]:
    """A throwaway PostgreSQL cluster, removed afterwards (or a skip saying why not)."""
    try:
        cluster = start_cluster()
    except (RuntimeError, OSError) as exc:
        require("postgres", f"no PostgreSQL server for the tests: {exc}")
    try:
        yield cluster
    finally:
        remove_cluster(cluster)
