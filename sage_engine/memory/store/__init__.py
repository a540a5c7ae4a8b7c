"""The store layer: all of SAGE's SQL, behind one `Store` contract with a
SQLite and a PostgreSQL implementation.

    store = open_store("~/.local/share/sage/memory.db")        # SQLite file
    store = open_store("postgresql://sage@db.internal/sage")   # team server
"""

from __future__ import annotations

from pathlib import Path

from sage_engine.memory.store.base import Store
from sage_engine.memory.store.sql import check_id
from sage_engine.memory.store.items import item_from_row
from sage_engine.memory.store.postgres import StoreUnavailable, is_postgres_url, redact

__all__ = ["Store", "StoreUnavailable", "check_id", "item_from_row", "is_postgres_url", "open_store", "redact"]


def open_store(
    spec: str | Path,
    *,
    busy_timeout_ms: int = 10_000,
    pool_size: int = 8,
    connect_timeout_s: float = 10.0,
    bm25_weights: tuple[float, ...] | None = None,
) -> Store:
    """A SQLite file path, or a `postgresql://` URL (never taken for a path)."""
    extra = {"bm25_weights": bm25_weights} if bm25_weights else {}
    if is_postgres_url(str(spec)):
        from sage_engine.memory.store.postgres import PostgresStore

        return PostgresStore(str(spec), pool_size=pool_size, connect_timeout_s=connect_timeout_s, **extra)
    from sage_engine.memory.store.sqlite import SqliteStore

    return SqliteStore(Path(spec).expanduser(), busy_timeout_ms=busy_timeout_ms, **extra)
