"""Moving a whole memory: JSON-lines export/import and store-to-store copy
(SQLite <-> PostgreSQL), ids and audit trail preserved.

Item vectors are not moved: they are derived from item text and the dense
index rebuilds them on its first search.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from sage_engine.errors import Conflict, StoreError
from sage_engine.memory.store.base import Store
from sage_engine.memory.store.schema import TABLES

# Parents before children, so foreign keys hold while rows arrive.
TRANSFER_TABLES = ("items", "episodes", "retrievals", "attempts", "adoptions", "utility_log", "consolidations", "meta")
ORDER_BY = {"meta": "key"}


def export_rows(store: Store) -> Iterator[dict[str, Any]]:
    """Every row of every table as {"table": ..., "row": {...}}, from one snapshot."""
    with store.transaction(write=False):
        for table in TRANSFER_TABLES:
            cols = ", ".join(TABLES[table])
            for row in store.rows(f"SELECT {cols} FROM {table} ORDER BY {ORDER_BY.get(table, 'id')}"):
                yield {"table": table, "row": row}


def import_rows(store: Store, records: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Restore exported rows into a store that does not hold their ids yet:
    all of them in one transaction, or none."""
    counts: dict[str, int] = {}
    with store.transaction():
        for rec in records:
            table, row = rec.get("table"), rec.get("row")
            if table not in TRANSFER_TABLES or not isinstance(row, dict):
                raise StoreError(f"import record has unknown table {table!r}; expected one of {TRANSFER_TABLES}")
            row = _upgrade(table, row)
            unknown = set(row) - set(TABLES[table])
            if unknown:
                raise StoreError(f"import record for {table} has unknown columns {sorted(unknown)}")
            if table == "meta":
                store.audit.set_meta(row["key"], row["value"])
            else:
                try:
                    store.insert_row(table, row)
                except StoreError as exc:
                    raise StoreError(f"cannot import {table} row {row.get('id')}: {exc} (import into an empty database)") from exc
            counts[table] = counts.get(table, 0) + 1
        store.after_import()
    return counts


def copy(src: Store, dst: Store) -> dict[str, int]:
    """Copy every row of `src` into the empty store `dst`."""
    if src.applied_migrations() != dst.applied_migrations():
        raise StoreError(f"{src.describe()} and {dst.describe()} are at different schema versions; run `sage memory migrate` on both")
    held = {t: n for t, n in dst.audit.counts(("items", "episodes", "attempts")).items() if n}
    if held:
        raise Conflict(f"{dst.describe()} is not empty ({', '.join(f'{n} {t}' for t, n in held.items())}); copy into a new database")
    return import_rows(dst, export_rows(src))


def _upgrade(table: str, row: dict[str, Any]) -> dict[str, Any]:
    """Rows exported before team scopes existed said 'global' for 'team'."""
    if table in ("items", "episodes") and row.get("scope") == "global":
        row = {**row, "scope": "team"}
    return row
