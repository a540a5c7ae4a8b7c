"""What the record classes (`items`, `episodes`, `audit`) need of a store:
the statements (`Sql`, which `Store` implements), rows as dicts, and the
checks and conversions of stored values. The records import this module,
never `base`: `base` builds them, so they must not need it."""

from __future__ import annotations

import json
from typing import Any, Protocol, Sequence

from sage_engine.errors import InvalidInput, NotFound, StoreError
from sage_engine.memory.store.schema import JSON_COLUMNS, TABLES

Row = dict[str, Any]


class Sql(Protocol):
    """The statements a record class runs (`Store` is one)."""

    @property
    def greatest(self) -> str:
        """The SQL name of the two-argument maximum."""

    def run(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[Row], int]: ...

    def run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any: ...

    def count(self, sql: str, params: Sequence[Any] = ()) -> int: ...

    def insert(self, table: str, row: Row) -> int: ...

    def insert_row(self, table: str, row: Row) -> None: ...

    def update(self, table: str, key: int, changes: Row) -> int: ...

    def lexical_rows(self, terms: list[str], limit: int) -> list[Row]: ...


def check_id(value: int, what: str) -> int:
    """Stored integers are 64-bit: larger ids cannot exist, so say so plainly
    instead of letting the driver overflow."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
        raise NotFound(f"no {what} with id {value!r}; ids are positive integers returned by SAGE")
    return value


def check_columns(table: str, row: Row) -> None:
    # Column names are interpolated into SQL: only the schema's own may pass.
    unknown = set(row) - set(TABLES[table])
    if unknown:
        raise StoreError(f"unknown {table} columns {sorted(unknown)}")


def check_text_values(table: str, row: Row) -> None:
    """The same refusal on both stores (PostgreSQL cannot hold a NUL in text;
    SQLite would keep it and a later copy would fail), naming the field."""
    for column, value in row.items():
        if isinstance(value, str) and "\x00" in value:
            where = f" (row {row['id']})" if row.get("id") is not None else ""
            raise InvalidInput(f"{table}.{column}{where} contains a NUL byte; send plain text")


def encode(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, (list, dict)) else value


def decode_json(row: Row) -> Row:
    """JSON text columns back into lists (in place)."""
    for col in JSON_COLUMNS:
        if col in row and isinstance(row[col], str):
            row[col] = json.loads(row[col] or "[]")
    return row
