"""Utility-Gated Consolidation (UGC), as pure functions.

Eligible experiences (positive utility with a lower confidence bound, adopted
often, by several distinct operators) are clustered, each cluster is
abstracted into one rule in a fixed template, and the resident rulebook is
chosen greedily by u * p / tokens under a token budget. Residents are demoted
only below a lower threshold (hysteresis), back to the retrievable pool.

A rule keeps the scope it was learned in as data (`RuleScope`): the families
its experiences were adopted in (none, meaning any family, once they were
adopted in `ugc_min_families` families or more), their backends and chips,
and trigger terms, the words they share. Each task sees the resident rules
whose scope matches it, best first by lower confidence bound, within a
per-task token budget (`residents_for_task`).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Protocol, Sequence

from sage_engine.config import Config
from sage_engine.errors import InvalidInput
from sage_engine.memory.text import approx_tokens, similarity, words
from sage_engine.memory.utility import lower_confidence_bound
from sage_engine.models import Item, RuleDraft


@dataclass(frozen=True)
class GateStats:
    """What the gate reads from an item; `target_sum`/`target_sq` feed the LCB."""

    item: Item
    target_sum: float
    target_sq: float


def is_eligible(s: GateStats, config: Config, *, team: bool = False) -> bool:
    """Proven enough to become a rule. On a team memory, adoption by the
    item's author alone proves nothing: others must have adopted it too."""
    it = s.item
    if it.status != "active" or it.kind != "experience":
        return False
    if team and len(set(it.adopted_by) - {it.author}) < config.team_min_other_adopters:
        return False
    if it.n_adopted < config.ugc_min_adoptions or len(set(it.operators_adopted)) < config.ugc_min_operators:
        return False
    if it.utility <= config.ugc_min_utility:
        return False
    if config.ugc_use_lcb:
        lcb = lower_confidence_bound(it.utility, it.n_credited, s.target_sum, s.target_sq, config.ugc_lcb_z, config.ugc_lcb_min_count)
        return lcb > config.ugc_min_utility
    return True


def cluster(items: Sequence[Item], threshold: float) -> list[list[Item]]:
    """Greedy single-link clustering by text similarity, highest utility first,
    so each cluster is led by its most useful member."""
    ordered = sorted(items, key=lambda i: (-i.utility, i.id))
    clusters: list[list[Item]] = []
    for item in ordered:
        text = f"{item.title}\n{item.content}"
        for group in clusters:
            if any(similarity(text, f"{g.title}\n{g.content}") >= threshold for g in group):
                group.append(item)
                break
        else:
            clusters.append([item])
    return clusters


class RuleAbstractor(Protocol):
    """Turns a cluster of proven experiences into one rule draft. The LLM
    abstractor (agent package) implements this too; its drafts pass
    `validate_draft` or the deterministic draft is kept."""

    name: str

    def abstract(self, cluster: Sequence[Item]) -> RuleDraft: ...


class DeterministicAbstractor:
    """No model: the lead item's text becomes the rule, the cluster's
    provenance becomes trigger, rationale and evidence."""

    name = "deterministic"

    def abstract(self, cluster: Sequence[Item]) -> RuleDraft:
        lead = cluster[0]
        operators = sorted({op for it in cluster for op in it.operators_adopted})
        families = sorted({f for it in cluster for f in it.families_adopted} | {it.family for it in cluster if it.family})
        backends = sorted({it.backend for it in cluster if it.backend})
        hardware = sorted({it.hardware for it in cluster if it.hardware})
        where = [f"{', '.join(families)} kernels" if families else "kernels like " + ", ".join(operators[:6])]
        where += [f"on {', '.join(hardware + backends)}"] if hardware or backends else []
        trigger = " ".join(where)
        rule = lead.content.strip()
        adoptions = sum(it.n_adopted for it in cluster)
        mean_u = sum(it.utility for it in cluster) / len(cluster)
        rationale = f"Adopted {adoptions} times across {len(operators)} operators; mean utility {mean_u:+.2f} after measured outcomes."
        when_not = "compile_and_bench measures otherwise"
        return RuleDraft(
            title=lead.title.strip(),
            trigger=trigger,
            rule=rule,
            rationale=rationale,
            when_not=when_not,
            evidence=[it.id for it in cluster],
        )


