"""The SQLite store: one file shared by every SAGE process on a machine.

WAL lets readers run beside one writer; a busy timeout makes writers queue
instead of failing; write transactions start with `BEGIN IMMEDIATE` so two
processes crediting the same item cannot lose an update. Lexical search is
FTS5 with BM25.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from sage_engine.errors import StoreError
from sage_engine.memory.store.base import Store
from sage_engine.memory.store.sql import Row

log = logging.getLogger(__name__)

# bm25 weights per FTS column (title, content, tags, operator, family): the
# title counts most, then tags/operator/family, then the body.
BM25_WEIGHTS = (4.0, 1.0, 2.0, 2.0, 2.0)


class SqliteStore(Store):
    dialect = "sqlite"
    greatest = "max"
    real = "REAL"

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 10_000, bm25_weights: Sequence[float] = BM25_WEIGHTS):
        super().__init__()
        self.path = Path(path)
        self.bm25_weights = tuple(bm25_weights)
        self._timeout_ms = int(busy_timeout_ms)
        self._memory = str(path) == ":memory:"
        if not self._memory:
            if self.path.exists() and self.path.is_dir():
                raise StoreError(f"{self.path} is a directory; give the path of a database file")
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # Each thread has a connection of its own: under WAL a thread that
        # reads (the language server answering the editor) never waits behind
        # another thread's write waiting for the file's lock. An in-memory
        # database exists only in its one connection, which threads share,
        # taking turns.
        self._lock = threading.RLock()
        self._conns: dict[int, sqlite3.Connection] = {}
        self._thread_conn = threading.local()
        self._shared = self._connect() if self._memory else None
        conn = self._connection()
        try:
            mode = self._enter_wal(conn, busy_timeout_ms / 1000)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a SAGE memory database ({exc})") from exc
        if not self._memory and mode.lower() != "wal":
            log.warning("SQLite refused WAL mode (got %s); concurrent writers will wait longer", mode)
        self.migrate()

    def _connect(self) -> sqlite3.Connection:
        try:
            # isolation_level=None: transactions are ours (BEGIN IMMEDIATE).
            conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=self._timeout_ms / 1000)
            conn.row_factory = _dict_row
            conn.execute(f"PRAGMA busy_timeout = {self._timeout_ms}")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a SAGE memory database ({exc})") from exc
        return conn

    def _connection(self) -> sqlite3.Connection:
        """The calling thread's connection (the shared one in memory)."""
        if self._shared is not None:
            return self._shared
        conn = getattr(self._thread_conn, "conn", None)
        if conn is None:
            conn = self._connect()
            with self._lock:
                alive = {t.ident for t in threading.enumerate()}
                for ident in [i for i in self._conns if i not in alive]:
                    self._conns.pop(ident).close()  # its thread has ended: nothing else can use it
                self._conns[threading.get_ident()] = conn
            self._thread_conn.conn = conn
        return conn

    def _enter_wal(self, conn: sqlite3.Connection, within_s: float) -> str:
        """Switch the file to WAL (a setting kept in the file). Two processes
        opening a new memory at once can both ask; SQLite then answers one of
        them "locked" at once, without its busy handler, so ask again."""
        deadline = time.monotonic() + within_s
        delay = 0.005
        while True:
            mode = conn.execute("PRAGMA journal_mode").fetchone()["journal_mode"]
            if mode.lower() == "wal":
                return mode
            try:
                return conn.execute("PRAGMA journal_mode = WAL").fetchone()["journal_mode"]
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(delay)  # another process holds the file for its own switch: back off briefly
            delay = min(delay * 2, 0.1)

    def describe(self) -> str:
        return str(self.path)

    def close(self) -> None:
        with self._lock:
            for conn in [*self._conns.values(), *([self._shared] if self._shared else [])]:
                conn.close()
            self._conns.clear()

    @contextlib.contextmanager
    def _begin(self, write: bool) -> Iterator[sqlite3.Connection]:
        conn = self._connection()
        with self._turn():
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.OperationalError as exc:
                raise self._failure(exc, "cannot open a transaction") from exc
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.OperationalError):
                    raise self._failure(exc, "the transaction failed") from exc
                raise

    def _failure(self, exc: sqlite3.OperationalError, what: str) -> StoreError:
        """A store error that names the file, says nothing was written and what to do."""
        text = str(exc)
        if "locked" in text or "busy" in text:
            why = f"it is locked by another process past busy_timeout_ms ({self._timeout_ms} ms); retry, or stop what holds it"
        elif "full" in text:
            why = "the disk holding it is full (or the file reached its size limit); free space and retry"
        else:
            why = text
        return StoreError(f"{what} on {self.path}: {why}; nothing was written")

    def _turn(self) -> contextlib.AbstractContextManager:
        """Threads take turns only on the one in-memory connection."""
        return self._lock if self._shared is not None else contextlib.nullcontext()

    def _execute(self, conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> tuple[list[Row], int]:
        with self._turn():
            try:
                cur = conn.execute(sql, tuple(params))
                return cur.fetchall(), cur.rowcount
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"the memory refused a write: {exc}") from exc
            except sqlite3.OperationalError as exc:
                if conn.in_transaction:
                    raise  # `_begin` rolls back and names the failure
                raise self._failure(exc, "a statement failed") from exc

    def lexical_rows(self, terms: list[str], limit: int) -> list[Row]:
        if not terms:
            return []
        # Each term quoted: user text can never inject FTS syntax (NEAR, column filters).
        match = " OR ".join(f'"{t}"' for t in terms)
        w = ", ".join(str(x) for x in self.bm25_weights)
        return self.rows(
            f"""
            SELECT items.id, -bm25(items_fts, {w}) AS score, items.status, items.scope, items.author,
                   items.backend, items.hardware, items.utility, items.adoption_rate, items.n_retrieved
            FROM items_fts JOIN items ON items.id = items_fts.rowid
            WHERE items_fts MATCH ?
            ORDER BY bm25(items_fts, {w})
            LIMIT ?
            """,
            (match, limit),
        )

    def lexical_floor(self, terms: list[str], limit: int) -> list[int]:
        match = " OR ".join(f'"{t}"' for t in terms)
        rows = self.rows("SELECT rowid AS id FROM items_fts WHERE items_fts MATCH ? ORDER BY bm25(items_fts) LIMIT ?", (match, limit))
        return [r["id"] for r in rows]

    def _execute_many(self, conn: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._turn():
            conn.executemany(sql, [tuple(r) for r in rows])

    def _has_table(self, name: str) -> bool:
        return self.one("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)) is not None


def _dict_row(cursor: sqlite3.Cursor, row: tuple) -> Row:
    return {d[0]: v for d, v in zip(cursor.description, row)}
