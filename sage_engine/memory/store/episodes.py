"""Episodes and what happened in them: what was shown (retrievals), what was
tried (attempts) and what the agent said it adopted (adoptions)."""

from __future__ import annotations

import builtins

from typing import Any, Iterable, Sequence

from sage_engine.errors import NotFound
from sage_engine.memory.store.sql import Row, Sql, check_id
from sage_engine.memory.store.schema import TABLES


EPISODE_COLUMNS = ", ".join(TABLES["episodes"])
ATTEMPT_COLUMNS = ", ".join(TABLES["attempts"])
RESERVED_KEY = "attempt_id_reserved"


class EpisodeRecords:
    def __init__(self, store: Sql):
        self.store = store

    # --------------------------------------------------------------- episodes

    def open(self, fields: Row) -> int:
        return self.store.insert("episodes", {**fields, "status": "open"})

    def get(self, episode_id: int) -> Row:
        check_id(episode_id, "episode")
        row = self.store.one(f"SELECT {EPISODE_COLUMNS} FROM episodes WHERE id = ?", (episode_id,))
        if row is None:
            raise NotFound(f"no episode with id {episode_id}; start one with retrieve_rules")
        return row

    def idle(self, cutoff: float, *, client: str | None = None, task: str | None = None) -> list[Row]:
        """Open episodes idle since `cutoff`, and (given a client and task)
        that client's open episode for that task, which a new retrieval ends:
        their id, last_activity and author."""
        return self.store.rows(
            "SELECT id, last_activity, author FROM episodes WHERE status = 'open' AND (last_activity < ? OR (client = ? AND task = ?))"
            " ORDER BY id",
            (cutoff, client, task),
        )

    def touch(self, episode_id: int, now: float) -> None:
        self.store.run("UPDATE episodes SET last_activity = ? WHERE id = ?", (now, episode_id))

    def close(self, episode_id: int, reward: float | None, reward_parts: str | None, now: float, reason: str) -> bool:
        """Close an open episode (reward None: closed without credit); False
        if it was not open any more (so two closers can never both credit it)."""
        changed = self.store.count(
            "UPDATE episodes SET status = 'closed', reward = ?, reward_parts = ?, closed_at = ?, last_activity = ?,"
            " close_reason = ? WHERE id = ? AND status = 'open'",
            (reward, reward_parts, now, now, reason, episode_id),
        )
        return changed == 1

    def list(self, *, status: str | None = None, author: str | None = None, limit: int = 20) -> list[Row]:
        where, params = ["1 = 1"], []
        if status:
            where.append("status = ?")
            params.append(status)
        if author:
            where.append("author = ?")
            params.append(author)
        return self.store.rows(
            f"SELECT {EPISODE_COLUMNS} FROM episodes WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?", (*params, limit)
        )

    def counts_by_status(self) -> dict[str, int]:
        return {r["status"]: int(r["n"]) for r in self.store.rows("SELECT status, COUNT(*) AS n FROM episodes GROUP BY status")}

    def without_evidence(self) -> int:
        """Closed episodes that were not credited: they had no attempt."""
        return int(self.store.scalar("SELECT COUNT(*) AS n FROM episodes WHERE status = 'closed' AND reward IS NULL"))

    def credited_since(self, ts: float) -> int:
        """Episodes closed with credit after `ts` (what makes consolidation due)."""
        return int(
            self.store.scalar("SELECT COUNT(*) AS n FROM episodes WHERE status = 'closed' AND reward IS NOT NULL AND closed_at > ?", (ts,))
        )

    # ------------------------------------------------------------- retrievals

    def log_shown(self, episode_id: int, shown: Iterable[dict[str, Any]], query: str, now: float) -> None:
        rows = [
            (episode_id, s["id"], s["rank"], s["score"], s["similarity"], s["exploration"], s["utility"], int(s["resident"]), query, now)
            for s in shown
        ]
        if rows:
            self.store.run_many(
                "INSERT INTO retrievals (episode_id, item_id, rank, score, similarity, exploration, utility, resident, query, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    def shown_ids(self, episode_id: int) -> builtins.list[int]:
        rows = self.store.rows("SELECT DISTINCT item_id FROM retrievals WHERE episode_id = ? ORDER BY item_id", (episode_id,))
        return [r["item_id"] for r in rows]

    def shown_rows(self, episode_id: int) -> builtins.list[Row]:
        return self.store.rows(
            "SELECT r.item_id, r.rank, r.score, r.similarity, r.exploration, r.utility, r.resident, i.kind, i.title,"
            " i.content, i.code, i.tags, i.n_adopted, i.adoption_rate, i.scope, i.author, i.authors"
            " FROM retrievals r JOIN items i ON i.id = r.item_id"
            " WHERE r.episode_id = ? ORDER BY r.id",
            (episode_id,),
        )

    def recent_queries(self, episodes: int) -> builtins.list[str]:
        """The retrieval query of each of the last `episodes` episodes (those
        that were shown anything), through the episode index."""
        rows = self.store.rows(
            "SELECT episode_id, MIN(query) AS query FROM retrievals"
            " WHERE episode_id > (SELECT COALESCE(MAX(id), 0) FROM episodes) - ? AND query IS NOT NULL"
            " GROUP BY episode_id",
            (episodes,),
        )
        return [r["query"] for r in rows]

    def resident_match(self, episode_id: int) -> dict[int, float]:
        """For each resident rule shown in the episode, how well it matched the task (best showing)."""
        rows = self.store.rows(
            "SELECT item_id, MAX(similarity) AS sim FROM retrievals WHERE episode_id = ? AND resident = 1 GROUP BY item_id",
            (episode_id,),
        )
        return {r["item_id"]: float(r["sim"]) for r in rows}

    # --------------------------------------------------------------- attempts

    def reserve_attempt_id(self) -> int:
        """An attempt id no other attempt will take, before its row exists:
        an evaluation still running is asked for by the id it will be stored
        under. Ids come from a counter in `meta` (never below the largest id
        stored, so imported rows are skipped), on both stores; the caller
        holds the write transaction, which serialises writers."""
        reserved = self.store.scalar("SELECT value FROM meta WHERE key = ?", (RESERVED_KEY,))
        stored = self.store.scalar("SELECT COALESCE(MAX(id), 0) AS n FROM attempts")
        n = max(int(reserved or 0), int(stored or 0)) + 1
        self.store.run(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", (RESERVED_KEY, str(n))
        )
        return n

    def add_attempt(self, row: Row) -> int:
        """Store an attempt under its reserved id (`row["id"]`), or a fresh one."""
        if row.get("id") is None:
            row = {**row, "id": self.reserve_attempt_id()}
        return self.store.insert("attempts", row)

    def set_attempt_result(self, attempt_id: int, result_json: str) -> None:
        self.store.run("UPDATE attempts SET result = ? WHERE id = ?", (result_json, attempt_id))

    def attempt(self, attempt_id: int) -> Row:
        check_id(attempt_id, "attempt")
        row = self.store.one(f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE id = ?", (attempt_id,))
        if row is None:
            raise NotFound(f"no attempt with id {attempt_id}")
        return row

    def attempt_by_request(self, request_id: str) -> Row | None:
        return self.store.one(f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE request_id = ?", (request_id,))

    def attempts(self, episode_id: int) -> builtins.list[Row]:
        return self.store.rows(f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE episode_id = ? ORDER BY id", (episode_id,))

    def attempt_count(self, episode_id: int) -> int:
        return int(self.store.scalar("SELECT COUNT(*) AS n FROM attempts WHERE episode_id = ?", (episode_id,)))

    def results_for_path(self, path: str, limit: int) -> builtins.list[Row]:
        return self.store.rows(
            "SELECT id, episode_id, created_at, result FROM attempts WHERE candidate_path = ? ORDER BY id DESC LIMIT ?",
            (path, limit),
        )

    def latest_attempt_id(self) -> int:
        """A cheap stamp that changes whenever any attempt is stored (editors poll it)."""
        return int(self.store.scalar("SELECT COALESCE(MAX(id), 0) AS n FROM attempts") or 0)

    # -------------------------------------------------------------- adoptions

    def adopt(
        self, episode_id: int, item_id: int, attempt_id: int | None, evidence: str, weight: float, author: str | None, now: float
    ) -> None:
        g = self.store.greatest
        self.store.run(
            f"""INSERT INTO adoptions (episode_id, item_id, attempt_id, evidence, weight, created_at, author)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (episode_id, item_id) DO UPDATE SET
                  weight = {g}(adoptions.weight, excluded.weight),
                  attempt_id = COALESCE(excluded.attempt_id, adoptions.attempt_id),
                  evidence = CASE WHEN excluded.evidence = '' THEN adoptions.evidence
                                  WHEN adoptions.evidence = '' THEN excluded.evidence
                                  ELSE adoptions.evidence || ' | ' || excluded.evidence END""",
            (episode_id, item_id, attempt_id, evidence, weight, now, author),
        )

    def adoptions(self, episode_id: int) -> builtins.list[Row]:
        return self.store.rows(
            "SELECT item_id, attempt_id, evidence, weight, author FROM adoptions WHERE episode_id = ? ORDER BY id", (episode_id,)
        )

    def adopted_in_attempts(self, attempt_ids: Sequence[int]) -> dict[int, builtins.list[int]]:
        if not attempt_ids:
            return {}
        marks = ",".join("?" * len(attempt_ids))
        out: dict[int, builtins.list[int]] = {a: [] for a in attempt_ids}
        query = f"SELECT attempt_id, item_id FROM adoptions WHERE attempt_id IN ({marks}) ORDER BY id"
        for r in self.store.rows(query, tuple(attempt_ids)):
            out[r["attempt_id"]].append(r["item_id"])
        return out
