"""Episodes: what was shown, what was tried, what was adopted, and the ATU
credit applied when an episode closes."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from sage_engine.config import Config
from sage_engine.errors import Conflict, InvalidInput, NotFound
from sage_engine.memory import utility
from sage_engine.memory.retrieval import Candidate, Filters, rank
from sage_engine.memory.store import Store, check_id
from sage_engine.memory.text import approx_tokens, similarity
from sage_engine.models import (
    Adoption,
    AdoptionReport,
    AttemptSummary,
    EpisodeDetail,
    EpisodeSummary,
    EvalResult,
    Item,
    RetrievalResult,
    ScoredItem,
    UtilityUpdate,
)


@dataclass(frozen=True)
class EpisodeKey:
    task: str
    operator: str | None
    family: str | None
    backend: str | None
    hardware: str | None
    client: str | None
    scope: str


def open_episode(store: Store, key: EpisodeKey) -> int:
    now = time.time()
    return store.insert(
        "episodes",
        dict(key.__dict__, status="open", created_at=now, last_activity=now),
    )


def episode_row(store: Store, episode_id: int):
    check_id(episode_id, "episode")
    rows = store.query("SELECT * FROM episodes WHERE id = ?", (episode_id,))
    if not rows:
        raise NotFound(f"no episode with id {episode_id}; start one with retrieve_rules")
    return rows[0]


def touch(store: Store, episode_id: int) -> None:
    store.conn.execute("UPDATE episodes SET last_activity = ? WHERE id = ?", (time.time(), episode_id))


def retrieve(
    store: Store, config: Config, episode_id: int, query: str, filters: Filters, k: int,
    candidates: Callable[[str], list[Candidate]],
) -> RetrievalResult:
    """Rank `candidates(query)`, log exactly what is shown (rulebook included)
    against the episode, and count the showing in each item's n_retrieved."""
    with store.transaction() as conn:
        row = episode_row(store, episode_id)
        if row["status"] != "open":
            raise Conflict(f"episode {episode_id} is closed; call retrieve_rules without episode_id to start a new one")
        resident = store.items("status = 'resident' AND scope IN (%s)" % ",".join("?" * len(filters.scopes)),
                               filters.scopes, order="utility DESC, id")
        total = store.scalar("SELECT COALESCE(SUM(n_retrieved), 0) FROM items") or 0
        ranking = rank(candidates(query), filters, k, total, config)
        now = time.time()
        already = {r["item_id"] for r in conn.execute("SELECT item_id FROM retrievals WHERE episode_id = ?", (episode_id,))}
        shown_rules: list[ScoredItem] = []
        for i, rule in enumerate(resident):
            # Every task sees the rulebook; how well a rule matches this task
            # is logged so credit can tell "ignored" from "not applicable".
            match = similarity(query, f"{rule.title}\n{rule.content}")
            shown_rules.append(_scored(rule, i + 1, match, 0.0, rule.utility))
        shown_items: list[ScoredItem] = []
        for i, r in enumerate(ranking.items):
            shown_items.append(_scored(store.item(r.id), i + 1, r.similarity, r.exploration, r.score))
        for scored, resident_flag in [(s, 1) for s in shown_rules] + [(s, 0) for s in shown_items]:
            conn.execute(
                "INSERT INTO retrievals (episode_id, item_id, rank, score, similarity, exploration, utility, resident, query, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (episode_id, scored.id, scored.rank, scored.score, scored.similarity, scored.exploration,
                 scored.utility, resident_flag, query[:2000], now),
            )
            if scored.id not in already:
                conn.execute("UPDATE items SET n_retrieved = n_retrieved + 1 WHERE id = ?", (scored.id,))
        touch(store, episode_id)
    tokens = sum(approx_tokens(f"{s.title}\n{s.content}\n{s.code or ''}") + 12 for s in shown_rules + shown_items)
    return RetrievalResult(
        episode_id=episode_id,
        resident_rules=shown_rules,
        items=shown_items,
        filtered_out=ranking.filtered_out,
        tokens=tokens,
    )


def _scored(item: Item, rank_: int, sim: float, bonus: float, score: float) -> ScoredItem:
    return ScoredItem(
        id=item.id, kind=item.kind, title=item.title, content=item.content, code=item.code, tags=item.tags,
        utility=round(item.utility, 4), n_adopted=item.n_adopted, adoption_rate=round(item.adoption_rate, 4),
        similarity=round(sim, 4), exploration=round(bonus, 4), score=round(score, 4), rank=rank_,
    )


def shown_ids(store: Store, episode_id: int) -> list[int]:
    return [r[0] for r in store.query("SELECT DISTINCT item_id FROM retrievals WHERE episode_id = ? ORDER BY item_id", (episode_id,))]


