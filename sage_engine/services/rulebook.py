"""Applying UGC to the memory: abstraction of eligible clusters into rules,
rulebook selection, and the logged, reversible record of each run.

Gating and abstraction run outside the write transaction (an LLM abstractor
may take seconds per cluster); the writes are one transaction that first
re-checks that every cluster is still eligible.

On a team memory an item becomes a rule only once someone besides its author
adopted it; a rule's authors are its source items' authors, whoever ran the
consolidation. A budget that would demote, and a revert, need the admin
role. Reports show each caller only what they may see: others' private
items and rules are left out, ids included.
"""

from __future__ import annotations

import json
import logging
import time

from sage_engine.config import Config
from sage_engine.errors import Conflict, InvalidInput
from sage_engine.memory import consolidation as ugc
from sage_engine.memory.store import Store
from sage_engine.models import ConsolidationReport, Item, RuleDraft, ProgressCallback
from sage_engine.services.team import Caller, check_admin, is_team

log = logging.getLogger(__name__)

Draft = tuple[list[Item], RuleDraft, str]


class RulebookService:
    def __init__(self, store: Store, config: Config, abstractor: ugc.RuleAbstractor):
        self.store, self.config, self.abstractor = store, config, abstractor

    def consolidate(
        self,
        *,
        dry_run: bool = False,
        budget_tokens: int | None = None,
        progress: ProgressCallback | None = None,
        caller: Caller = Caller(None, admin=True),
    ) -> ConsolidationReport:
        report, seen = self._consolidate(dry_run, budget_tokens, progress, caller)
        return _for_viewer(report, seen, caller.user)

    def _consolidate(
        self, dry_run: bool, budget_tokens: int | None, progress: ProgressCallback | None, caller: Caller
    ) -> tuple[ConsolidationReport, dict[int, Item]]:
        user = caller.user
        budget = budget_tokens or self.config.budget_tokens
        if budget <= 0 or budget > 200_000:
            raise InvalidInput("budget_tokens must lie between 1 and 200000")
        step = progress or (lambda *_: None)
        step(0, 3, "gating items")
        with self.store.transaction(write=False):
            team = is_team(self.store, self.config)
            eligible = self._eligible(team)
            common = ugc.common_task_words(self.store.episodes.recent_queries(self.config.ugc_trigger_window), self.config)
        clusters = [c for group in _by_owner(eligible) for c in ugc.cluster(group, self.config.cluster_threshold)]
        step(1, 3, f"abstracting {len(clusters)} clusters")
        notes: list[str] = []
        drafts: list[Draft] = [(group, *_abstract(self.abstractor, group, notes)) for group in clusters]
        with self.store.transaction():
            # Another process may have merged, quarantined or re-credited an item
            # while we abstracted: keep only clusters still eligible as a whole.
            still = {it.id for it in self._eligible(team)}
            for group, _, _ in drafts:
                if not all(it.id in still for it in group):
                    notes.append(f"cluster {[it.id for it in group]} changed during consolidation; left for the next run")
            drafts = [d for d in drafts if all(it.id in still for it in d[0])]
            eligible = [it for it in eligible if it.id in still]
            now = time.time()
            new_rules = [_rule_item(draft, group, now, -(i + 1), user, self.config, common) for i, (group, draft, _) in enumerate(drafts)]
            existing = self.store.items.list(kind="rule", statuses=["active", "resident"])
            step(2, 3, "choosing the rulebook")
            choice = ugc.choose_rulebook(existing + new_rules, self.config, budget)
            if choice.demoted and budget < self.config.budget_tokens and not dry_run and not caller.admin:
                # What the smaller budget demotes beyond the configured one's choice is a wipe, not UGC.
                extra = sorted(
                    set(choice.demoted) - set(ugc.choose_rulebook(existing + new_rules, self.config, self.config.budget_tokens).demoted)
                )
                if extra:
                    check_admin(caller, f"a rulebook budget of {budget} tokens, which demotes rules {extra}")
            seen = {it.id: it for it in [*eligible, *existing, *new_rules]}
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
                status = {r.id: r.status for r in existing}
                report.promoted = [i for i in choice.resident if i < 0 or status.get(i) != "resident"]
                report.demoted = choice.demoted
                report.rulebook = [r for r in existing + new_rules if r.id in choice.resident]
                step(3, 3, "dry run: nothing written")
                return report, seen
            self._apply(report, drafts, new_rules, existing, choice, now, user)
            seen.update({it.id: it for it in report.rulebook})
        step(3, 3, f"rulebook has {len(report.rulebook)} rules, {report.tokens} tokens")
        log.info("consolidation %s: promoted %s demoted %s", report.consolidation_id, report.promoted, report.demoted)
        return report, seen

    def _apply(
        self,
        report: ConsolidationReport,
        drafts: list[Draft],
        new_rules: list[Item],
        existing: list[Item],
        choice: ugc.RulebookChoice,
        now: float,
        user: str | None,
    ) -> None:
        items = self.store.items
        # What a revert puts back: each changed item's status before, and the rules created.
        statuses: dict[str, str] = {}
        created: list[int] = []
        id_map: dict[int, int] = {}
        for rule, (group, _, _) in zip(new_rules, drafts):
            rows = [items.row(g.id) for g in group]
            row = rule.model_dump(exclude={"id", "status_reason", "support"})
            row.update(target_sum=sum(r["target_sum"] for r in rows), target_sq=sum(r["target_sq"] for r in rows))
            new_id = items.insert(row)
            id_map[rule.id] = new_id
            created.append(new_id)
            for g in group:
                statuses[str(g.id)] = g.status
                items.update(
                    g.id, {"status": "merged", "status_reason": f"abstracted into rule #{new_id}", "merged_into": new_id, "updated_at": now}
                )
        resident = [id_map.get(i, i) for i in choice.resident]
        promoted, demoted = [], []
        for r in existing:
            if r.status == "resident" and r.id not in resident:
                statuses[str(r.id)] = r.status
                items.update(r.id, {"status": "active", "status_reason": "demoted by consolidation", "updated_at": now})
                demoted.append(r.id)
        for rid in resident:
            current = items.row(rid)["status"]
            if current != "resident":
                if rid not in created:
                    statuses.setdefault(str(rid), current)
                items.update(rid, {"status": "resident", "status_reason": None, "updated_at": now})
                promoted.append(rid)
        report.promoted, report.demoted = promoted, demoted
        report.rulebook = items.list(statuses=["resident"])
        report.tokens = sum(r.tokens for r in report.rulebook)
        snapshot = {"statuses": statuses, "created": created}
        report.consolidation_id = self.store.audit.add_consolidation(json.dumps(snapshot), user, now)
        self.store.audit.set_consolidation_report(report.consolidation_id, report.model_dump_json())

    def revert(self, consolidation_id: int, caller: Caller) -> ConsolidationReport:
        """Undo one consolidation: created rules are marked deleted (kept for
        the audit trail), every status it changed goes back. Only the latest
        standing consolidation may be reverted, so states never interleave."""
        check_admin(caller, f"reverting consolidation {consolidation_id}")
        audit, items = self.store.audit, self.store.items
        with self.store.transaction():
            row = audit.consolidation(consolidation_id)
            if row["reverted_at"] is not None:
                raise Conflict(f"consolidation {consolidation_id} was already reverted")
            later = audit.standing_after(consolidation_id)
            if later:
                raise Conflict(f"revert consolidations {later} first (newest first)")
            snap = json.loads(row["snapshot"])
            now = time.time()
            for rid in snap["created"]:
                items.update(rid, {"status": "deleted", "status_reason": f"consolidation {consolidation_id} reverted", "updated_at": now})
            for item_id, status in snap["statuses"].items():
                items.update(int(item_id), {"status": status, "status_reason": None, "merged_into": None, "updated_at": now})
            audit.mark_reverted(consolidation_id, now)
            report = ConsolidationReport.model_validate_json(row["report"])
            report.rulebook = items.list(statuses=["resident"])
            report.tokens = sum(r.tokens for r in report.rulebook)
            report.notes = report.notes + [f"reverted consolidation {consolidation_id}"]
            return report

    def _eligible(self, team: bool) -> list[Item]:
        stats = [ugc.GateStats(item, s, sq) for item, s, sq in self.store.items.gate_rows()]
        return [s.item for s in stats if ugc.is_eligible(s, self.config, team=team)]


