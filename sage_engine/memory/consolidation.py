"""Utility-Gated Consolidation (UGC), as pure functions.

Eligible experiences (positive utility with a lower confidence bound, adopted
often, by several distinct operators) are clustered, each cluster is
abstracted into one rule in a fixed template, and the resident rulebook is
chosen greedily by u * p / tokens under a token budget. Residents are demoted
only below a lower threshold (hysteresis), back to the retrievable pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from sage_engine.config import Config
from sage_engine.errors import InvalidInput
from sage_engine.memory.text import approx_tokens, similarity
from sage_engine.memory.utility import lower_confidence_bound
from sage_engine.models import Item, RuleDraft


@dataclass(frozen=True)
class GateStats:
    """What the gate reads from an item; `target_sum`/`target_sq` feed the LCB."""

    item: Item
    target_sum: float
    target_sq: float


def is_eligible(s: GateStats, config: Config) -> bool:
    it = s.item
    if it.status != "active" or it.kind != "experience":
        return False
    if it.n_adopted < config.ugc_min_adoptions or len(set(it.operators_adopted)) < config.ugc_min_operators:
        return False
    if it.utility <= config.ugc_min_utility:
        return False
    if config.ugc_use_lcb:
        lcb = lower_confidence_bound(it.utility, it.n_credited, s.target_sum, s.target_sq, config.ugc_lcb_z)
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
        families = sorted({it.family for it in cluster if it.family})
        backends = sorted({it.backend for it in cluster if it.backend})
        hardware = sorted({it.hardware for it in cluster if it.hardware})
        trigger = "Operators like " + ", ".join(operators)
        if families:
            trigger += f" (families: {', '.join(families)})"
        if backends:
            trigger += f"; backend {', '.join(backends)}"
        if hardware:
            trigger += f"; hardware {', '.join(hardware)}"
        rule = lead.content.strip()
        others = [it.title.strip() for it in cluster[1:]]
        if others:
            rule += "\nRelated: " + "; ".join(others)
        adoptions = sum(it.n_adopted for it in cluster)
        mean_u = sum(it.utility for it in cluster) / len(cluster)
        rationale = (
            f"Adopted {adoptions} times across {len(operators)} operators; "
            f"mean utility {mean_u:+.2f} after measured outcomes."
        )
        scope = ", ".join(hardware + backends) or "the backends it was learned on"
        when_not = f"Outside {scope}, or when a measured result contradicts it: re-check with compile_and_bench."
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
    return (
        f"When: {draft.trigger}\n"
        f"Rule: {draft.rule}\n"
        f"Why: {draft.rationale}\n"
        f"Not when: {draft.when_not}\n"
        f"Evidence: {', '.join(f'#{i}' for i in draft.evidence)}"
    )


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
    def value(r: Item) -> float:
        return r.utility * max(r.adoption_rate, 0.05) / max(r.tokens, 1)

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
    demoted = [r.id for r in rules if r.status == "resident" and r.id not in chosen]
    return RulebookChoice(chosen, demoted, tokens)


def rule_tokens(draft: RuleDraft) -> int:
    return approx_tokens(draft.title + "\n" + render_rule(draft))
