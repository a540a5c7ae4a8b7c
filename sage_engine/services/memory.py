"""Memory items as users and agents see them: adding (with dedup), curating,
listing, searching, statistics, and whole-memory export/import.

Every public method is one transaction on the store. Visibility follows the
item's scope: `team` and `project:NAME` items are shared, a `private` item is
seen only by its author, whole or counted. Changing or removing an item
someone else wrote needs the admin role.
"""

from __future__ import annotations

import builtins

import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable

from sage_engine.config import Config
from sage_engine.errors import Conflict, InvalidInput, NotFound
from sage_engine.memory import validation
from sage_engine.memory.embeddings import DenseIndex
from sage_engine.memory.retrieval import Candidate, Filters, rank
from sage_engine.memory.store import Store, transfer
from sage_engine.memory.text import approx_tokens, query_terms, similarity
from sage_engine.models import AddResult, ImportReport, Item, MemoryStats, NewItem, ScoredItem, UtilityUpdate
from sage_engine.services.team import Caller, check_admin

STARTER = Path(__file__).resolve().parents[1] / "memory" / "starter" / "ascend.jsonl"
LISTED = ("active", "resident", "quarantined")  # what `list` shows unless a status is asked for
STARTER_AUTHOR = "sage-starter"


def visible(item: Item, user: str | None) -> bool:
    return item.scope != "private" or (item.author is not None and item.author == user)


def scored(item: Item, rank_: int, sim: float, bonus: float, score: float) -> ScoredItem:
    return ScoredItem(
        id=item.id,
        kind=item.kind,
        title=item.title,
        content=item.content,
        code=item.code,
        tags=item.tags,
        utility=round(item.utility, 4),
        n_adopted=item.n_adopted,
        adoption_rate=round(item.adoption_rate, 4),
        similarity=round(sim, 4),
        exploration=round(bonus, 4),
        score=round(score, 4),
        rank=rank_,
        author=item.author,
        authors=item.authors,
    )


CLIPPED = "\n[... clipped to this item's share of the retrieval; show_item {id} has it whole]"


