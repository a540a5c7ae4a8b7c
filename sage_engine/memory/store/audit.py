"""What SAGE keeps to explain and undo itself: the utility audit log, the
consolidation log with its snapshots, and a few key/value settings."""

from __future__ import annotations

from typing import Iterable

from sage_engine.errors import NotFound
from sage_engine.memory.store.sql import Row, Sql, check_id
from sage_engine.models import UtilityUpdate


COUNTED = ("attempts", "adoptions", "utility_log", "consolidations", "episodes", "items", "retrievals")


class AuditRecords:
    def __init__(self, store: Sql):
        self.store = store

    # ------------------------------------------------------------ utility log

    def log_update(self, u: UtilityUpdate, rule_version: str, now: float) -> None:
        self.store.run(
            "INSERT INTO utility_log (item_id, episode_id, adopted, before, after, target, eta, strategy, rule_version, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (u.item_id, u.episode_id, int(u.adopted), u.before, u.after, u.target, u.eta, u.strategy, rule_version, now),
        )

    def utility_log(self, *, item_id: int | None = None, episode_id: int | None = None) -> list[UtilityUpdate]:
        column, value = ("item_id", item_id) if item_id is not None else ("episode_id", episode_id)
        rows = self.store.rows(f"SELECT * FROM utility_log WHERE {column} = ? ORDER BY id", (value,))
        return [
            UtilityUpdate(
                item_id=r["item_id"],
                episode_id=r["episode_id"],
                strategy=r["strategy"],
                adopted=bool(r["adopted"]),
                before=r["before"],
                after=r["after"],
                target=r["target"],
                eta=r["eta"],
            )
            for r in rows
        ]

    def adopted_credits_since(self, author: str | None, since: float) -> int:
        """Adoptions credited in `author`'s episodes since `since`: what a
        team's daily cap counts."""
        return int(
            self.store.scalar(
                "SELECT COUNT(*) AS n FROM utility_log u JOIN episodes e ON e.id = u.episode_id"
                " WHERE u.adopted = 1 AND u.created_at > ? AND e.author = ?",
                (since, author),
            )
        )

    # --------------------------------------------------------- consolidations

    def add_consolidation(self, snapshot: str, author: str | None, now: float) -> int:
        return self.store.insert("consolidations", {"created_at": now, "report": "{}", "snapshot": snapshot, "author": author})

    def set_consolidation_report(self, consolidation_id: int, report_json: str) -> None:
        self.store.run("UPDATE consolidations SET report = ? WHERE id = ?", (report_json, consolidation_id))

    def consolidation(self, consolidation_id: int) -> Row:
        check_id(consolidation_id, "consolidation")
        row = self.store.one("SELECT * FROM consolidations WHERE id = ?", (consolidation_id,))
        if row is None:
            raise NotFound(f"no consolidation with id {consolidation_id}")
        return row

    def standing_after(self, consolidation_id: int) -> list[int]:
        rows = self.store.rows("SELECT id FROM consolidations WHERE id > ? AND reverted_at IS NULL ORDER BY id", (consolidation_id,))
        return [r["id"] for r in rows]

    def mark_reverted(self, consolidation_id: int, now: float) -> None:
        self.store.run("UPDATE consolidations SET reverted_at = ? WHERE id = ?", (now, consolidation_id))

    def last_standing_at(self) -> float:
        """When the latest consolidation that still stands ran (0 if none)."""
        value = self.store.scalar("SELECT MAX(created_at) AS t FROM consolidations WHERE reverted_at IS NULL")
        return float(value or 0.0)

    # ------------------------------------------------------------------ meta

    def meta(self, key: str, default: str | None = None) -> str | None:
        value = self.store.scalar("SELECT value FROM meta WHERE key = ?", (key,))
        return default if value is None else value

    def set_meta(self, key: str, value: str) -> None:
        self.store.run("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))

    # ----------------------------------------------------------------- stats

    def counts(self, tables: Iterable[str] = COUNTED) -> dict[str, int]:
        out = {}
        for table in tables:
            if table not in COUNTED:
                raise ValueError(table)
            out[table] = int(self.store.scalar(f"SELECT COUNT(*) AS n FROM {table}"))
        return out

    def authors(self, *, viewer: str | None = None) -> dict[str, dict[str, int]]:
        """Who made what: items, episodes and adoptions per author (with a
        viewer, items counted only where that viewer may see them)."""
        out: dict[str, dict[str, int]] = {}
        for table in ("items", "episodes", "adoptions"):
            where, params = ("1 = 1", ()) if viewer is None or table != "items" else ("(scope <> 'private' OR author = ?)", (viewer,))
            for r in self.store.rows(f"SELECT author, COUNT(*) AS n FROM {table} WHERE {where} GROUP BY author", params):
                out.setdefault(r["author"] or "-", {})[table] = int(r["n"])
        return out
