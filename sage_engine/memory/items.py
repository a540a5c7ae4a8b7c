"""Adding and curating memory items: validation, dedup on insert, edits,
quarantine and soft delete. Nothing stored is ever destroyed here."""

from __future__ import annotations

import json
import re
import time

from sage_engine.config import Config
from sage_engine.errors import Conflict, InvalidInput
from sage_engine.memory.store import Store
from sage_engine.memory.text import approx_tokens, fts_query, similarity
from sage_engine.models import AddResult, Item, NewItem

_SCOPE = re.compile(r"^(global|project:[A-Za-z0-9][A-Za-z0-9_.\-/]{0,99})$")
_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+\-]{0,63}$")
MAX_TAGS = 32


def check_scope(scope: str) -> str:
    if not _SCOPE.match(scope or ""):
        raise InvalidInput(
            f"invalid scope {scope!r}: use 'global' or 'project:NAME' (letters, digits, _ . - /, up to 100 characters)"
        )
    return scope


def check_text(name: str, value: str | None, limit: int, *, required: bool) -> str | None:
    if value is None or not value.strip():
        if required:
            raise InvalidInput(f"{name} must not be empty")
        return None
    if "\x00" in value:
        raise InvalidInput(f"{name} contains a NUL byte; send plain text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{name} is not valid Unicode text (lone surrogate at position {exc.start}); send UTF-8 text") from exc
    if len(value) > limit:
        raise InvalidInput(f"{name} is {len(value)} characters; the limit is {limit}. Shorten it")
    return value


def check_tags(tags: list[str]) -> list[str]:
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"{len(tags)} tags given; at most {MAX_TAGS}")
    bad = [t for t in tags if not _TAG.match(t)]
    if bad:
        raise InvalidInput(f"invalid tags {bad[:3]}: tags are 1-64 characters of letters, digits and _ . : + -")
    return sorted(set(tags))


def validate(new: NewItem, config: Config) -> NewItem:
    check_text("title", new.title, config.max_title_chars, required=True)
    check_text("content", new.content, config.max_content_chars, required=True)
    check_text("code", new.code, config.max_code_chars, required=False)
    check_scope(new.scope)
    for name in ("operator", "family", "backend", "hardware"):
        check_text(name, getattr(new, name), 100, required=False)
    if not -1.0 <= new.utility <= 2.0:
        raise InvalidInput("utility must lie in [-1, 2]")
    return new.model_copy(update={"tags": check_tags(new.tags)})


def find_duplicate(store: Store, new: NewItem, config: Config, dense=None) -> tuple[Item, float] | None:
    """The closest active item of the same kind and scope, if it is a near
    duplicate: lexically (word and bigram cosine), or by meaning when a dense
    index is on (paraphrases)."""
    text = f"{new.title}\n{new.content}"
    scored: dict[int, float] = {}
    query = fts_query(f"{new.title} {new.content}")
    for cand in store.fts_candidates(query, 20) if query else []:
        row = store.item_row(cand.id)
        sim = similarity(text, f"{row['title']}\n{row['content']}")
        if sim >= config.dedup_threshold:
            scored[cand.id] = sim
    if dense is not None:
        for item_id, cos in dense.search(text, 5).items():
            if cos >= config.dedup_threshold_dense:
                scored[item_id] = max(scored.get(item_id, 0.0), cos)
    best: tuple[Item, float] | None = None
    for item_id, sim in scored.items():
        item = store.item(item_id)
        if item.status not in ("active", "resident") or item.scope != new.scope or item.kind != new.kind:
            continue
        if best is None or sim > best[1]:
            best = (item, sim)
    return best


def add_item(store: Store, new: NewItem, config: Config, *, dedup: bool = True, dense=None) -> AddResult:
    new = validate(new, config)
    with store.transaction() as conn:
        dup = find_duplicate(store, new, config, dense) if dedup else None
        now = time.time()
        if dup:
            item, sim = dup
            tags = sorted(set(item.tags) | set(new.tags))
            derived = sorted(set(item.derived_from) | set(new.derived_from))
            conn.execute(
                "UPDATE items SET support = support + 1, tags = ?, derived_from = ?, updated_at = ? WHERE id = ?",
                (json.dumps(tags), json.dumps(derived), now, item.id),
            )
            return AddResult(item=store.item(item.id), merged=True, similarity=round(sim, 4))
        row = new.model_dump()
        row.update(
            status="active",
            tokens=approx_tokens(f"{new.title}\n{new.content}\n{new.code or ''}"),
            created_at=now,
            updated_at=now,
        )
        item_id = store.insert("items", row)
        return AddResult(item=store.item(item_id), merged=False)


def edit_item(store: Store, item_id: int, config: Config, **changes: object) -> Item:
    changes = {k: v for k, v in changes.items() if v is not None}
    if not changes:
        raise InvalidInput("nothing to change: give a title, content, code or tags")
    item = store.item(item_id)
    if item.status in ("deleted", "merged"):
        raise Conflict(f"item {item_id} is {item.status}; restore it before editing")
    if "title" in changes:
        check_text("title", changes["title"], config.max_title_chars, required=True)  # type: ignore[arg-type]
    if "content" in changes:
        check_text("content", changes["content"], config.max_content_chars, required=True)  # type: ignore[arg-type]
    if "code" in changes:
        check_text("code", changes["code"], config.max_code_chars, required=False)  # type: ignore[arg-type]
    if "tags" in changes:
        changes["tags"] = check_tags(list(changes["tags"]))  # type: ignore[arg-type]
    merged = item.model_dump() | changes
    changes["tokens"] = approx_tokens(f"{merged['title']}\n{merged['content']}\n{merged['code'] or ''}")
    changes["updated_at"] = time.time()
    store.update("items", item_id, changes)
    return store.item(item_id)


def set_status(store: Store, item_id: int, status: str, reason: str = "") -> Item:
    with store.transaction():
        item = store.item(item_id)
        if status == "active" and item.status == "merged":
            raise Conflict(f"item {item_id} was merged into a rule; revert that consolidation to restore it")
        store.update("items", item_id, {"status": status, "status_reason": reason or None, "updated_at": time.time()})
    return store.item(item_id)
