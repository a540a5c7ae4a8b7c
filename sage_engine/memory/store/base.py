"""The `Store` contract: every SQL statement SAGE runs goes through a subclass
of this class, so the memory can live in SQLite (one file, the embedded
default) or PostgreSQL (a team server) behind the same methods.

The SQL in the record classes (`items`, `episodes`, `audit`) is portable: it
is written once with `?` placeholders, and each dialect supplies connection
handling, transactions, migrations and lexical search. Services open one
transaction per tool call:

    with store.transaction():          # a write transaction (the default)
        row = store.episodes.get(7)
        store.episodes.close(7, reward, parts, now, "explicit")

Inside a transaction every statement of the calling thread runs on the same
connection; outside one, each statement commits on its own. Write
transactions are serialised across processes (SQLite `BEGIN IMMEDIATE`,
PostgreSQL a transaction-level advisory lock), so read-modify-write sequences
never lose an update; read transactions see one consistent snapshot.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Iterable, Iterator, Sequence

from sage_engine.errors import StoreError
from sage_engine.memory.store.audit import AuditRecords
from sage_engine.memory.store.episodes import EpisodeRecords
from sage_engine.memory.store.items import ItemRecords
from sage_engine.memory.store.schema import MIGRATIONS, split_sql
from sage_engine.memory.store.sql import Row, check_columns, check_text_values, encode

log = logging.getLogger(__name__)


class Store(ABC):
    dialect: ClassVar[str]  # also the name of the Migration field holding this dialect's SQL
    # The SQL name of the two-argument maximum (`max` in SQLite, `GREATEST` in PostgreSQL).
    greatest: ClassVar[str]
    real: ClassVar[str]  # the 64-bit floating point type

    def __init__(self) -> None:
        self._local = threading.local()
        self.items = ItemRecords(self)
        self.episodes = EpisodeRecords(self)
        self.audit = AuditRecords(self)

    # ----------------------------------------------------------- dialect hooks

    @abstractmethod
    def describe(self) -> str:
        """Where the memory lives, safe to print (a path, or a URL without its password)."""

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    @contextlib.contextmanager
    def _begin(self, write: bool) -> Iterator[Any]:
        """Open a transaction on a connection and yield that connection."""

    @abstractmethod
    def _execute(self, conn: Any, sql: str, params: Sequence[Any]) -> tuple[list[Row], int]:
        """Run one statement; return its rows (as dicts) and its row count."""

    @abstractmethod
    def lexical_rows(self, terms: list[str], limit: int) -> list[Row]:
        """Items matching any of `terms`, best first, as rows with a positive
        `score` and the columns ranking needs."""

    @abstractmethod
    def lexical_floor(self, terms: list[str], limit: int) -> list[int]:
        """The bare index query (match, rank, limit; no join, no filters):
        what benchmarks compare retrieval against."""

    @abstractmethod
    def _execute_many(self, conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    @abstractmethod
    def _has_table(self, name: str) -> bool: ...

    def after_import(self) -> None:  # noqa: B027 - optional: only PostgreSQL has sequences to repair
        """Repair what copying rows with their ids leaves behind (sequences)."""

    # ------------------------------------------------------------ transactions

    @contextlib.contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[None]:
        """One transaction for everything the calling thread runs inside it.
        Re-entrant; a write nested in a read transaction is a programming
        error (it could not take the write lock without deadlocking)."""
        current = getattr(self._local, "tx", None)
        if current is not None:
            if write and not current["write"]:
                raise RuntimeError("a write transaction cannot be nested inside a read transaction")
            yield
            return
        with self._begin(write) as conn:
            self._local.tx = {"conn": conn, "write": write}
            try:
                yield
            finally:
                self._local.tx = None

    def in_transaction(self) -> bool:
        return getattr(self._local, "tx", None) is not None

    # ------------------------------------------------------------- statements

    def run(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[Row], int]:
        tx = getattr(self._local, "tx", None)
        if tx is not None:
            return self._execute(tx["conn"], sql, params)
        with self.transaction(write=not sql.lstrip().upper().startswith("SELECT")):
            return self._execute(self._local.tx["conn"], sql, params)

    def run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """One statement for many parameter rows, in one write transaction."""
        with self.transaction():
            self._execute_many(self._local.tx["conn"], sql, rows)

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self.run(sql, params)[0]

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        found = self.rows(sql, params)
        return found[0] if found else None

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = self.one(sql, params)
        return None if row is None else next(iter(row.values()))

    def count(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Rows changed by an UPDATE/DELETE."""
        return self.run(sql, params)[1]

    def insert(self, table: str, row: Row) -> int:
        """Insert one row; the id it was given."""
        return int(self._insert(table, row, " RETURNING id")[0]["id"])

    def insert_row(self, table: str, row: Row) -> None:
        """Insert one row as it is (an import: ids included; `meta` has none)."""
        self._insert(table, row, "")

    def _insert(self, table: str, row: Row, tail: str) -> list[Row]:
        check_columns(table, row)
        check_text_values(table, row)
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        return self.rows(f"INSERT INTO {table} ({cols}) VALUES ({marks}){tail}", [encode(v) for v in row.values()])

    def update(self, table: str, key: int, changes: Row) -> int:
        if not changes:
            return 0
        check_columns(table, changes)
        check_text_values(table, changes)
        sets = ", ".join(f"{c} = ?" for c in changes)
        return self.count(f"UPDATE {table} SET {sets} WHERE id = ?", [*map(encode, changes.values()), key])

    # ----------------------------------------------------------------- schema

    def applied_migrations(self) -> list[str]:
        with self.transaction(write=False):
            if not self._has_table("migrations"):
                return []
            return [r["name"] for r in self.rows("SELECT name FROM migrations ORDER BY name")]

    def migrate(self) -> list[str]:
        """Apply pending migrations, each in the transaction that records it
        (all pending ones in one, under the write lock, so two processes
        opening a new memory at once cannot both apply one)."""
        applied: list[str] = []
        with self.transaction():
            self.run(f"CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at {self.real} NOT NULL)")
            done = {r["name"] for r in self.rows("SELECT name FROM migrations")}
            self.check_known(done)
            for m in MIGRATIONS:
                if m.name in done:
                    continue
                for statement in split_sql(getattr(m, self.dialect)):
                    self.run(statement)
                self.run("INSERT INTO migrations VALUES (?, ?)", (m.name, time.time()))
                applied.append(m.name)
                log.info("applied migration %s to %s", m.name, self.describe())
        return applied

    def schema_status(self) -> dict[str, list[str]]:
        applied = self.applied_migrations()
        return {"applied": applied, "pending": [m.name for m in MIGRATIONS if m.name not in applied]}

    def check_known(self, applied: Iterable[str]) -> None:
        unknown = set(applied) - {m.name for m in MIGRATIONS}
        if unknown:
            raise StoreError(f"{self.describe()} was written by a newer SAGE (migrations {sorted(unknown)}); upgrade SAGE")
