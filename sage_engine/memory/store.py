"""The SQLite store: one file shared by every SAGE process.

WAL lets readers run beside one writer; a busy timeout makes writers queue
instead of failing; every read-modify-write runs in `BEGIN IMMEDIATE` so two
processes crediting the same item cannot lose an update. The store only
stores: ranking, credit and gating math live in the pure modules beside it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import sqlite_utils

from sage_engine.errors import NotFound, StoreError
from sage_engine.memory.retrieval import Candidate
from sage_engine.memory.schema import MIGRATIONS
from sage_engine.models import Item

log = logging.getLogger(__name__)

JSON_COLUMNS = ("tags", "operators_adopted", "derived_from")
EXPORT_TABLES = ("items", "episodes", "retrievals", "attempts", "adoptions", "utility_log", "consolidations", "meta")


class Store:
    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 10_000):
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we issue BEGIN IMMEDIATE ourselves; sqlite-utils
        # nests its own writes as savepoints inside our transactions.
        self.conn = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
        )
        self.conn.row_factory = sqlite3.Row
        self.db = sqlite_utils.Database(self.conn)
        self._lock = threading.RLock()
        self.conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(path) != ":memory:" and mode.lower() != "wal":
            log.warning("SQLite refused WAL mode (got %s); concurrent writers will wait longer", mode)
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.execute("PRAGMA foreign_keys = ON")
        self._migrate()

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that holds the database's write lock from its
        first statement, so read-modify-write sequences are serialised across
        processes. Re-entrant within a thread."""
        with self._lock:
            if self.conn.in_transaction:
                yield self.conn
                return
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            else:
                self.conn.execute("COMMIT")

    def _migrate(self) -> None:
        with self.transaction() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
            done = {r[0] for r in conn.execute("SELECT name FROM migrations")}
            known = {name for name, _ in MIGRATIONS}
            unknown = done - known
            if unknown:
                raise StoreError(
                    f"{self.path} was written by a newer SAGE (migrations {sorted(unknown)}); upgrade SAGE"
                )
            for name, sql in MIGRATIONS:
                if name in done:
                    continue
                # executescript would COMMIT our transaction; run statement by statement.
                for statement in _split_sql(sql):
                    conn.execute(statement)
                conn.execute("INSERT INTO migrations VALUES (?, ?)", (name, time.time()))
                log.info("applied migration %s to %s", name, self.path)

    def query(self, sql: str, params: Sequence[Any] | dict = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self.conn.execute(sql, params).fetchall()

    def scalar(self, sql: str, params: Sequence[Any] | dict = ()) -> Any:
        rows = self.query(sql, params)
        return rows[0][0] if rows else None

    def insert(self, table: str, row: dict[str, Any]) -> int:
        with self.transaction():
            return self.db[table].insert(_encode(row)).last_pk  # type: ignore[union-attr]

    def update(self, table: str, pk: int, changes: dict[str, Any]) -> None:
        with self.transaction():
            self.db[table].update(pk, _encode(changes))  # type: ignore[union-attr]

    # --------------------------------------------------------------------- items

    def item(self, item_id: int) -> Item:
        check_id(item_id, "memory item")
        rows = self.query("SELECT * FROM items WHERE id = ?", (item_id,))
        if not rows:
            raise NotFound(f"no memory item with id {item_id}; list items with `sage memory list` or search_memory")
        return item_from_row(rows[0])

    def item_row(self, item_id: int) -> sqlite3.Row:
        check_id(item_id, "memory item")
        rows = self.query("SELECT * FROM items WHERE id = ?", (item_id,))
        if not rows:
            raise NotFound(f"no memory item with id {item_id}")
        return rows[0]

    def items(self, where: str = "1", params: Sequence[Any] = (), order: str = "id", limit: int = -1, offset: int = 0) -> list[Item]:
        rows = self.query(f"SELECT * FROM items WHERE {where} ORDER BY {order} LIMIT ? OFFSET ?", (*params, limit, offset))
        return [item_from_row(r) for r in rows]

    def fts_candidates(self, fts_query: str, limit: int) -> list[Candidate]:
        # bm25 weights: title counts most, then tags/operator/family, then body.
        rows = self.query(
            """
            SELECT items.id, -bm25(items_fts, 4.0, 1.0, 2.0, 2.0, 2.0) AS score, items.status, items.scope,
                   items.backend, items.hardware, items.utility, items.adoption_rate, items.n_retrieved
            FROM items_fts JOIN items ON items.id = items_fts.rowid
            WHERE items_fts MATCH ?
            ORDER BY bm25(items_fts, 4.0, 1.0, 2.0, 2.0, 2.0)
            LIMIT ?
            """,
            (fts_query, limit),
        )
        return [
            Candidate(
                id=r["id"], bm25=max(r["score"], 0.0), status=r["status"], scope=r["scope"],
                backend=r["backend"], hardware=r["hardware"], utility=r["utility"],
                adoption_rate=r["adoption_rate"], n_retrieved=r["n_retrieved"],
            )
            for r in rows
        ]

    def candidates_for(self, ids: Sequence[int]) -> list[Candidate]:
        """Candidates for items found by dense similarity alone (no BM25 score)."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self.query(
            f"SELECT id, status, scope, backend, hardware, utility, adoption_rate, n_retrieved FROM items WHERE id IN ({marks})",
            tuple(ids),
        )
        return [
            Candidate(id=r["id"], bm25=0.0, status=r["status"], scope=r["scope"], backend=r["backend"],
                      hardware=r["hardware"], utility=r["utility"], adoption_rate=r["adoption_rate"],
                      n_retrieved=r["n_retrieved"])
            for r in rows
        ]

    # --------------------------------------------------------------- vectors

    def put_vector(self, item_id: int, model: str, blob: bytes) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO item_vectors VALUES (?, ?, ?)", (item_id, model, blob))

    def vectors(self, model: str) -> tuple[list[int], list[bytes]]:
        rows = self.query("SELECT item_id, vector FROM item_vectors WHERE model = ? ORDER BY item_id", (model,))
        return [r[0] for r in rows], [r[1] for r in rows]

    def items_without_vector(self, model: str) -> list[sqlite3.Row]:
        return self.query(
            "SELECT id, title, content FROM items WHERE id NOT IN (SELECT item_id FROM item_vectors WHERE model = ?)",
            (model,),
        )

    # ---------------------------------------------------------------- meta

    def meta(self, key: str, default: str | None = None) -> str | None:
        value = self.scalar("SELECT value FROM meta WHERE key = ?", (key,))
        return default if value is None else value

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))

    # ---------------------------------------------------------- export/import

    def export_rows(self) -> Iterator[dict[str, Any]]:
        """Every row of every table as {"table": ..., "row": {...}}: a full,
        id-preserving backup that `import_rows` restores into an empty db."""
        with self._lock:
            for table in EXPORT_TABLES:
                for r in self.conn.execute(f"SELECT * FROM {table} ORDER BY rowid"):
                    yield {"table": table, "row": dict(r)}

    def import_rows(self, records: Sequence[dict[str, Any]]) -> dict[str, int]:
        counts: dict[str, int] = {}
        with self.transaction() as conn:
            for rec in records:
                table, row = rec.get("table"), rec.get("row")
                if table not in EXPORT_TABLES or not isinstance(row, dict):
                    raise StoreError(f"import record has unknown table {table!r}; expected one of {EXPORT_TABLES}")
                cols = ", ".join(row)
                marks = ", ".join("?" for _ in row)
                verb = "INSERT OR REPLACE" if table == "meta" else "INSERT"
                try:
                    conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})".replace("INSERT", verb, 1), tuple(row.values()))
                except sqlite3.IntegrityError as exc:
                    raise StoreError(f"cannot import {table} row {row.get('id')}: {exc} (import into an empty database)") from exc
                counts[table] = counts.get(table, 0) + 1
        return counts


def check_id(value: int, what: str) -> int:
    """SQLite integers are 64-bit: larger ids cannot exist, so say so plainly
    instead of letting the driver overflow."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
        raise NotFound(f"no {what} with id {value!r}; ids are positive integers returned by SAGE")
    return value


def _split_sql(sql: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies whole."""
    statements, buf = [], []
    depth = 0
    for line in sql.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        buf.append(line)
        upper = stripped.upper()
        if upper.startswith("CREATE TRIGGER"):
            depth += 1
        if depth and upper.startswith("END;"):
            depth -= 1
        if not depth and stripped.endswith(";"):
            statements.append("\n".join(buf))
            buf = []
    if buf:
        statements.append("\n".join(buf))
    return statements


def _encode(row: dict[str, Any]) -> dict[str, Any]:
    return {k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in row.items()}


def item_from_row(r: sqlite3.Row) -> Item:
    data = dict(r)
    for col in JSON_COLUMNS:
        data[col] = json.loads(data[col] or "[]")
    for col in ("target_sum", "target_sq"):
        data.pop(col, None)
    return Item(**data)
