"""LLM rule abstraction for UGC, with guards against drift.

The model rewrites a cluster of proven experiences into the fixed rule
template through a tool call. A draft is refused (InvalidInput, so the
rulebook falls back to the deterministic rule and says why) when it

- drops a field or an evidence id, or cites ids outside its cluster
  (`validate_draft`);
- drifts from its sources: too few of the rule's words come from the
  experiences it abstracts, or it states a number the sources never gave
  (a rewritten block size is the typical, dangerous drift).
"""

from __future__ import annotations

import logging
import re
from typing import Sequence

from pydantic import ValidationError

from sage_engine.agent import prompt
from sage_engine.agent.llm import LLM, Usage
from sage_engine.errors import InvalidInput
from sage_engine.memory.consolidation import validate_draft
from sage_engine.memory.text import words
from sage_engine.models import Item, RuleDraft

log = logging.getLogger(__name__)

# A digit run not glued to a word on its left: "BLOCK=4096", "2x", "0.8" count;
# the digits of identifiers (Ascend910B3, fp16, L0C, tl.float32) do not.
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:\.\d+)?")
# Numbers any prose may use without inventing a fact.
FREE_NUMBERS = frozenset({0.0, 1.0})


class LLMAbstractor:
    """`RuleAbstractor` backed by a model. Thresholds are per instance so an
    ablation can tighten or loosen them."""

    name = "llm"

    def __init__(self, llm: LLM, *, min_coverage: float = 0.5, max_tokens: int = 1500):
        # min_coverage: share of the rule's distinct words (stemmed, stopwords
        # dropped) that must occur in the cluster's text. A faithful
        # rewrite reuses the experiences' vocabulary; a rule about something
        # else does not.
        self.llm = llm
        self.min_coverage = min_coverage
        self.max_tokens = max_tokens
        self.usage = Usage()

    def abstract(self, cluster: Sequence[Item]) -> RuleDraft:
        if not cluster:
            raise InvalidInput("cannot abstract an empty cluster")
        message = prompt.abstraction_message(cluster, _stats(cluster))
        resp = self.llm.complete(
            prompt.abstraction_system(),
            [{"role": "user", "content": message}],
            [prompt.WRITE_RULE],
            tool_choice=prompt.WRITE_RULE.name,
            max_tokens=self.max_tokens,
        )
        self.usage.add(resp.usage)
        call = next((c for c in resp.tool_calls if c.name == prompt.WRITE_RULE.name), None)
        if call is None:
            raise InvalidInput("the model did not call write_rule")
        try:
            draft = RuleDraft.model_validate(call.input)
        except ValidationError as exc:
            fields = ", ".join(".".join(map(str, e["loc"])) or "input" for e in exc.errors())
            raise InvalidInput(f"the rule draft is malformed ({fields})") from exc
        validate_draft(draft, cluster)
        check_drift(draft, cluster, source_text=message, min_coverage=self.min_coverage)
        return draft


def check_drift(draft: RuleDraft, cluster: Sequence[Item], *, source_text: str = "", min_coverage: float = 0.5) -> None:
    """Raise InvalidInput when the draft says things its sources do not.

    `source_text` is what the model was shown (it may carry numbers such as
    adoption counts that the rationale may quote); the items' own text is
    always part of the sources.
    """
    sources = "\n".join(f"{it.title}\n{it.content}\n{it.code or ''}\n{' '.join(it.tags)}" for it in cluster)
    sources += "\n" + source_text
    vocabulary = set(words(sources))
    rule_words = set(words(f"{draft.title}\n{draft.rule}"))
    if rule_words:
        coverage = len(rule_words & vocabulary) / len(rule_words)
        if coverage < min_coverage:
            novel = sorted(rule_words - vocabulary)[:8]
            raise InvalidInput(
                f"the rule drifts from its sources: only {coverage:.0%} of its words occur in the experiences "
                f"(minimum {min_coverage:.0%}); new words: {', '.join(novel)}"
            )
    known = numbers(sources) | FREE_NUMBERS
    for field in ("title", "trigger", "rule", "rationale", "when_not"):
        new = sorted(numbers(getattr(draft, field)) - known)
        if new:
            shown = ", ".join(_fmt(n) for n in new[:6])
            raise InvalidInput(f"the rule's {field} introduces numbers not in its sources: {shown}")


def numbers(text: str) -> set[float]:
    """Numeric values written in `text`, so 4096 and 4096.0 compare equal.
    Digits inside identifiers (Ascend910B3, fp16, L0C) are not numbers."""
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # 4,096 -> 4096
    text = re.sub(r"(?<=\d)[xX](?=\d)", " ", text)  # 128x128 -> 128 128
    return {float(m.group()) for m in _NUMBER.finditer(text)}


def _fmt(n: float) -> str:
    return str(int(n)) if n.is_integer() else f"{n:g}"


def _stats(cluster: Sequence[Item]) -> str:
    operators = sorted({op for it in cluster for op in it.operators_adopted})
    adoptions = sum(it.n_adopted for it in cluster)
    mean_u = sum(it.utility for it in cluster) / len(cluster)
    return f"adopted {adoptions} times by {len(operators)} operators ({', '.join(operators)}), mean utility {mean_u:+.2f}"