def validate_draft(draft: RuleDraft, cluster: Sequence[Item]) -> None:
    """Reject a rewrite that drops a field or any evidence id."""
    for name in ("title", "trigger", "rule", "rationale", "when_not"):
        if not getattr(draft, name).strip():
            raise InvalidInput(f"rule draft has an empty {name!r}")
    missing = {it.id for it in cluster} - set(draft.evidence)
    if missing:
        raise InvalidInput(f"rule draft dropped evidence ids {sorted(missing)}")
    extra = set(draft.evidence) - {it.id for it in cluster}
    if extra:
        raise InvalidInput(f"rule draft cites ids outside its cluster: {sorted(extra)}")


def render_rule(draft: RuleDraft) -> str:
    """What an agent reads: the advice and when it applies. The rationale and
    evidence stay in the draft, the consolidation log and `derived_from`.
    The advice is an item's words: quoted line by line, so a line of it
    saying "When: ..." or "## ..." stays its text, not the rule's structure."""
    quoted = "\n".join(f"> {line}" for line in draft.rule.strip().splitlines())
    return f"{quoted}\nWhen: {_one_line(draft.trigger)}\nNot when: {_one_line(draft.when_not)}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True)
class RulebookChoice:
    resident: list[int]
    demoted: list[int]
    tokens: int


def choose_rulebook(rules: Sequence[Item], config: Config, budget_tokens: int) -> RulebookChoice:
    """Greedy by u * p / tokens under the budget and max count.

    A rule enters only with u above the promote threshold; a sitting resident
    stays a candidate down to the (lower) demote threshold. p has a small
    floor so a fresh rule with no adoptions yet can still be ranked.
    """

    chosen: list[int] = []
    tokens = 0
    # Each person's private rules have a budget of their own: they cannot
    # crowd the team's rules out of the shared rulebook.
    owners: dict[str | None, list[Item]] = {}
    for r in rules:
        owners.setdefault(r.author if r.scope == "private" else None, []).append(r)
    for owner, group in owners.items():
        ids, used = _greedy(group, config, budget_tokens)
        chosen += ids
        tokens += used if owner is None else 0
    demoted = [r.id for r in rules if r.status == "resident" and r.id not in chosen]
    return RulebookChoice(chosen, demoted, tokens)


def _greedy(rules: Sequence[Item], config: Config, budget_tokens: int) -> tuple[list[int], int]:
    def value(r: Item) -> float:
        return r.utility * max(r.adoption_rate, config.ugc_adoption_floor) / max(r.tokens, 1)

    candidates = [
        r
        for r in rules
        if r.kind == "rule"
        and r.status in ("active", "resident")
        and r.utility > (config.demote_threshold if r.status == "resident" else config.ugc_min_utility)
    ]
    chosen: list[int] = []
    tokens = 0
    for r in sorted(candidates, key=lambda r: (-value(r), r.id)):
        if len(chosen) >= config.max_rules or tokens + r.tokens > budget_tokens:
            continue
        chosen.append(r.id)
        tokens += r.tokens
    return chosen, tokens


def rule_tokens(draft: RuleDraft) -> int:
    return approx_tokens(draft.title + "\n" + render_rule(draft))


# --------------------------------------------------------------- rule scope


@dataclass(frozen=True)
class RuleScope:
    """Where a rule applies. Empty lists mean "any"; a rule with no families
    must match the task by trigger terms instead."""

    families: list[str]
    operators: list[str]
    backends: list[str]
    hardware: list[str]
    triggers: list[str]


