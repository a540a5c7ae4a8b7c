"""Episodes: what was shown, what was tried, what was adopted, and the ATU
credit applied when an episode closes.

Each public method is one write transaction: `record_adoption` stores the
adoptions, the lesson and the credit together or not at all, and two callers
closing one episode cannot both succeed (the loser gets `Conflict`).
Automatic consolidation, when an episode close makes one due, runs after that
transaction commits, in its own.

An episode closed without an attempt carries no evidence about what it
showed: it closes without credit (reward None, its reason recorded), and
leaves utilities, adoption counters and rates, the consolidation count and
the rulebook as they were. Its adoptions stay stored but count for nothing.

An episode belongs to the person who opened it: nobody else (save the admin
role) retrieves into it, evaluates in it, adopts in it, closes it or reads it
(`Forbidden`).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Sequence

from sage_engine.config import Config
from sage_engine.errors import Conflict, InvalidInput, SageError
from sage_engine.memory import consolidation as ugc
from sage_engine.memory import validation
from sage_engine.memory.retrieval import Filters, rank
from sage_engine.memory.store import Store
from sage_engine.memory.store.sql import Row
from sage_engine.memory.text import approx_tokens, similarity
from sage_engine.models import (
    Adoption,
    AdoptionReport,
    AttemptSummary,
    CloseReason,
    ConsolidationReport,
    EpisodeDetail,
    EpisodeSummary,
    EvalResult,
    Item,
    Lesson,
    NewItem,
    RetrievalResult,
    ScoredItem,
)
from sage_engine.services.credit import close_and_credit, outcome_text
from sage_engine.services.memory import MemoryService, clip_to_share, scored, visible
from sage_engine.services.team import Caller, check_owner

if TYPE_CHECKING:
    from sage_engine.evaluation.host.tasks import Task

Consolidate = Callable[[Caller], ConsolidationReport]


@dataclass(frozen=True)
class EpisodeKey:
    task: str
    operator: str | None
    family: str | None
    backend: str | None
    hardware: str | None
    client: str | None
    scope: str
    task_free: int = 0  # 1: free text, not a task: bound to its first attempt's task


class EpisodeService:
    def __init__(self, store: Store, config: Config, memory: MemoryService):
        self.store, self.config, self.memory = store, config, memory
        self.consolidate: Consolidate | None = None  # set by the Engine: runs UGC when it is due

    # -------------------------------------------------------------- retrieval

    def retrieve(
        self,
        key: EpisodeKey,
        query: str,
        filters: Filters,
        k: int,
        *,
        episode_id: int | None,
        caller: Caller,
        close_previous: bool = True,
    ) -> RetrievalResult:
        """Open an episode (or continue one), rank, and log exactly what is
        shown (rulebook included) against it: that log is what credit uses."""
        dense = self.memory.dense_hits(query)
        closed: list[AdoptionReport] = []
        with self.store.transaction():
            if episode_id is None:
                # Idle episodes, and (where the client is one agent) its previous one for
                # the task, are closed (and credited where they have an attempt) in the same transaction.
                cutoff = time.time() - self.config.episode_idle_s
                owner = key.client if close_previous else None
                # A client label is never a person: only the caller's own episode is ended early.
                stale = [
                    e
                    for e in self.store.episodes.idle(cutoff, client=owner, task=key.task)
                    if e["last_activity"] < cutoff or e["author"] == caller.user
                ]
                closed = [self._close(e["id"], "idle" if e["last_activity"] < cutoff else "next_retrieval") for e in stale]
                now = time.time()
                episode_id = self.store.episodes.open(dict(key.__dict__, author=caller.user, created_at=now, last_activity=now))
            else:
                self._open_row(episode_id, "call retrieve_rules without episode_id to start a new one", caller)
            result = self._rank_and_log(episode_id, key, query, filters, k, dense, caller.user)
        self._consolidate_if_due(closed, caller)
        return result

    def _rank_and_log(
        self, episode_id: int, key: EpisodeKey, query: str, filters: Filters, k: int, dense: dict[int, float] | None, user: str | None
    ) -> RetrievalResult:
        items = self.store.items
        pool = [s for s in items.gate_rows(kind="rule", status="resident") if _in_scope(s[0], filters, user)]
        if self.config.rulebook_scope == "task":
            task = ugc.TaskContext.of(query, family=key.family, operator=key.operator, backend=key.backend, hardware=key.hardware)
            residents = ugc.residents_for_task((ugc.GateStats(*s) for s in pool), task, self.config)
            filters = replace(filters, hide=frozenset(r.id for r in residents), residents_as_items=True)
        else:
            residents = sorted((s[0] for s in pool), key=lambda r: (-r.utility, r.id))
        ranking = rank(self.memory.candidates(query, dense), filters, k, items.total_retrievals(), self.config)
        found = items.many([r.id for r in ranking.items])
        # Every task sees the rulebook; how well a rule matches this task is
        # logged so credit can tell "ignored" from "not applicable".
        # One item's share of the retrieval: a stuffed item is clipped, not shown whole.
        share = max(self.config.item_tokens_floor, self.config.retrieval_tokens // k)
        shown_rules = [
            clip_to_share(scored(rule, i + 1, similarity(query, f"{rule.title}\n{rule.content}"), 0.0, rule.utility), share)
            for i, rule in enumerate(residents)
        ]
        shown_items = [
            clip_to_share(scored(found[r.id], i + 1, r.similarity, r.exploration, r.score), share) for i, r in enumerate(ranking.items)
        ]
        already = set(self.store.episodes.shown_ids(episode_id))
        now = time.time()
        log = [dict(s.model_dump(), resident=True) for s in shown_rules] + [dict(s.model_dump(), resident=False) for s in shown_items]
        self.store.episodes.log_shown(episode_id, log, query[:2000], now)
        items.mark_shown(dict.fromkeys(s["id"] for s in log if s["id"] not in already))
        self.store.episodes.touch(episode_id, now)
        overhead = self.config.tokens_per_entry
        tokens = sum(approx_tokens(f"{s.title}\n{s.content}\n{s.code or ''}") + overhead for s in shown_rules + shown_items)
        return RetrievalResult(
            episode_id=episode_id, resident_rules=shown_rules, items=shown_items, filtered_out=ranking.filtered_out, tokens=tokens
        )

    # --------------------------------------------------------------- attempts

    def check_attempt(self, episode_id: int | None, adopted: Sequence[Adoption], caller: Caller) -> None:
        """What `record_attempt` will refuse, checked before an evaluation
        spends minutes (the record re-checks: the episode may close meanwhile)."""
        if episode_id is None:
            if adopted:
                raise InvalidInput("adopted_ids need an episode_id: pass the one retrieve_rules returned")
            return
        _check_evidence(adopted)
        with self.store.transaction(write=False):
            self._open_row(episode_id, "start a new one with retrieve_rules", caller)
            self._check_shown(episode_id, adopted)

    def record_attempt(
        self,
        result: EvalResult,
        *,
        episode_id: int | None,
        adopted: Sequence[Adoption] = (),
        candidate_path: str | None = None,
        caller: Caller,
        request_id: str | None = None,
        host: str | None = None,
        labels: tuple[str | None, str | None] = (None, None),
        attempt_id: int | None = None,
    ) -> EvalResult:
        """Store an evaluation as an attempt (with its adoptions); returns it
        as stored. The same `request_id` twice stores it once; `attempt_id`
        is the id reserved when the evaluation started (a fresh one without)."""
        if adopted and episode_id is None:
            raise InvalidInput("adopted_ids need an episode_id: pass the one retrieve_rules returned")
        _check_evidence(adopted)
        user = caller.user
        with self.store.transaction():
            if request_id is not None:
                existing = self.store.episodes.attempt_by_request(request_id)
                if existing is not None:
                    return attempt_result(existing)
            now = time.time()
            if episode_id is not None:
                self._open_row(episode_id, "start a new one with retrieve_rules", caller)
                self._check_shown(episode_id, adopted)
                self.store.episodes.touch(episode_id, now)
            timing = result.candidate_timing
            attempt_id = self.store.episodes.add_attempt(
                {
                    "id": attempt_id,
                    "episode_id": episode_id,
                    "task": result.task,
                    "backend": result.backend,
                    "status": result.status,
                    "candidate_hash": result.candidate_hash,
                    "candidate_path": candidate_path,
                    "speedup": result.speedup,
                    "candidate_ms": timing.median_ms if timing else None,
                    "created_at": now,
                    "author": user,
                    "request_id": request_id,
                    "host": host or result.host,
                    "speedup_trusted": None if result.speedup_trusted is None else int(result.speedup_trusted),
                    "operator": labels[0],
                    "family": labels[1],
                    # attempt_id, episode_id and created_at live in their columns.
                    "result": result.model_dump_json(exclude={"attempt_id", "episode_id", "created_at"}),
                }
            )
            if episode_id is not None:  # adoptions come with one: checked above
                for a in adopted:
                    self._adopt(episode_id, a, attempt_id, user, now)
            return result.model_copy(update={"attempt_id": attempt_id, "episode_id": episode_id, "created_at": now})

    def attempt(self, attempt_id: int, caller: Caller) -> EvalResult:
        """One stored attempt's result; NotFound when there is none, Forbidden when it is another person's."""
        with self.store.transaction(write=False):
            row = self.store.episodes.attempt(attempt_id)
            check_owner(row["author"], caller, f"attempt {attempt_id}", "read your own attempts")
            return attempt_result(row)

    def results_for(self, candidate_path: str, limit: int) -> list[EvalResult]:
        with self.store.transaction(write=False):
            return [attempt_result(r) for r in self.store.episodes.results_for_path(candidate_path, limit)]

    # --------------------------------------------------------------- adoption

    def record_adoption(
        self, episode_id: int, adopted: Sequence[Adoption], *, attempt_id: int | None, lesson: Lesson | None, close: bool, caller: Caller
    ) -> AdoptionReport:
        _check_evidence(adopted)
        user = caller.user
        new = dense = vector = None
        with self.store.transaction(write=False):
            row = self._open_row(episode_id, "adoption and lessons must be reported before it closes", caller)
            if attempt_id is not None:
                self._check_attempt_owner(attempt_id, episode_id)
            if lesson is not None:
                # Validated before anything is written, so a bad lesson changes nothing.
                new = validation.validate(self._lesson_item(lesson, row, attempt_id), self.config)
        if new is not None and self.memory.dense is not None:
            text = f"{new.title}\n{new.content}"
            vector = self.memory.dense.embed(text)
            dense = self.memory.dense.search(text, self.config.dedup_dense_pool, vector=vector)
        with self.store.transaction():
            self._open_row(episode_id, "adoption and lessons must be reported before it closes", caller)
            self._check_shown(episode_id, adopted)
            now = time.time()
            for a in adopted:
                self._adopt(episode_id, a, attempt_id, user, now)
            self.store.episodes.touch(episode_id, now)
            added = None
            if new is not None:
                added = self.memory.add_in_transaction(new, user=user, dedup=True, dense=dense)
                if vector is not None and self.memory.dense is not None and not added.merged:
                    self.memory.dense.add(added.item.id, f"{new.title}\n{new.content}", vector)
            report = self._close(episode_id, "explicit") if close else AdoptionReport(episode_id=episode_id, closed=False)
            if added is not None:
                report.new_item, report.lesson_merged = added.item, added.merged
        self._consolidate_if_due([report], caller, attach=report)
        return report

    def close(self, episode_id: int, caller: Caller) -> AdoptionReport:
        with self.store.transaction():
            check_owner(self.store.episodes.get(episode_id)["author"], caller, f"episode {episode_id}", "close your own episodes")
            report = self._close(episode_id, "explicit")
        self._consolidate_if_due([report], caller, attach=report)
        return report

    def close_idle(self) -> list[AdoptionReport]:
        with self.store.transaction():
            reports = [self._close(e["id"], "idle") for e in self.store.episodes.idle(time.time() - self.config.episode_idle_s)]
        self._consolidate_if_due(reports, Caller(None, admin=True))
        return reports

    # ---------------------------------------------------------------- reading

    def get(self, episode_id: int, caller: Caller) -> EpisodeDetail:
        with self.store.transaction(write=False):
            row = self.store.episodes.get(episode_id)
            check_owner(row["author"], caller, f"episode {episode_id}", "show your own episodes")
            shown = [
                ScoredItem(
                    id=r["item_id"],
                    kind=r["kind"],
                    title=r["title"],
                    content=r["content"],
                    code=r["code"],
                    tags=json.loads(r["tags"]),
                    utility=r["utility"],
                    n_adopted=r["n_adopted"],
                    adoption_rate=r["adoption_rate"],
                    similarity=r["similarity"],
                    exploration=r["exploration"],
                    score=r["score"],
                    rank=r["rank"],
                    author=r["author"],
                    authors=json.loads(r["authors"]),
                )
                for r in self.store.episodes.shown_rows(episode_id)
                # Another person's private item stays theirs, even in an episode that showed it.
                if r["scope"] != "private" or r["author"] == caller.user
            ]
            adopted = [
                Adoption(id=r["item_id"], evidence=r["evidence"], weight=r["weight"]) for r in self.store.episodes.adoptions(episode_id)
            ]
            rows = self.store.episodes.attempts(episode_id)
            by_attempt = self.store.episodes.adopted_in_attempts([r["id"] for r in rows])
            attempts = [
                AttemptSummary(
                    id=r["id"],
                    status=r["status"],
                    speedup=r["speedup"],
                    candidate_ms=r["candidate_ms"],
                    speedup_trusted=None if r["speedup_trusted"] is None else bool(r["speedup_trusted"]),
                    candidate_hash=r["candidate_hash"],
                    adopted_ids=by_attempt[r["id"]],
                    created_at=r["created_at"],
                )
                for r in rows
            ]
            updates = self.store.audit.utility_log(episode_id=episode_id)
            base = _summary(row, len(rows))
        return EpisodeDetail(**base.model_dump(), shown=shown, adopted=adopted, attempt_list=attempts, updates=updates)

    def list(self, *, status: str | None, limit: int, author: str | None = None) -> list[EpisodeSummary]:
        if status not in (None, "open", "closed"):
            raise InvalidInput("status must be 'open' or 'closed'")
        if not 1 <= limit <= 1000:
            raise InvalidInput("limit must lie in 1..1000")
        with self.store.transaction(write=False):
            rows = self.store.episodes.list(status=status, author=author, limit=limit)
            return [_summary(r, self.store.episodes.attempt_count(r["id"])) for r in rows]

    # -------------------------------------------------------------- internals

    def _open_row(self, episode_id: int, hint: str, caller: Caller) -> Row:
        row = self.store.episodes.get(episode_id)  # NotFound for an unknown id
        check_owner(row["author"], caller, f"episode {episode_id}", "start your own with retrieve_rules")
        if row["status"] != "open":
            raise Conflict(f"episode {episode_id} is already closed ({outcome_text(row)}); {hint}")
        return row

    def _check_shown(self, episode_id: int, adopted: Sequence[Adoption]) -> None:
        if not adopted:
            return
        shown = set(self.store.episodes.shown_ids(episode_id))
        unknown = sorted({a.id for a in adopted} - shown)
        if unknown:
            raise InvalidInput(
                f"items {unknown} were not shown in episode {episode_id}; adopt only ids returned by "
                f"retrieve_rules for this episode (shown: {sorted(shown) or 'none'})"
            )

    def _check_attempt_owner(self, attempt_id: int, episode_id: int) -> None:
        owner = self.store.episodes.attempt(attempt_id)["episode_id"]
        if owner != episode_id:
            raise InvalidInput(f"attempt {attempt_id} does not belong to episode {episode_id}")

    def _adopt(self, episode_id: int, a: Adoption, attempt_id: int | None, user: str | None, now: float) -> None:
        self.store.episodes.adopt(episode_id, a.id, attempt_id, a.evidence, a.weight, user, now)

    def _lesson_item(self, lesson: Lesson, row: Row, attempt_id: int | None) -> NewItem:
        tags = list(lesson.tags)
        hardware = row["hardware"]
        if attempt_id is not None:
            result = attempt_result(self.store.episodes.attempt(attempt_id))
            # Compiler failures are what the memory should learn from: carry
            # the category and chip so retrieval can filter on them.
            tags += [d.category for d in result.diagnostics if d.category][:4]
            chip = result.compile_info.chip
            if chip:
                tags.append(chip)
                hardware = hardware or chip
        return NewItem(
            title=lesson.title,
            content=lesson.content,
            code=lesson.code,
            kind="experience",
            scope=lesson.scope or row["scope"],
            operator=row["operator"],
            family=row["family"],
            backend=row["backend"],
            hardware=hardware,
            tags=sorted(set(tags)),
            source_episode=row["id"],
            source_attempt=attempt_id,
        )

    def _close(self, episode_id: int, reason: CloseReason) -> AdoptionReport:
        return close_and_credit(self.store, self.config, episode_id, reason)

    def _consolidate_if_due(self, reports: Sequence[AdoptionReport], caller: Caller, attach: AdoptionReport | None = None) -> None:
        every = self.config.auto_consolidate_every
        # Only credited closes count: an episode without evidence changed no
        # utility, so it cannot make a consolidation due.
        if not every or self.consolidate is None or not any(r.credited for r in reports):
            return
        since = self.store.episodes.credited_since(self.store.audit.last_standing_at())
        if since >= every:
            done = self.consolidate(caller)
            if attach is not None:
                attach.consolidation = done


def _check_evidence(adopted: Sequence[Adoption]) -> None:
    for a in adopted:
        validation.check_text(f"evidence for item {a.id}", a.evidence, 4000, required=False)


def _in_scope(item: Item, filters: Filters, user: str | None) -> bool:
    return visible(item, user) and (item.scope == "private" or item.scope in filters.scopes)


def _summary(row: Row, attempts: int) -> EpisodeSummary:
    closed = row["status"] == "closed"
    return EpisodeSummary(
        id=row["id"],
        task=row["task"],
        operator=row["operator"],
        family=row["family"],
        backend=row["backend"],
        client=row["client"],
        author=row["author"],
        status=row["status"],
        reward=row["reward"],
        attempts=attempts,
        created_at=row["created_at"],
        closed_at=row["closed_at"],
        close_reason=row["close_reason"],
        credited=(row["reward"] is not None) if closed else None,
    )


def attempt_result(row: Row) -> EvalResult:
    """The stored result with the ids and time its columns hold."""
    result = EvalResult.model_validate_json(row["result"])
    return result.model_copy(update={"attempt_id": row["id"], "episode_id": row["episode_id"], "created_at": row["created_at"]})


def episode_key(
    task: str,
    *,
    operator: str | None,
    family: str | None = None,
    backend: str | None,
    hardware: str | None,
    client: str | None,
    scope: str | None,
    reference: str | None,
    load_task: Callable[[str], Task],
) -> tuple[EpisodeKey, str]:
    """What an episode is about, and the retrieval query: a bundled task or
    reference contributes its operator, family and description (where the
    caller did not name them); free text describing the operator is used as
    it is, with the operator and family the caller names."""
    scope = validation.check_scope(scope)
    family = (family or "").strip() or None
    description = ""
    task_key = task.strip()
    looks_like_task = "class Model" in task or (" " not in task.strip() and len(task) < 300)
    try:
        t = load_task(task) if looks_like_task else None
    except SageError:
        t = None  # free text describing the operator is fine for retrieval
    task_free = int(t is None)
    if t is not None:
        operator = operator or t.operator
        family = family or t.family
        description = f"{t.name} {t.description}"
        task_key = t.id
    if "\n" in task_key:
        task_key = "inline:" + hashlib.sha256(task_key.encode()).hexdigest()[:12]
    query = " ".join(filter(None, [task if t is None else "", operator, family, description, backend, hardware, (reference or "")[:2000]]))
    key = EpisodeKey(
        task=task_key[:300],
        operator=operator,
        family=family,
        backend=backend or None,
        hardware=hardware,
        client=client,
        scope=scope,
        task_free=task_free,
    )
    return key, query
