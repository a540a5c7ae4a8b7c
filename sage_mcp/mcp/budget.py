"""Keep every tool result under what an agent's client accepts.

Claude Code refuses a tool result over 25,000 tokens; memory items may hold
8,000 characters of content and 40,000 of code, so fifty of them (a
`search_memory` at its largest k) come to some 800,000. A result that would
pass REPLY_CHARS keeps every item, id and title, and cuts the longest
contents and codes to an even share, each saying where the whole item is
(`show_item`, `sage://items/{id}`); a long episode lists its newest
attempts. Only the MCP replies are cut: the engine, the CLI and the editor
get everything.
"""

from __future__ import annotations

from typing import Any, Sequence, TypeVar

from sage_engine.models import EpisodeDetail, Item, RetrievalResult, ScoredItem

# Characters of compact JSON in one reply. The text block a client shows is
# the same JSON indented (about a third longer), so this is some 60,000
# characters of text: 20,000 tokens at 3 characters a token (JSON and code
# tokenise denser than prose), under the 25,000 cap.
REPLY_CHARS = 45_000
MIN_SHARE = 100  # an item keeps at least this much of its content

Cuttable = TypeVar("Cuttable", ScoredItem, Item)


def _size(item: Any) -> int:
    return len(item.model_dump_json())


def _cut(item: Cuttable, share: int) -> Cuttable:
    body = len(item.content) + len(item.code or "")
    overhead = _size(item) - body
    room = max(share - overhead, MIN_SHARE)
    if body <= room:
        return item
    note = f" [cut to fit the reply: show_item({item.id}) or sage://items/{item.id} has all {body} characters]"
    content = item.content if len(item.content) <= room // 2 else item.content[: max(room // 2 - len(note), 0)] + note
    code = item.code
    if code is not None and len(code) > room - len(content):
        keep = max(room - len(content), 0)
        code = code[:keep] + f"\n# ... cut: show_item({item.id}) has the whole code" if keep else None
    return item.model_copy(update={"content": content, "code": code})


def fit_items(items: Sequence[Cuttable], budget: int = REPLY_CHARS) -> list[Cuttable]:
    """`items`, each cut to an even share of `budget` where they would pass
    it; at the floor, only title (80 characters), id and numbers remain."""
    items = list(items)
    if not items or sum(map(_size, items)) <= budget:
        return items
    share = budget // len(items)
    while True:
        cut = [_cut(i, share) for i in items]
        if sum(map(_size, cut)) <= budget:
            return cut
        if share <= MIN_SHARE:
            return [_bare(i) for i in cut]
        share = int(share * 0.8)


def _bare(item: Cuttable) -> Cuttable:
    note = f"[cut to fit the reply: show_item({item.id}) has it whole]"
    return item.model_copy(update={"title": item.title[:80], "content": note, "code": None, "tags": []})


def _newest_within(entries: list[Any], budget: int) -> list[Any]:
    kept, used = [], 0
    for entry in reversed(entries):
        used += _size(entry)
        if used > budget:
            break
        kept.append(entry)
    return kept[::-1]


def fit_retrieval(result: RetrievalResult) -> RetrievalResult:
    both = fit_items([*result.resident_rules, *result.items])
    n = len(result.resident_rules)
    return result.model_copy(update={"resident_rules": both[:n], "items": both[n:]})


def fit_episode(detail: EpisodeDetail) -> EpisodeDetail:
    """Each shown item once (its latest showing), the newest of them within
    a third of the reply; adoption evidence within a sixth; the newest
    attempts within a sixth. `cut` counts what was left out."""
    latest = list({i.id: i for i in detail.shown}.values())
    shown = _newest_within(fit_items(latest, REPLY_CHARS // 3), REPLY_CHARS // 3)
    share = REPLY_CHARS // 6 // max(len(detail.adopted), 1)
    adopted = [a if len(a.evidence) <= share else a.model_copy(update={"evidence": a.evidence[:share] + " [cut]"}) for a in detail.adopted]
    adopted = _newest_within(adopted, REPLY_CHARS // 6)
    attempts = _newest_within(detail.attempt_list, REPLY_CHARS // 6)
    cut = {
        "shown": len(latest) - len(shown),
        "adopted": len(detail.adopted) - len(adopted),
        "attempt_list": len(detail.attempt_list) - len(attempts),
    }
    return detail.model_copy(
        update={"shown": shown, "adopted": adopted, "attempt_list": attempts, "cut": {k: n for k, n in cut.items() if n}}
    )


def fit_source(source: str, where: str) -> str:
    """A task's reference source within the reply, or its head and where to read the rest."""
    if len(source) <= REPLY_CHARS:
        return source
    return source[:REPLY_CHARS] + f"\n# ... cut to fit the reply ({len(source)} characters in all): read {where}\n"
