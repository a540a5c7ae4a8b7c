"""What the hostile-candidate tests share: a victim's world (a memory database,
a secret in a home folder, a loopback listener, task files, another
candidate's build folder) and the checks that it came through untouched.

The candidates in hostile/ carry @PLACEHOLDERS@ for the paths, port and pids
they are told; `candidate()` fills them in.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

from sage_engine.config import Config
from sage_engine.engine import Engine
from sage_engine.models import NewItem

HERE = Path(__file__).parent
HOSTILE = HERE / "hostile"
RELU = HERE / "fixtures" / "tasks" / "relu"


def header(path: Path) -> tuple[str, str]:
    text = path.read_text()
    task = re.search(r"^task: (\S+)$", text, re.MULTILINE)
    expect = re.search(r"^expect: (\S+)$", text, re.MULTILINE)
    assert task and expect, f"{path.name} must say 'task:' and 'expect:' in its docstring"
    return task.group(1), expect.group(1)


class Listener:
    """A loopback TCP listener that records every connection it accepts."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.received.append(conn.recv(4096) or b"<connected>")
                except OSError:
                    self.received.append(b"<connected>")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"


@dataclass
class Victim:
    root: Path
    home: Path
    db: Path
    side_db: Path  # a second database beside the memory: nothing may write it
    secret: str
    listener: Listener
    other_build: Path  # another candidate's build folder in the cache
    task_files: tuple[Path, ...] = (RELU / "reference.py", RELU / "task.json")
    saved: dict[Path, bytes] = field(default_factory=dict)

    @classmethod
    def create(cls, root: Path, cache: Path) -> "Victim":
        home = root / "home"
        home.mkdir(parents=True)
        secret = "SECRET-" + secrets.token_hex(8)
        (home / "secret.txt").write_text(secret)
        data = root / "data"
        data.mkdir()
        db = data / "memory.db"
        with Engine(Config(db_path=db, cache_dir=cache, auto_consolidate_every=0)) as engine:
            for i in range(3):
                engine.add_item(NewItem(title=f"lesson {i}", content=f"what lesson {i} says", operator="relu"))
        side = data / "project.db"
        with Engine(Config(db_path=side, cache_dir=cache, auto_consolidate_every=0)) as engine:
            engine.add_item(NewItem(title="project lesson", content="kept", operator="relu"))
        other = cache / "torch_extensions" / ("0" * 16)
        other.mkdir(parents=True, exist_ok=True)
        (other / "kernel.so").write_bytes(b"not really a kernel")
        victim = cls(root=root, home=home, db=db, side_db=side, secret=secret, listener=Listener(), other_build=other)
        victim.saved = {p: p.read_bytes() for p in (*victim.task_files, other / "kernel.so")}
        victim.saved[side] = side.read_bytes()
        return victim

    def candidate(self, path: Path, pids: list[int]) -> str:
        paths = lambda items: ", ".join(repr(str(p)) for p in items)  # noqa: E731
        return (
            path.read_text()
            .replace("@DB_PATHS@", paths([self.db, self.side_db, self.db.with_name("memory.db-wal")]))
            .replace("@SECRET_PATHS@", paths([self.home / "secret.txt"]))
            .replace("@PORT@", str(self.listener.port))
            .replace("@PIDS@", ", ".join(str(p) for p in pids))
            .replace("@WRITE_PATHS@", paths([*self.task_files, self.other_build, self.db]))
        )

    def untouched(self) -> list[str]:
        """What changed that must not have (empty when everything held).
        A changed task file is restored at once, so no later test sees it."""
        problems = []
        for path, before in self.saved.items():
            if not path.exists() or path.read_bytes() != before:
                problems.append(f"{path} changed")
                path.write_bytes(before)
        extra = sorted(p.name for p in self.other_build.iterdir() if p.name != "kernel.so")
        if extra:
            problems.append(f"files planted in another candidate's build folder: {extra}")
        if self.listener.received:
            problems.append(f"the loopback listener received {self.listener.received}")
        return problems

    def close(self) -> None:
        self.listener.close()


def memory_rows(db: Path) -> dict[str, list[tuple]]:
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {t: sorted(map(tuple, conn.execute(f'SELECT * FROM "{t}"')), key=repr) for t in tables}
    finally:
        conn.close()


def processes_with(marker: str) -> list[int]:
    """Live processes whose command line contains `marker` (a sandbox's scratch folder names its owner)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{name}/stat", "rb") as fh:
                state = fh.read().decode(errors="replace").rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state not in ("Z", "X"):
            found.append(int(name))
    return found