def _for_viewer(report: ConsolidationReport, seen: dict[int, Item], viewer: str | None) -> ConsolidationReport:
    """The report as `viewer` may see it: another person's private items and
    rules are left out, whole and counted (their ids too)."""

    def mine(item_id: int) -> bool:
        it = seen.get(item_id)
        return it is None or it.scope != "private" or it.author == viewer

    drafts = [(ids, d) for ids, d in zip(report.merged, report.created_rules) if all(mine(i) for i in ids)]
    rulebook = [r for r in report.rulebook if mine(r.id)]
    return report.model_copy(
        update={
            "eligible": [i for i in report.eligible if mine(i)],
            "promoted": [i for i in report.promoted if mine(i)],
            "demoted": [i for i in report.demoted if mine(i)],
            "merged": [ids for ids, _ in drafts],
            "created_rules": [d for _, d in drafts],
            "rulebook": rulebook,
            "tokens": sum(r.tokens for r in rulebook if r.scope != "private"),
        }
    )


def _by_owner(items: list[Item]) -> list[list[Item]]:
    """Items that may share a rule: same scope, and same author for private
    ones (a rule must never show one person's private lesson to the team)."""
    groups: dict[tuple[str, str | None], list[Item]] = {}
    for it in items:
        groups.setdefault((it.scope, it.author if it.scope == "private" else None), []).append(it)
    return list(groups.values())


