"""Memory items: rows, lexical candidates, the rulebook's members, vectors."""

from __future__ import annotations

import builtins

import json
from typing import Any, Iterable, Sequence

from sage_engine.errors import NotFound
from sage_engine.memory.retrieval import Candidate
from sage_engine.memory.store.sql import Row, Sql, check_columns, check_id, decode_json
from sage_engine.memory.store.schema import TABLES
from sage_engine.models import Item


COLUMNS = ", ".join(TABLES["items"])
CANDIDATE_COLUMNS = "id, status, scope, author, backend, hardware, utility, adoption_rate, n_retrieved"
HIDDEN = ("target_sum", "target_sq")  # gate statistics, not part of the Item model
ORDERS = {"utility": "utility DESC, id", "id": "id", "recent": "id DESC"}


class ItemRecords:
    def __init__(self, store: Sql):
        self.store = store

    def get(self, item_id: int) -> Item:
        return item_from_row(self.row(item_id))

    def row(self, item_id: int) -> Row:
        """Every stored column, the gate statistics included."""
        check_id(item_id, "memory item")
        row = self.store.one(f"SELECT {COLUMNS} FROM items WHERE id = ?", (item_id,))
        if row is None:
            raise NotFound(f"no memory item with id {item_id}; list items with `sage memory list` or search_memory")
        return row

    def many(self, ids: Sequence[int]) -> dict[int, Item]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        return {r["id"]: item_from_row(r) for r in self.store.rows(f"SELECT {COLUMNS} FROM items WHERE id IN ({marks})", tuple(ids))}

    def list(
        self,
        *,
        kind: str | None = None,
        statuses: Iterable[str] | None = None,
        scope: str | None = None,
        author: str | None = None,
        viewer: str | None = None,
        shared_only: bool = False,
        order: str = "utility",
        limit: int | None = None,
        offset: int = 0,
    ) -> builtins.list[Item]:
        """Items by filter. With a `viewer`, others' private items are left
        out (`shared_only`: every private item); engine-internal reads pass
        none and see everything."""
        where, params = _filters(kind=kind, statuses=statuses, scope=scope, author=author)
        if shared_only:
            where += " AND scope <> 'private'"
        elif viewer is not None:
            where += " AND (scope <> 'private' OR author = ?)"
            params.append(viewer)
        sql = f"SELECT {COLUMNS} FROM items WHERE {where} ORDER BY {ORDERS[order]}"
        if limit is not None:
            sql += " LIMIT ? OFFSET ?"
            params += [limit, offset]
        return [item_from_row(r) for r in self.store.rows(sql, params)]

    def gate_rows(self, *, kind: str = "experience", status: str = "active") -> builtins.list[tuple[Item, float, float]]:
        """Items with the credited-target sums the consolidation gate needs."""
        rows = self.store.rows(f"SELECT {COLUMNS} FROM items WHERE kind = ? AND status = ? ORDER BY id", (kind, status))
        return [(item_from_row(r), r["target_sum"], r["target_sq"]) for r in rows]

    def insert(self, row: Row) -> int:
        return self.store.insert("items", row)

    def insert_many(self, rows: builtins.list[Row]) -> None:
        """Bulk load (benchmarks, imports of synthetic corpora): one transaction."""
        if not rows:
            return
        cols = list(rows[0])
        check_columns("items", rows[0])
        self.store.run_many(
            f"INSERT INTO items ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [[json.dumps(r[c]) if isinstance(r[c], (list, dict)) else r[c] for c in cols] for r in rows],
        )

    def update(self, item_id: int, changes: Row) -> None:
        self.store.update("items", item_id, changes)

    def strengthen(self, item_id: int, tags: builtins.list[str], derived_from: builtins.list[int], now: float) -> None:
        """A near-duplicate lesson adds support instead of a copy."""
        self.store.run(
            "UPDATE items SET support = support + 1, tags = ?, derived_from = ?, updated_at = ? WHERE id = ?",
            (_json(tags), _json(derived_from), now, item_id),
        )

    def mark_shown(self, ids: Iterable[int]) -> None:
        ids = list(ids)
        if ids:
            marks = ",".join("?" * len(ids))
            self.store.run(f"UPDATE items SET n_retrieved = n_retrieved + 1 WHERE id IN ({marks})", ids)

    def total_retrievals(self) -> int:
        """How many showings were ever logged: the N of the exploration bonus.
        The newest retrieval-log id, an index lookup however large the memory
        (a SUM over every item's count reads the whole table)."""
        return int(self.store.scalar("SELECT COALESCE(MAX(id), 0) AS n FROM retrievals") or 0)

    # ---------------------------------------------------------------- search

    def lexical(self, terms: builtins.list[str], limit: int) -> builtins.list[Candidate]:
        return [_candidate(r, bm25=max(float(r["score"]), 0.0)) for r in self.store.lexical_rows(terms, limit)]

    def candidates(self, ids: Sequence[int]) -> builtins.list[Candidate]:
        """Candidates for items found by dense similarity alone (no lexical score)."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self.store.rows(f"SELECT {CANDIDATE_COLUMNS} FROM items WHERE id IN ({marks})", tuple(ids))
        return [_candidate(r, bm25=0.0) for r in rows]

    # --------------------------------------------------------------- vectors

    def put_vector(self, item_id: int, model: str, blob: bytes) -> None:
        self.store.run(
            "INSERT INTO item_vectors (item_id, model, vector) VALUES (?, ?, ?) "
            "ON CONFLICT (item_id) DO UPDATE SET model = excluded.model, vector = excluded.vector",
            (item_id, model, blob),
        )

    def vectors(self, model: str) -> tuple[builtins.list[int], builtins.list[bytes]]:
        rows = self.store.rows("SELECT item_id, vector FROM item_vectors WHERE model = ? ORDER BY item_id", (model,))
        return [r["item_id"] for r in rows], [bytes(r["vector"]) for r in rows]

    def vector_count(self, model: str) -> int:
        return int(self.store.scalar("SELECT COUNT(*) AS n FROM item_vectors WHERE model = ?", (model,)))

    def without_vector(self, model: str) -> builtins.list[Row]:
        return self.store.rows(
            "SELECT id, title, content FROM items WHERE id NOT IN (SELECT item_id FROM item_vectors WHERE model = ?) ORDER BY id",
            (model,),
        )

    # ----------------------------------------------------------------- stats

    def counts_by(self, column: str, *, viewer: str | None = None) -> dict[str, int]:
        """Counts per value; with a viewer, of the items that viewer may see."""
        if column not in ("kind", "status", "author", "scope"):
            raise ValueError(column)
        where, params = _visible_to(viewer)
        rows = self.store.rows(f"SELECT {column} AS k, COUNT(*) AS n FROM items WHERE {where} GROUP BY {column}", params)
        return {("-" if r["k"] is None else r["k"]): int(r["n"]) for r in rows}

    def resident_tokens(self, *, viewer: str | None = None) -> int:
        where, params = _visible_to(viewer)
        sql = f"SELECT CAST(COALESCE(SUM(tokens), 0) AS BIGINT) AS n FROM items WHERE status = 'resident' AND {where}"
        return int(self.store.scalar(sql, params))

    def mean_utility(self, *, viewer: str | None = None) -> float | None:
        where, params = _visible_to(viewer)
        value = self.store.scalar(f"SELECT AVG(utility) AS u FROM items WHERE status IN ('active', 'resident') AND {where}", params)
        return None if value is None else float(value)


def _visible_to(viewer: str | None) -> tuple[str, list[Any]]:
    """Items a viewer may see, whole or counted (None: every item, for the engine's own reads)."""
    if viewer is None:
        return "1 = 1", []
    return "(scope <> 'private' OR author = ?)", [viewer]


def _filters(*, kind: str | None, statuses: Iterable[str] | None, scope: str | None, author: str | None) -> tuple[str, list[Any]]:
    where: list[str] = ["1 = 1"]
    params: list[Any] = []
    if kind:
        where.append("kind = ?")
        params.append(kind)
    if statuses:
        statuses = list(statuses)
        where.append(f"status IN ({','.join('?' * len(statuses))})")
        params += statuses
    if scope:
        where.append("scope = ?")
        params.append(scope)
    if author:
        where.append("author = ?")
        params.append(author)
    return " AND ".join(where), params


def _candidate(r: Row, *, bm25: float) -> Candidate:
    return Candidate(
        id=r["id"],
        bm25=bm25,
        status=r["status"],
        scope=r["scope"],
        author=r["author"],
        backend=r["backend"],
        hardware=r["hardware"],
        utility=float(r["utility"]),
        adoption_rate=float(r["adoption_rate"]),
        n_retrieved=int(r["n_retrieved"]),
    )


def _json(value: Any) -> str:
    return json.dumps(value)


def item_from_row(r: Row) -> Item:
    data = decode_json(dict(r))
    for col in HIDDEN:
        data.pop(col, None)
    return Item(**data)
