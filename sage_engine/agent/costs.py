"""Approximate model prices, for the cost column of a run report.

Prices are US dollars per million tokens as published by the providers when
this table was written; they change, so every cost SAGE prints is an
estimate. `--price IN,OUT` overrides the table for a run.
"""

from __future__ import annotations

from dataclasses import dataclass

from sage_engine.agent.llm import Usage
from sage_engine.errors import InvalidInput


@dataclass(frozen=True)
class Price:
    input: float  # USD per million input tokens
    output: float  # USD per million output tokens
    # Anthropic bills cache reads at 0.1x and 5-minute cache writes at 1.25x input.
    cache_read_factor: float = 0.1
    cache_write_factor: float = 1.25


# Matched by prefix, longest first, so dated ids ("claude-sonnet-4-5-20250929") find their family.
PRICES: dict[str, Price] = {
    "claude-opus-4-5": Price(5.0, 25.0),
    "claude-opus-4-1": Price(15.0, 75.0),
    "claude-opus-4": Price(15.0, 75.0),
    "claude-sonnet-4-5": Price(3.0, 15.0),
    "claude-sonnet-4": Price(3.0, 15.0),
    "claude-3-7-sonnet": Price(3.0, 15.0),
    "claude-haiku-4-5": Price(1.0, 5.0),
    "claude-3-5-haiku": Price(0.8, 4.0),
    "gpt-4.1-mini": Price(0.4, 1.6, cache_read_factor=0.25, cache_write_factor=1.0),
    "gpt-4.1": Price(2.0, 8.0, cache_read_factor=0.25, cache_write_factor=1.0),
    "gpt-4o-mini": Price(0.15, 0.6, cache_read_factor=0.5, cache_write_factor=1.0),
    "gpt-4o": Price(2.5, 10.0, cache_read_factor=0.5, cache_write_factor=1.0),
}


def price_for(model: str, override: Price | None = None) -> Price | None:
    if override is not None:
        return override
    for prefix in sorted(PRICES, key=len, reverse=True):
        if model.startswith(prefix):
            return PRICES[prefix]
    return None


def parse_price(text: str) -> Price:
    """`"3,15"` -> Price(3.0, 15.0) (USD per million input, output tokens)."""
    try:
        a, b = (float(x) for x in text.split(","))
    except ValueError as exc:
        raise InvalidInput(f"--price must be two numbers 'IN,OUT' in USD per million tokens, got {text!r}") from exc
    if a < 0 or b < 0:
        raise InvalidInput("--price values must be >= 0")
    return Price(a, b)


def cost_usd(usage: Usage, price: Price | None) -> float | None:
    """Estimated cost, or None when the model is not in the table."""
    if price is None:
        return None
    return (
        usage.input_tokens * price.input
        + usage.cache_read_tokens * price.input * price.cache_read_factor
        + usage.cache_write_tokens * price.input * price.cache_write_factor
        + usage.output_tokens * price.output
    ) / 1e6