def _abstract(abstractor: ugc.RuleAbstractor, group: list[Item], notes: list[str]) -> tuple[RuleDraft, str]:
    fallback = ugc.DeterministicAbstractor()
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


def _rule_item(
    draft: RuleDraft, group: list[Item], now: float, temp_id: int, user: str | None, config: Config, common: frozenset[str]
) -> Item:
    content = ugc.render_rule(draft)
    scope_ = ugc.rule_scope(group, draft, config, common)
    operators = sorted({op for g in group for op in g.operators_adopted})
    tags = sorted({t for g in group for t in g.tags} | {"rule"})
    fams = {g.family for g in group if g.family}
    backends = {g.backend for g in group if g.backend}
    hardware = {g.hardware for g in group if g.hardware}
    scope = group[0].scope
    authors = sorted({a for g in group for a in (g.authors if g.authors else [g.author]) if a})
    return Item(
        id=temp_id,
        kind="rule",
        status="active",
        title=draft.title[:200],
        content=content,
        code=None,
        scope=scope,
        # A rule is its source items' authors' work, never the consolidating user's.
        author=group[0].author,
        authors=authors,
        adopted_by=sorted({a for g in group for a in g.adopted_by}),
        operator=None,
        family=fams.pop() if len(fams) == 1 else None,
        backend=backends.pop() if len(backends) == 1 else None,
        hardware=hardware.pop() if len(hardware) == 1 else None,
        tags=tags,
        utility=sum(g.utility for g in group) / len(group),
        n_retrieved=sum(g.n_retrieved for g in group),
        n_adopted=sum(g.n_adopted for g in group),
        n_credited=sum(g.n_credited for g in group),
        adoption_rate=max(g.adoption_rate for g in group),
        operators_adopted=operators,
        families_adopted=sorted({f for g in group for f in g.families_adopted}),
        derived_from=draft.evidence,
        tokens=ugc.rule_tokens(draft),
        created_at=now,
        updated_at=now,
        rule_families=scope_.families,
        rule_operators=scope_.operators,
        rule_backends=scope_.backends,
        rule_hardware=scope_.hardware,
        rule_triggers=scope_.triggers,
    )
