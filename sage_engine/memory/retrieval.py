"""Ranking: similarity combined with utility, adoption rate and an
exploration bonus. Pure: the store supplies FTS hits, this decides."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

from sage_engine.config import Config


@dataclass(frozen=True)
class Candidate:
    """One FTS hit with the columns the filters and the score need."""

    id: int
    bm25: float  # positive, larger is better (SQLite returns it negated)
    status: str
    scope: str
    author: str | None
    backend: str | None
    hardware: str | None
    utility: float
    adoption_rate: float
    n_retrieved: int
    dense: float | None = None  # cosine from the optional embedding model


@dataclass(frozen=True)
class Ranked:
    id: int
    similarity: float
    exploration: float
    score: float


@dataclass
class Ranking:
    items: list[Ranked]
    filtered_out: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Filters:
    scopes: tuple[str, ...] = ("team",)
    backend: str | None = None
    hardware: str | None = None
    viewer: str | None = None  # sees its own private items
    # Resident rules shown in this task's rulebook section, so not again as items.
    hide: frozenset[int] = frozenset()
    # With per-task rulebooks a resident rule not resident for this task may
    # be retrieved like any item; with a global rulebook it is always shown there.
    residents_as_items: bool = False


def filter_reason(c: Candidate, f: Filters) -> str | None:
    """Why a hit may not be shown, or None. Items without a backend or
    hardware tag apply everywhere. Another person's private item is "hidden":
    never counted, so `filtered_out` cannot tell anyone it exists."""
    if c.scope == "private" and (c.author is None or c.author != f.viewer):
        return "hidden"
    if c.status in ("quarantined", "deleted", "merged"):
        return c.status
    if c.id in f.hide or (c.status == "resident" and not f.residents_as_items):
        return "resident"  # shown in the rulebook section instead
    if c.scope == "private":
        if c.author is None or c.author != f.viewer:
            return "scope"
    elif c.scope not in f.scopes:
        return "scope"
    if f.backend and c.backend and c.backend != f.backend:
        return "backend"
    if f.hardware and c.hardware and c.hardware != f.hardware:
        return "hardware"
    return None


def exploration_bonus(n_retrieved: int, total_retrievals: int, c: float) -> float:
    return c * math.sqrt(math.log(total_retrievals + 1.0) / (n_retrieved + 1.0))


def rank(candidates: Iterable[Candidate], filters: Filters, k: int, total_retrievals: int, config: Config) -> Ranking:
    filtered: dict[str, int] = {}
    kept: list[Candidate] = []
    for cand in candidates:
        reason = filter_reason(cand, filters)
        if reason in ("resident", "hidden"):
            continue
        if reason:
            filtered[reason] = filtered.get(reason, 0) + 1
        else:
            kept.append(cand)
    top_bm25 = max((c.bm25 for c in kept), default=0.0) or 1.0
    scored: list[Ranked] = []
    for cand in kept:
        sim = cand.bm25 / top_bm25
        if cand.dense is not None:
            sim = (1.0 - config.w_dense) * sim + config.w_dense * max(cand.dense, 0.0)
        if sim < config.min_similarity:
            filtered["low_similarity"] = filtered.get("low_similarity", 0) + 1
            continue
        bonus = exploration_bonus(cand.n_retrieved, total_retrievals, config.exploration_c)
        score = config.w_similarity * sim + config.w_utility * cand.utility + config.w_adoption * cand.adoption_rate + bonus
        scored.append(Ranked(cand.id, sim, bonus, score))
    scored.sort(key=lambda r: (-r.score, r.id))
    if len(scored) > k:
        filtered["below_top_k"] = len(scored) - k
    return Ranking(scored[:k], filtered)