def clip_to_share(s: ScoredItem, share: int) -> ScoredItem:
    """The item as a retrieval shows it: no more than `share` tokens of
    title, content and code (content first), so one item stuffed to the
    size limits cannot crowd out the rest."""
    if approx_tokens(f"{s.title}\n{s.content}\n{s.code or ''}") <= share:
        return s
    chars = share * 4
    title = s.title[: min(len(s.title), chars // 4)]
    room = max(chars - len(title), 0)
    content = s.content[: max(room - len(CLIPPED) - 16, 0)] + CLIPPED.format(id=s.id)
    code = None
    if s.code and room - len(content) > 200:
        code = s.code[: room - len(content)]
    return s.model_copy(update={"title": title, "content": content, "code": code, "clipped": True})


class MemoryService:
    def __init__(self, store: Store, config: Config, dense: DenseIndex | None):
        self.store, self.config, self.dense = store, config, dense

    # ------------------------------------------------------------- candidates

    def dense_hits(self, text: str) -> dict[int, float] | None:
        """Dense similarities, computed before a transaction opens (embedding takes a while)."""
        if self.dense is None:
            return None
        return self.dense.search(text, self.config.candidate_pool)

    def candidates(self, query: str, dense: dict[int, float] | None) -> list[Candidate]:
        """Lexical hits, joined with dense hits when an embedding model is on."""
        cands = self.store.items.lexical(query_terms(query), self.config.candidate_pool)
        if dense is None:
            return cands
        seen = {c.id for c in cands}
        merged = [replace(c, dense=dense.get(c.id, 0.0)) for c in cands]
        extra = self.store.items.candidates([i for i in dense if i not in seen])
        return merged + [replace(c, dense=dense[c.id]) for c in extra]

    # ------------------------------------------------------------------ items

    def add(self, new: NewItem, *, user: str | None, dedup: bool = True) -> AddResult:
        new = validation.validate(new, self.config)
        text = f"{new.title}\n{new.content}"
        vector = self.dense.embed(text) if self.dense is not None else None
        dense = self.dense.search(text, self.config.dedup_dense_pool, vector=vector) if self.dense is not None and dedup else None
        with self.store.transaction():
            result = self.add_in_transaction(new, user=user, dedup=dedup, dense=dense)
            if vector is not None and self.dense is not None and not result.merged:
                self.dense.add(result.item.id, text, vector)
            return result

    def add_in_transaction(self, new: NewItem, *, user: str | None, dedup: bool, dense: dict[int, float] | None) -> AddResult:
        """Insert a validated item, or strengthen its near-duplicate; the
        caller holds the write transaction (a lesson shares the episode's)."""
        now = time.time()
        dup = self.find_duplicate(new, dense, user) if dedup else None
        if dup:
            item, sim = dup
            # The tag cap holds whoever adds them: the item's own tags first, then new ones while there is room.
            added = [t for t in new.tags if t not in item.tags][: max(validation.MAX_TAGS - len(item.tags), 0)]
            self.store.items.strengthen(
                item.id, sorted(set(item.tags) | set(added)), sorted(set(item.derived_from) | set(new.derived_from)), now
            )
            return AddResult(item=self.store.items.get(item.id), merged=True, similarity=round(sim, 4))
        row = new.model_dump()
        row.update(
            status="active",
            author=user,
            created_at=now,
            updated_at=now,
            tokens=approx_tokens(f"{new.title}\n{new.content}\n{new.code or ''}"),
        )
        item_id = self.store.items.insert(row)
        return AddResult(item=self.store.items.get(item_id), merged=False)

    def find_duplicate(self, new: NewItem, dense: dict[int, float] | None, user: str | None) -> tuple[Item, float] | None:
        """The closest live item of the same kind, scope (and author, for a
        private one) that is a near duplicate: lexically (word and bigram
        cosine), or by meaning when a dense index is on (paraphrases)."""
        text = f"{new.title}\n{new.content}"
        scores: dict[int, float] = {}
        hits = self.store.items.lexical(query_terms(f"{new.title} {new.content}"), self.config.dedup_lexical_pool)
        found = self.store.items.many([h.id for h in hits])
        for item in found.values():
            sim = similarity(text, f"{item.title}\n{item.content}")
            if sim >= self.config.dedup_threshold:
                scores[item.id] = sim
        for item_id, cos in (dense or {}).items():
            if cos >= self.config.dedup_threshold_dense:
                scores[item_id] = max(scores.get(item_id, 0.0), cos)
        missing = [i for i in scores if i not in found]
        found.update(self.store.items.many(missing))
        best: tuple[Item, float] | None = None
        for item_id, sim in scores.items():
            item = found[item_id]
            if item.status not in ("active", "resident") or item.scope != new.scope or item.kind != new.kind:
                continue
            if item.scope == "private" and item.author != user:
                continue
            if best is None or sim > best[1]:
                best = (item, sim)
        return best

    def get(self, item_id: int, *, user: str | None) -> Item:
        item = self.store.items.get(item_id)
        if not visible(item, user):
            raise NotFound(f"no memory item with id {item_id}; list items with `sage memory list` or search_memory")
        return item

    def list(
        self,
        *,
        kind: str | None = None,
        status: str | None = None,
        scope: str | None = None,
        author: str | None = None,
        limit: int = 50,
        offset: int = 0,
        user: str | None,
    ) -> list[Item]:
        if not 1 <= limit <= 1000 or offset < 0:
            raise InvalidInput("limit must lie in 1..1000 and offset must be >= 0")
        if scope:
            scope = validation.check_scope(scope)
        return self.store.items.list(
            kind=kind, statuses=[status] if status else LISTED, scope=scope, author=author, viewer=user, limit=limit, offset=offset
        )

    def search(
        self, query: str, *, k: int, backend: str | None = None, hardware: str | None = None, scope: str | None = None, user: str | None
    ) -> builtins.list[ScoredItem]:
        """Rank like retrieve, residents included, without opening an episode
        or logging anything (hover, inspection, `sage memory list -q`)."""
        validation.check_text("query", query, 4000, required=True)
        dense = self.dense_hits(query)
        filters = Filters(scopes=self.scopes(scope), backend=backend, hardware=hardware, viewer=user)
        with self.store.transaction(write=False):
            cands = [replace(c, status="active") if c.status == "resident" else c for c in self.candidates(query, dense)]
            ranking = rank(cands, filters, k, 0, self.config)
            items = self.store.items.many([r.id for r in ranking.items])
        return [scored(items[r.id], i + 1, r.similarity, 0.0, r.score) for i, r in enumerate(ranking.items)]

    def edit(self, item_id: int, *, caller: Caller, **changes: Any) -> Item:
        changes = {k: v for k, v in changes.items() if v is not None}
        if not changes:
            raise InvalidInput("nothing to change: give a title, content, code or tags")
        c = self.config
        for name, limit, required in (
            ("title", c.max_title_chars, True),
            ("content", c.max_content_chars, True),
            ("code", c.max_code_chars, False),
        ):
            if name in changes:
                validation.check_text(name, changes[name], limit, required=required)
        if "tags" in changes:
            changes["tags"] = validation.check_tags(list(changes["tags"]))
        with self.store.transaction():
            item = self.get(item_id, user=caller.user)
            _check_author(item, caller, "editing")
            if item.status in ("deleted", "merged"):
                raise Conflict(f"item {item_id} is {item.status}; restore it before editing")
            merged = item.model_dump() | changes
            changes["tokens"] = approx_tokens(f"{merged['title']}\n{merged['content']}\n{merged['code'] or ''}")
            changes["updated_at"] = time.time()
            self.store.items.update(item_id, changes)
            return self.store.items.get(item_id)

    def set_status(self, item_id: int, status: str, reason: str = "", *, caller: Caller) -> Item:
        with self.store.transaction():
            item = self.get(item_id, user=caller.user)
            _check_author(item, caller, f"changing the status of item {item_id}")
            if status == "active" and item.status == "merged":
                raise Conflict(f"item {item_id} was merged into a rule; revert that consolidation to restore it")
            self.store.items.update(item_id, {"status": status, "status_reason": reason or None, "updated_at": time.time()})
            return self.store.items.get(item_id)

    def residents(self, *, viewer: str | None) -> builtins.list[Item]:
        """The resident rules `viewer` may see: the team's, and their own
        private ones (viewer None: the team's alone)."""
        return self.store.items.list(statuses=["resident"], viewer=viewer or "", shared_only=viewer is None)

    def utility_history(self, item_id: int, *, user: str | None) -> builtins.list[UtilityUpdate]:
        with self.store.transaction(write=False):
            self.get(item_id, user=user)  # NotFound for an unknown or hidden id
            return self.store.audit.utility_log(item_id=item_id)

    def scopes(self, scope: str | None) -> tuple[str, ...]:
        scope = validation.check_scope(scope)
        return ("team",) if scope in ("team", "private") else ("team", scope)

    # -------------------------------------------------------------- the whole

    def stats(self, *, viewer: str | None) -> MemoryStats:
        """Counts as `viewer` may see them: others' private items are not counted."""
        items = self.store.items
        with self.store.transaction(write=False):
            by_status = items.counts_by("status", viewer=viewer)
            episodes = self.store.episodes.counts_by_status()
            counts = self.store.audit.counts(("attempts", "adoptions", "utility_log", "consolidations"))
            return MemoryStats(
                db_path=self.store.describe(),
                store=self.store.dialect,
                items_by_kind=items.counts_by("kind", viewer=viewer),
                items_by_status=by_status,
                resident_rules=by_status.get("resident", 0),
                resident_tokens=items.resident_tokens(viewer=viewer),
                episodes_open=episodes.get("open", 0),
                episodes_closed=episodes.get("closed", 0),
                episodes_without_evidence=self.store.episodes.without_evidence(),
                attempts=counts["attempts"],
                adoptions=counts["adoptions"],
                utility_updates=counts["utility_log"],
                consolidations=counts["consolidations"],
                mean_utility=items.mean_utility(viewer=viewer),
                by_author=self.store.audit.authors(viewer=viewer),
            )

    def export_jsonl(self, path: Path | str) -> ImportReport:
        counts: dict[str, int] = {}
        tmp = Path(f"{path}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                for rec in transfer.export_rows(self.store):
                    fh.write(jsonl_line(rec))
                    counts[rec["table"]] = counts.get(rec["table"], 0) + 1
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)  # a crash mid-export never leaves a half file under the real name
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise InvalidInput(
                f"cannot write the export to {path}: {exc.strerror or exc}; nothing was written (free space or choose another path)"
            ) from exc
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return report(counts)

    def import_jsonl(self, path: Path | str, *, user: str | None) -> ImportReport:
        """Restore a full export into this database (which must not already
        hold the same ids), or add a file of items (a starter pack)."""
        records = []
        # JSON lines end at "\n" only: str.splitlines() would also split inside
        # a string at U+2028, U+2029 or U+0085, which an item's text may hold.
        for n, line in enumerate(Path(path).read_text(encoding="utf-8").split("\n"), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"{path}:{n} is not valid JSON: {exc.msg}") from exc
        if records and "table" not in records[0]:
            return self.import_items(records, user=user)
        return report(transfer.import_rows(self.store, records))

    def import_items(self, records: Iterable[dict[str, Any]], *, user: str | None) -> ImportReport:
        """Add items (title, content, tags, ...) through validation and dedup, all or none."""
        news = [validation.validate(NewItem(**rec), self.config) for rec in records]
        added = merged = 0
        with self.store.transaction():
            for new in news:
                result = self.add_in_transaction(new, user=user, dedup=True, dense=None)
                merged += result.merged
                added += not result.merged
        return ImportReport(items=added, skipped=merged, rows={"items": added})

    def init(self, *, starter: bool) -> ImportReport | None:
        """Import the starter memory once per database; None if already done."""
        if not starter or self.store.audit.meta("starter_imported") is not None:
            return None
        with self.store.transaction():
            if self.store.audit.meta("starter_imported") is not None:
                return None  # another process got there first
            done = self.import_jsonl(STARTER, user=STARTER_AUTHOR)
            self.store.audit.set_meta("starter_imported", "1")
        return done


# Line separators JSON leaves raw with ensure_ascii=False: escaped, so any
# reader that splits lines on them (str.splitlines, editors) keeps one record a line.
_SEPARATORS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\u0085": "\\u0085"})


def jsonl_line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False).translate(_SEPARATORS) + "\n"


def _check_author(item: Item, caller: Caller, action: str) -> None:
    if item.author is not None and item.author != caller.user:
        check_admin(caller, f"{action} (an item another person wrote)")


def report(counts: dict[str, int]) -> ImportReport:
    return ImportReport(items=counts.get("items", 0), episodes=counts.get("episodes", 0), attempts=counts.get("attempts", 0), rows=counts)
