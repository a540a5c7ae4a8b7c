"""Memory strategies for ablation, and how each maps onto the engine.

| strategy      | memory shown | adoptions reported | credit rule   | consolidation |
|---------------|--------------|--------------------|---------------|---------------|
| none          | no           | no (no episode)    | -             | off           |
| retrieval     | yes          | no                 | adopted-only  | off           |
| uniform       | yes          | yes                | uniform       | off           |
| adopted-only  | yes          | yes                | adopted-only  | off           |
| atu           | yes          | yes                | atu           | off           |
| atu+ugc       | yes          | yes                | atu           | every K closed episodes |

`retrieval` shows memory but credits nothing: the episode closes with no
adoptions under the adopted-only rule, which updates no utility (the model's
claims are kept in the run record for analysis only). Every strategy except
`none` stores the model's lesson, so runs differ only in credit and
consolidation.
"""

from __future__ import annotations

from dataclasses import dataclass

from sage_engine.config import Config
from sage_engine.errors import InvalidInput

DEFAULT_CONSOLIDATE_EVERY = 10


@dataclass(frozen=True)
class Strategy:
    name: str
    retrieve: bool  # show resident rules and retrieved items, open an episode
    report_adoptions: bool  # pass the model's adopted ids to the engine
    credit_strategy: str
    consolidate: bool


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("none", False, False, "atu", False),
        Strategy("retrieval", True, False, "adopted-only", False),
        Strategy("uniform", True, True, "uniform", False),
        Strategy("adopted-only", True, True, "adopted-only", False),
        Strategy("atu", True, True, "atu", False),
        Strategy("atu+ugc", True, True, "atu", True),
    )
}


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise InvalidInput(f"strategy must be one of {', '.join(STRATEGIES)}, got {name!r}") from None


def strategy_config(config: Config, strategy: Strategy, consolidate_every: int | None = None) -> Config:
    """The engine Config a strategy runs under: its credit rule, and automatic
    consolidation only where the strategy consolidates."""
    every = 0
    if strategy.consolidate:
        every = consolidate_every or config.auto_consolidate_every or DEFAULT_CONSOLIDATE_EVERY
    return config.replace(credit_strategy=strategy.credit_strategy, auto_consolidate_every=every)