def record_adoptions(store: Store, episode_id: int, adopted: Sequence[Adoption], attempt_id: int | None) -> None:
    """Store adoptions; refuse ids the episode never showed (ATU credits only
    against what was really shown)."""
    if not adopted:
        return
    with store.transaction() as conn:
        row = episode_row(store, episode_id)
        if row["status"] != "open":
            raise Conflict(f"episode {episode_id} is already closed; adoption must be reported before it closes")
        shown = set(shown_ids(store, episode_id))
        unknown = sorted({a.id for a in adopted} - shown)
        if unknown:
            raise InvalidInput(
                f"items {unknown} were not shown in episode {episode_id}; adopt only ids returned by "
                f"retrieve_rules for this episode (shown: {sorted(shown) or 'none'})"
            )
        for a in adopted:
            if len(a.evidence) > 4000:
                raise InvalidInput(f"evidence for item {a.id} is {len(a.evidence)} characters; the limit is 4000")
        now = time.time()
        for a in adopted:
            conn.execute(
                """INSERT INTO adoptions (episode_id, item_id, attempt_id, evidence, weight, created_at)
                   VALUES (?, ?, ?, ?, ?, ?)
                   ON CONFLICT(episode_id, item_id) DO UPDATE SET
                     weight = max(weight, excluded.weight),
                     attempt_id = COALESCE(excluded.attempt_id, attempt_id),
                     evidence = CASE WHEN excluded.evidence = '' THEN evidence
                                     WHEN evidence = '' THEN excluded.evidence
                                     ELSE evidence || ' | ' || excluded.evidence END""",
                (episode_id, a.id, attempt_id, a.evidence, a.weight, now),
            )
        touch(store, episode_id)


def record_attempt(store: Store, result: EvalResult, episode_id: int | None, candidate_path: str | None) -> EvalResult:
    """Store an evaluation; returns it as stored (attempt id, episode, time)."""
    now = time.time()
    with store.transaction() as conn:
        if episode_id is not None:
            row = episode_row(store, episode_id)
            if row["status"] != "open":
                raise Conflict(f"episode {episode_id} is closed; start a new one with retrieve_rules")
            touch(store, episode_id)
        cand_ms = result.candidate_timing.median_ms if result.candidate_timing else None
        cur = conn.execute(
            "INSERT INTO attempts (episode_id, task, backend, status, candidate_hash, candidate_path, speedup, candidate_ms, result, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (episode_id, result.task, result.backend, result.status, result.candidate_hash, candidate_path,
             result.speedup, cand_ms, "{}", now),
        )
        attempt_id = cur.lastrowid
        stored = result.model_copy(update={"attempt_id": attempt_id, "episode_id": episode_id, "created_at": now})
        conn.execute("UPDATE attempts SET result = ? WHERE id = ?", (stored.model_dump_json(), attempt_id))
        return stored


def close_and_credit(store: Store, config: Config, episode_id: int) -> AdoptionReport:
    """Close the episode and run ATU over everything it showed. The whole
    read-modify-write is one IMMEDIATE transaction."""
    with store.transaction() as conn:
        row = episode_row(store, episode_id)
        if row["status"] != "open":
            raise Conflict(f"episode {episode_id} is already closed (reward {row['reward']})")
        attempts = [
            utility.AttemptOutcome(a["status"] == "correct", a["candidate_ms"], a["speedup"])
            for a in conn.execute("SELECT status, candidate_ms, speedup FROM attempts WHERE episode_id = ? ORDER BY id", (episode_id,))
        ]
        reward, parts = utility.episode_reward(attempts, config)
        adopted = {r["item_id"]: r["weight"] for r in conn.execute("SELECT item_id, weight FROM adoptions WHERE episode_id = ?", (episode_id,))}
        shown = shown_ids(store, episode_id)
        # A resident rule that does not match the task was not "ignored": it
        # did not apply. Penalising it would tie its utility to whichever
        # family happens to be running.
        off_topic = {
            r["item_id"]
            for r in conn.execute(
                "SELECT item_id, MAX(similarity) AS sim FROM retrievals WHERE episode_id = ? AND resident = 1 GROUP BY item_id",
                (episode_id,),
            )
            if r["sim"] < config.rule_match_threshold
        }
        targets = utility.credit_targets(shown, adopted, reward, config, not_applicable=off_topic)
        now = time.time()
        operator = row["operator"] or row["task"]
        updates: list[UtilityUpdate] = []
        for item_id in shown:
            it = store.item_row(item_id)
            is_adopted = item_id in adopted
            p = utility.adoption_ema(it["adoption_rate"], is_adopted, config.adoption_ema_mu)
            ops = json.loads(it["operators_adopted"])
            if is_adopted and operator not in ops:
                ops.append(operator)
            fields = {
                "adoption_rate": p,
                "n_adopted": it["n_adopted"] + int(is_adopted),
                "operators_adopted": json.dumps(ops),
                "updated_at": now,
            }
            if item_id in targets:
                target, _ = targets[item_id]
                eta = utility.learning_rate(it["n_retrieved"], config.eta_min)
                after = utility.step(it["utility"], target, eta)
                fields.update(
                    utility=after,
                    n_credited=it["n_credited"] + 1,
                    target_sum=it["target_sum"] + target,
                    target_sq=it["target_sq"] + target * target,
                )
                conn.execute(
                    "INSERT INTO utility_log (item_id, episode_id, adopted, before, after, target, eta, strategy, rule_version, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (item_id, episode_id, int(is_adopted), it["utility"], after, target, eta,
                     config.credit_strategy, f"{utility.RULE_VERSION}/{config.reward_mode}", now),
                )
                updates.append(UtilityUpdate(item_id=item_id, episode_id=episode_id, strategy=config.credit_strategy,
                                             adopted=is_adopted, before=it["utility"], after=after, target=target, eta=eta))
            sets = ", ".join(f"{k} = ?" for k in fields)
            conn.execute(f"UPDATE items SET {sets} WHERE id = ?", (*fields.values(), item_id))
        conn.execute(
            "UPDATE episodes SET status = 'closed', reward = ?, reward_parts = ?, closed_at = ?, last_activity = ? WHERE id = ?",
            (reward, json.dumps(parts), now, now, episode_id),
        )
    return AdoptionReport(episode_id=episode_id, reward=reward, reward_parts=parts, updates=updates, closed=True)


