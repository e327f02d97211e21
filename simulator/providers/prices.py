"""Token usage of a mock reply and what it costs: USD per million tokens, by model family.

A model id is priced by the *longest* family name it contains, so Bedrock ids
such as ``anthropic.claude-3-5-sonnet-20241022-v2:0`` match too; an unknown model
gets :data:`DEFAULT_PRICE`, not an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["DEFAULT_PRICE", "PRICES", "Price", "Usage", "cost", "price_for"]


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens: input, output, cache read and cache write."""

    input: float
    output: float
    cache_read: float
    cache_write: float

    def cost(self, usage: Usage) -> float:
        """The USD cost of ``usage`` at this price."""
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_tokens * self.cache_write
        ) / 1_000_000


# Keyed by model family; a model id matches the longest family it contains
# (Bedrock ids such as "anthropic.claude-3-5-sonnet-20241022-v2:0" included).
PRICES: Mapping[str, Price] = MappingProxyType(
    {
        "gpt-4o": Price(2.50, 10.00, 1.25, 2.50),
        "gpt-4o-mini": Price(0.15, 0.60, 0.075, 0.15),
        "gpt-4.1": Price(2.00, 8.00, 0.50, 2.00),
        "gpt-4.1-mini": Price(0.40, 1.60, 0.10, 0.40),
        "gpt-4.1-nano": Price(0.10, 0.40, 0.025, 0.10),
        "claude-opus-4": Price(15.00, 75.00, 1.50, 18.75),
        "claude-sonnet-4": Price(3.00, 15.00, 0.30, 3.75),
        "claude-3-7-sonnet": Price(3.00, 15.00, 0.30, 3.75),
        "claude-3-5-sonnet": Price(3.00, 15.00, 0.30, 3.75),
        "claude-3-5-haiku": Price(0.80, 4.00, 0.08, 1.00),
        "claude-haiku-4-5": Price(1.00, 5.00, 0.10, 1.25),
        "gemini-2.5-pro": Price(1.25, 10.00, 0.31, 1.25),
        "gemini-2.5-flash": Price(0.30, 2.50, 0.075, 0.30),
        "gemini-2.0-flash": Price(0.10, 0.40, 0.025, 0.10),
        "gemini-1.5-pro": Price(1.25, 5.00, 0.3125, 1.25),
    }
)
DEFAULT_PRICE = Price(3.00, 15.00, 0.30, 3.75)  # unknown models are priced like a mid-tier model


def price_for(model: str, prices: Mapping[str, Price] = PRICES, *, default: Price = DEFAULT_PRICE) -> Price:
    """The price of ``model``: the longest family name it contains, else ``default``."""
    matches = [family for family in prices if family in model]
    return prices[max(matches, key=len)] if matches else default


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one reply, normalised across formats (``model`` prices it)."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    model: str = ""


def cost(usage: Usage, price: Price | None = None) -> float:
    """USD cost of ``usage``; the price defaults to :func:`price_for` ``(usage.model)``."""
    return (price or price_for(usage.model)).cost(usage)
