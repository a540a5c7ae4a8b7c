"""The PostgreSQL store: one team memory shared by every engineer's servers.

psycopg 3 with a connection pool (`psycopg_pool`); lexical search with a
weighted, generated `tsvector` column, a GIN index and `ts_rank_cd`. Write
transactions take one transaction-level advisory lock first, so writers are
serialised exactly as SQLite's `BEGIN IMMEDIATE` serialises them: credit's
read-modify-write can never interleave, and nothing can deadlock. Read
transactions take no lock and see one REPEATABLE READ snapshot.

Needs the `team` extra: `pip install 'sage-npu[team]'`.
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Any, Iterator, Sequence
from urllib.parse import urlsplit, urlunsplit

from sage_engine.errors import StoreError
from sage_engine.memory.store.base import Store
from sage_engine.memory.store.sql import Row
from sage_engine.memory.store.schema import ID_TABLES
from sage_engine.memory.store.sqlite import BM25_WEIGHTS

log = logging.getLogger(__name__)

# Any constant works; it only has to be the same in every SAGE process.
WRITE_LOCK = 0x5A6E  # "SAGE"
URL_PREFIXES = ("postgresql://", "postgres://")


class StoreUnavailable(StoreError):
    """The database server cannot be reached; the call may be retried once it is back."""


def is_postgres_url(spec: str) -> bool:
    return isinstance(spec, str) and spec.startswith(URL_PREFIXES)


def redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


class PostgresStore(Store):
    dialect = "postgres"
    greatest = "GREATEST"
    real = "DOUBLE PRECISION"

    def __init__(self, url: str, *, pool_size: int = 8, connect_timeout_s: float = 10.0, bm25_weights: Sequence[float] = BM25_WEIGHTS):
        super().__init__()
        try:
            import psycopg
            from psycopg.rows import dict_row
            from psycopg_pool import ConnectionPool
        except ImportError as exc:
            raise StoreError(
                f"a postgresql:// memory needs psycopg 3 and psycopg_pool: pip install 'sage-npu[team]' ({exc.name} is missing)"
            ) from exc
        self._psycopg = psycopg
        self.url = url
        title, content, tags = bm25_weights[:3]
        # ts_rank_cd weights are {D, C, B, A}: content is C, tags/operator/family B, title A.
        self.rank_weights = "{0.1, %s, %s, 1.0}" % (round(content / title, 4), round(tags / title, 4))
        self.pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, pool_size),
            timeout=connect_timeout_s,
            open=False,
            kwargs={"autocommit": True, "row_factory": dict_row, "connect_timeout": max(1, int(connect_timeout_s))},
            # A connection the server dropped is replaced before anyone uses it.
            check=ConnectionPool.check_connection,
            name="sage-memory",
        )
        try:
            self.pool.open(wait=True, timeout=connect_timeout_s)
        except Exception as exc:  # noqa: BLE001 - PoolTimeout wraps whatever the driver saw
            self.pool.close()
            raise StoreUnavailable(
                f"cannot reach the PostgreSQL memory at {redact(url)} within {connect_timeout_s:.0f} s: {exc}; "
                "check that the server runs and the URL (SAGE_DB or --db) is right"
            ) from exc
        self.migrate()

    def describe(self) -> str:
        return redact(self.url)

    def close(self) -> None:
        self.pool.close()

    @contextlib.contextmanager
    def _begin(self, write: bool) -> Iterator[Any]:
        psycopg = self._psycopg
        try:
            with self.pool.connection() as conn:
                with conn.transaction():
                    if write:
                        conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                    else:
                        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    yield conn
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(
                f"the PostgreSQL memory at {redact(self.url)} went away: {_first_line(exc)}; nothing from this call "
                "was stored, retry once the server is back"
            ) from exc
        except self._pool_timeout() as exc:
            raise StoreUnavailable(f"no connection to the PostgreSQL memory at {redact(self.url)}: {exc}") from exc

    def _pool_timeout(self) -> type[Exception]:
        from psycopg_pool import PoolTimeout

        return PoolTimeout

    def _execute(self, conn: Any, sql: str, params: Sequence[Any]) -> tuple[list[Row], int]:
        psycopg = self._psycopg
        try:
            cur = conn.execute(_placeholders(sql), tuple(params))
            rows = cur.fetchall() if cur.description else []
            return rows, cur.rowcount
        except psycopg.errors.IntegrityError as exc:
            raise StoreError(f"the memory refused a write: {_first_line(exc)}") from exc

    def lexical_rows(self, terms: list[str], limit: int) -> list[Row]:
        if not terms:
            return []
        # websearch_to_tsquery never raises on user text; "or" joins the terms.
        return self.rows(
            """
            SELECT items.id, ts_rank_cd(?::real[], items.search, q) AS score, items.status, items.scope,
                   items.author, items.backend, items.hardware, items.utility, items.adoption_rate, items.n_retrieved
            FROM items, websearch_to_tsquery('english', ?) AS q
            WHERE items.search @@ q
            ORDER BY score DESC, items.id
            LIMIT ?
            """,
            (self.rank_weights, " or ".join(terms), limit),
        )

    def lexical_floor(self, terms: list[str], limit: int) -> list[int]:
        rows = self.rows(
            "SELECT id FROM items, websearch_to_tsquery('english', ?) AS q WHERE search @@ q ORDER BY ts_rank_cd(search, q) DESC LIMIT ?",
            (" or ".join(terms), limit),
        )
        return [r["id"] for r in rows]

    def _execute_many(self, conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with conn.cursor() as cur:
            cur.executemany(_placeholders(sql), [tuple(r) for r in rows])

    def _has_table(self, name: str) -> bool:
        return bool(self.scalar("SELECT to_regclass(?) IS NOT NULL AS present", (name,)))

    def after_import(self) -> None:
        # Rows arrived with their ids: move each identity sequence past them.
        for table in ID_TABLES:
            self.run(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), COALESCE(MAX(id), 0) + 1, false) FROM {table}")


_QMARK = re.compile(r"\?|%")


def _placeholders(sql: str) -> str:
    """The portable SQL uses `?`; psycopg wants `%s` (and a literal `%` doubled)."""
    return _QMARK.sub(lambda m: "%s" if m.group() == "?" else "%%", sql)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