def closed_since_consolidation(store: Store) -> int:
    """Episodes closed after the latest standing consolidation (derived, so
    a reverted consolidation or a restored backup needs no counter fix-up)."""
    return store.scalar(
        "SELECT COUNT(*) FROM episodes WHERE status = 'closed' AND closed_at > "
        "COALESCE((SELECT MAX(created_at) FROM consolidations WHERE reverted_at IS NULL), 0)"
    )


def utility_log(store: Store, where: str, value: int) -> list[UtilityUpdate]:
    rows = store.query(f"SELECT * FROM utility_log WHERE {where} ORDER BY id", (value,))
    return [UtilityUpdate(item_id=r["item_id"], episode_id=r["episode_id"], strategy=r["strategy"],
                          adopted=bool(r["adopted"]), before=r["before"], after=r["after"],
                          target=r["target"], eta=r["eta"]) for r in rows]


def summary(store: Store, row) -> EpisodeSummary:
    n = store.scalar("SELECT COUNT(*) FROM attempts WHERE episode_id = ?", (row["id"],))
    return EpisodeSummary(
        id=row["id"], task=row["task"], operator=row["operator"], family=row["family"], backend=row["backend"],
        client=row["client"], status=row["status"], reward=row["reward"], attempts=n,
        created_at=row["created_at"], closed_at=row["closed_at"],
    )


def detail(store: Store, episode_id: int) -> EpisodeDetail:
    row = episode_row(store, episode_id)
    shown = []
    for r in store.query(
        "SELECT r.*, i.kind, i.title, i.content, i.code, i.tags, i.n_adopted, i.adoption_rate FROM retrievals r"
        " JOIN items i ON i.id = r.item_id WHERE r.episode_id = ? ORDER BY r.id", (episode_id,)
    ):
        shown.append(ScoredItem(
            id=r["item_id"], kind=r["kind"], title=r["title"], content=r["content"], code=r["code"],
            tags=json.loads(r["tags"]), utility=r["utility"], n_adopted=r["n_adopted"],
            adoption_rate=r["adoption_rate"], similarity=r["similarity"], exploration=r["exploration"],
            score=r["score"], rank=r["rank"],
        ))
    adopted = [Adoption(id=r["item_id"], evidence=r["evidence"], weight=r["weight"])
               for r in store.query("SELECT * FROM adoptions WHERE episode_id = ? ORDER BY id", (episode_id,))]
    attempts = []
    for r in store.query("SELECT * FROM attempts WHERE episode_id = ? ORDER BY id", (episode_id,)):
        ids = [x["item_id"] for x in store.query("SELECT item_id FROM adoptions WHERE attempt_id = ?", (r["id"],))]
        attempts.append(AttemptSummary(id=r["id"], status=r["status"], speedup=r["speedup"], candidate_ms=r["candidate_ms"],
                                       candidate_hash=r["candidate_hash"], adopted_ids=ids, created_at=r["created_at"]))
    updates = utility_log(store, "episode_id = ?", episode_id)
    base = summary(store, row)
    return EpisodeDetail(**base.model_dump(), shown=shown, adopted=adopted, attempt_list=attempts, updates=updates)
