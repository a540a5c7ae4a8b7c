"""Applying UGC to the store: abstraction of eligible clusters into rules,
rulebook selection, and the logged, reversible record of each run."""

from __future__ import annotations

import json
import logging
import time
from typing import Callable

from sage_engine.config import Config
from sage_engine.errors import Conflict, InvalidInput, NotFound
from sage_engine.memory import consolidation as ugc
from sage_engine.memory.store import Store, check_id, item_from_row
from sage_engine.models import ConsolidationReport, Item, RuleDraft

log = logging.getLogger(__name__)

Progress = Callable[[float, float | None, str], None]


def consolidate(
    store: Store,
    config: Config,
    abstractor: ugc.RuleAbstractor,
    *,
    dry_run: bool = False,
    budget_tokens: int | None = None,
    progress: Progress | None = None,
) -> ConsolidationReport:
    budget = budget_tokens or config.budget_tokens
    if budget <= 0 or budget > 200_000:
        raise InvalidInput("budget_tokens must lie between 1 and 200000")
    step = progress or (lambda *_: None)
    fallback = ugc.DeterministicAbstractor()
    # Gate and abstract outside the write lock: an LLM abstractor may take
    # seconds per cluster, and other processes must keep writing meanwhile.
    step(0, 3, "gating items")
    eligible = _eligible(store.query("SELECT * FROM items WHERE status = 'active' AND kind = 'experience'"), config)
    clusters = ugc.cluster(eligible, config.cluster_threshold)
    step(1, 3, f"abstracting {len(clusters)} clusters")
    drafts: list[tuple[list[Item], RuleDraft, str]] = []
    notes: list[str] = []
    for group in clusters:
        draft, used = _abstract(abstractor, fallback, group, notes)
        drafts.append((group, draft, used))
    with store.transaction() as conn:
        # Another process may have merged, quarantined or re-credited an item
        # while we abstracted: keep only clusters that are still eligible as a whole.
        still = {it.id for it in _eligible(conn.execute("SELECT * FROM items WHERE status = 'active' AND kind = 'experience'").fetchall(), config)}
        for group, _, _ in list(drafts):
            if not all(it.id in still for it in group):
                notes.append(f"cluster {[it.id for it in group]} changed during consolidation; left for the next run")
        drafts = [d for d in drafts if all(it.id in still for it in d[0])]
        eligible = [it for it in eligible if it.id in still]
        snapshot: dict[str, object] = {"statuses": {}, "created": []}
        now = time.time()
        new_rules: list[Item] = []
        for i, (group, draft, _) in enumerate(drafts):
            rule = _rule_item(draft, group, now, -(i + 1))
            new_rules.append(rule)
        existing = [item_from_row(r) for r in conn.execute("SELECT * FROM items WHERE kind = 'rule' AND status IN ('active', 'resident')")]
        step(2, 3, "choosing the rulebook")
        choice = ugc.choose_rulebook(existing + new_rules, config, budget)
        kinds = {d[2] for d in drafts}
        report = ConsolidationReport(
            dry_run=dry_run,
            eligible=[it.id for it in eligible],
            merged=[[it.id for it in g] for g, _, _ in drafts],
            created_rules=[d for _, d, _ in drafts],
            budget_tokens=budget,
            tokens=choice.tokens,
            abstraction="llm" if "llm" in kinds else ("deterministic" if drafts else "none"),
            notes=notes,
        )
        if dry_run:
            report.promoted = [i for i in choice.resident if i < 0 or _status(existing, i) != "resident"]
            report.demoted = choice.demoted
            report.rulebook = [r for r in existing + new_rules if r.id in choice.resident]
            step(3, 3, "dry run: nothing written")
            return report

        id_map: dict[int, int] = {}
        for rule, (group, draft, _) in zip(new_rules, drafts):
            row = rule.model_dump(exclude={"id", "status_reason", "support"})
            row.update(target_sum=sum(_target_sum(conn, g.id) for g in group), target_sq=sum(_target_sq(conn, g.id) for g in group))
            new_id = store.db["items"].insert(_json(row)).last_pk  # type: ignore[union-attr]
            id_map[rule.id] = new_id
            snapshot["created"].append(new_id)  # type: ignore[union-attr]
            for g in group:
                snapshot["statuses"][str(g.id)] = g.status  # type: ignore[index]
                conn.execute("UPDATE items SET status = 'merged', status_reason = ?, updated_at = ? WHERE id = ?",
                             (f"abstracted into rule #{new_id}", now, g.id))
        resident = [id_map.get(i, i) for i in choice.resident]
        promoted, demoted = [], []
        for r in existing:
            if r.status == "resident" and r.id not in resident:
                snapshot["statuses"][str(r.id)] = r.status  # type: ignore[index]
                conn.execute("UPDATE items SET status = 'active', status_reason = 'demoted by consolidation', updated_at = ? WHERE id = ?", (now, r.id))
                demoted.append(r.id)
        for rid in resident:
            cur = conn.execute("SELECT status FROM items WHERE id = ?", (rid,)).fetchone()[0]
            if cur != "resident":
                if rid not in snapshot["created"]:  # type: ignore[operator]
                    snapshot["statuses"].setdefault(str(rid), cur)  # type: ignore[union-attr]
                conn.execute("UPDATE items SET status = 'resident', status_reason = NULL, updated_at = ? WHERE id = ?", (now, rid))
                promoted.append(rid)
        report.promoted, report.demoted = promoted, demoted
        report.merged = [[g.id for g in group] for group, _, _ in drafts]
        report.rulebook = [item_from_row(r) for r in conn.execute("SELECT * FROM items WHERE status = 'resident' ORDER BY utility DESC, id")]
        report.tokens = sum(r.tokens for r in report.rulebook)
        cur = conn.execute("INSERT INTO consolidations (created_at, report, snapshot) VALUES (?, ?, ?)",
                           (now, "{}", json.dumps(snapshot)))
        report.consolidation_id = cur.lastrowid
        conn.execute("UPDATE consolidations SET report = ? WHERE id = ?", (report.model_dump_json(), cur.lastrowid))
        step(3, 3, f"rulebook has {len(report.rulebook)} rules, {report.tokens} tokens")
        log.info("consolidation %s: promoted %s demoted %s", report.consolidation_id, promoted, demoted)
        return report