def common_task_words(queries: Sequence[str], config: Config) -> frozenset[str]:
    """Words in more than `ugc_trigger_max_share` of these task queries (as
    `text.words` stems them): what nearly every task says, so no trigger."""
    if len(queries) < config.ugc_trigger_min_tasks:
        return frozenset()
    seen = Counter(w for q in queries for w in set(words(q)))
    return frozenset(w for w, n in seen.items() if n > config.ugc_trigger_max_share * len(queries))


def rule_scope(cluster: Sequence[Item], draft: RuleDraft, config: Config, common: frozenset[str] = frozenset()) -> RuleScope:
    families = sorted({f for it in cluster for f in it.families_adopted} | {it.family for it in cluster if it.family})
    operators = sorted({op for it in cluster for op in it.operators_adopted})
    # Cross-family only with adoption in enough families: otherwise the rule
    # stays with the families that proved it.
    cross = len(families) >= config.ugc_min_families
    return RuleScope(
        families=[] if cross else families,
        operators=operators,
        backends=sorted({it.backend for it in cluster if it.backend}),
        hardware=sorted({it.hardware for it in cluster if it.hardware}),
        triggers=trigger_terms(cluster, draft, config.rule_trigger_terms, common),
    )


def trigger_terms(cluster: Sequence[Item], draft: RuleDraft, limit: int, common: frozenset[str] = frozenset()) -> list[str]:
    """The words at least half the cluster's experiences share (stemmed as
    `text.words` does), title words first, leaving out words most tasks
    mention (`common`): what a task must mention for a rule that has no
    family to go by."""
    seen = Counter(w for it in cluster for w in set(words(f"{it.title}\n{it.content}")) if len(w) > 2 and w not in common)
    titled = set(words(draft.title))
    need = math.ceil(len(cluster) / 2)
    shared = sorted((w for w, n in seen.items() if n >= need), key=lambda w: (-seen[w], w not in titled, w))
    return sorted(shared[:limit])


@dataclass(frozen=True)
class TaskContext:
    """What a task says about itself, for matching rule scopes."""

    family: str | None
    operator: str | None
    backend: str | None
    hardware: str | None
    terms: frozenset[str]

    @classmethod
    def of(
        cls, query: str, *, family: str | None = None, operator: str | None = None, backend: str | None = None, hardware: str | None = None
    ) -> "TaskContext":
        return cls(family, operator, backend, hardware, frozenset(words(query)))


def applies(rule: Item, task: TaskContext) -> bool:
    if rule.rule_backends and task.backend and task.backend not in rule.rule_backends:
        return False
    if rule.rule_hardware and task.hardware and task.hardware not in rule.rule_hardware:
        return False
    if rule.rule_families and task.family:
        return task.family in rule.rule_families
    if task.operator and task.operator in rule.rule_operators:
        return True
    # No family to go by (a cross-family rule, or a free-text task): the task
    # must mention what the rule is about.
    return bool(task.terms & set(rule.rule_triggers)) or bool(rule.rule_families and task.terms & set(rule.rule_families))


def residents_for_task(rules: Iterable[GateStats], task: TaskContext, config: Config) -> list[Item]:
    """The resident rules this task sees: those whose scope matches, best
    first by lower confidence bound (then utility), within the per-task
    budget and rule count."""

    def key(s: GateStats) -> tuple[float, float, int]:
        it = s.item
        lcb = lower_confidence_bound(it.utility, it.n_credited, s.target_sum, s.target_sq, config.ugc_lcb_z, config.ugc_lcb_min_count)
        return (-lcb, -it.utility, it.id)

    chosen: list[Item] = []
    shared, own = 0, 0  # the team's rules and the viewer's private ones each have the budget
    for s in sorted((s for s in rules if applies(s.item, task)), key=key):
        cost = s.item.tokens + config.tokens_per_entry
        private = s.item.scope == "private"
        if len(chosen) >= config.max_rules or (own if private else shared) + cost > config.ugc_resident_tokens:
            continue
        chosen.append(s.item)
        if private:
            own += cost
        else:
            shared += cost
    return chosen