def revert(store: Store, consolidation_id: int) -> ConsolidationReport:
    """Undo one consolidation: created rules are marked deleted (kept for the
    audit trail), every status it changed goes back. Only the latest
    un-reverted consolidation may be reverted, so states never interleave."""
    check_id(consolidation_id, "consolidation")
    with store.transaction() as conn:
        row = conn.execute("SELECT * FROM consolidations WHERE id = ?", (consolidation_id,)).fetchone()
        if row is None:
            raise NotFound(f"no consolidation with id {consolidation_id}")
        if row["reverted_at"] is not None:
            raise Conflict(f"consolidation {consolidation_id} was already reverted")
        later = conn.execute("SELECT id FROM consolidations WHERE id > ? AND reverted_at IS NULL", (consolidation_id,)).fetchall()
        if later:
            raise Conflict(f"revert consolidations {[r[0] for r in later]} first (newest first)")
        snap = json.loads(row["snapshot"])
        now = time.time()
        for rid in snap["created"]:
            conn.execute("UPDATE items SET status = 'deleted', status_reason = ?, updated_at = ? WHERE id = ?",
                         (f"consolidation {consolidation_id} reverted", now, rid))
        for item_id, status in snap["statuses"].items():
            conn.execute("UPDATE items SET status = ?, status_reason = NULL, updated_at = ? WHERE id = ?", (status, now, int(item_id)))
        conn.execute("UPDATE consolidations SET reverted_at = ? WHERE id = ?", (now, consolidation_id))
        report = ConsolidationReport.model_validate_json(row["report"])
        report.rulebook = [item_from_row(r) for r in conn.execute("SELECT * FROM items WHERE status = 'resident' ORDER BY utility DESC, id")]
        report.tokens = sum(r.tokens for r in report.rulebook)
        report.notes = report.notes + [f"reverted consolidation {consolidation_id}"]
        return report


def _eligible(rows, config: Config) -> list[Item]:
    stats = [ugc.GateStats(item_from_row(r), r["target_sum"], r["target_sq"]) for r in rows]
    return [s.item for s in stats if ugc.is_eligible(s, config)]


def _abstract(abstractor, fallback, group, notes) -> tuple[RuleDraft, str]:
    if abstractor.name != fallback.name:
        try:
            draft = abstractor.abstract(group)
            ugc.validate_draft(draft, group)
            return draft, "llm"
        except Exception as exc:  # noqa: BLE001 - any failure of the LLM path falls back, and is reported
            notes.append(f"{abstractor.name} rewrite of cluster {[g.id for g in group]} rejected ({exc}); kept the deterministic rule")
    draft = fallback.abstract(group)
    ugc.validate_draft(draft, group)
    return draft, "deterministic"


def _rule_item(draft: RuleDraft, group: list[Item], now: float, temp_id: int) -> Item:
    content = ugc.render_rule(draft)
    operators = sorted({op for g in group for op in g.operators_adopted})
    tags = sorted({t for g in group for t in g.tags} | {"rule"})
    fams = {g.family for g in group if g.family}
    backends = {g.backend for g in group if g.backend}
    hardware = {g.hardware for g in group if g.hardware}
    scopes = {g.scope for g in group}
    return Item(
        id=temp_id, kind="rule", status="active", title=draft.title[:200], content=content, code=None,
        scope=scopes.pop() if len(scopes) == 1 else "global",
        operator=None, family=fams.pop() if len(fams) == 1 else None,
        backend=backends.pop() if len(backends) == 1 else None,
        hardware=hardware.pop() if len(hardware) == 1 else None,
        tags=tags, utility=sum(g.utility for g in group) / len(group),
        n_retrieved=sum(g.n_retrieved for g in group), n_adopted=sum(g.n_adopted for g in group),
        n_credited=sum(g.n_credited for g in group), adoption_rate=max(g.adoption_rate for g in group),
        operators_adopted=operators, derived_from=draft.evidence,
        tokens=ugc.rule_tokens(draft), created_at=now, updated_at=now,
    )


def _status(items: list[Item], item_id: int) -> str | None:
    return next((i.status for i in items if i.id == item_id), None)


def _target_sum(conn, item_id: int) -> float:
    return conn.execute("SELECT target_sum FROM items WHERE id = ?", (item_id,)).fetchone()[0]


def _target_sq(conn, item_id: int) -> float:
    return conn.execute("SELECT target_sq FROM items WHERE id = ?", (item_id,)).fetchone()[0]


def _json(row: dict) -> dict:
    return {k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in row.items()}
