"""Seeded agent histories shared by the benchmarks (imported as a top-level module from ``bench/``)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from ctxrecover.messages import Message

__all__ = ["build_history", "random_text"]

#: ``turn(rng, index, tool_chars)`` -> the messages of one agent turn.
TurnBuilder = Callable[[random.Random, int, int], list[Message]]
MESSAGES_PER_TURN = 4
MIN_TOOL_CHARS = 500
NEWLINE_CHANCE = 0.08


def random_text(rng: random.Random, chars: int, words: Sequence[str]) -> str:
    """``chars`` characters of ``words`` picked by ``rng``, with a newline now and then."""
    picked: list[str] = []
    total = 0
    while total < chars:
        word = rng.choice(words)
        picked.append(word)
        total += len(word) + 1
        if rng.random() < NEWLINE_CHANCE:
            picked.append("\n")
    return " ".join(picked)[:chars]


def build_history(
    turn: TurnBuilder, *, system: str, seed: int, messages: int, target_bytes: int, turn_overhead: int
) -> list[Message]:
    """A seeded history of ``messages`` messages weighing about ``target_bytes``.

    ``turn_overhead`` is what a turn weighs besides its tool result; the tool results
    fill the rest of the target.
    """
    rng = random.Random(seed)
    turns = messages // MESSAGES_PER_TURN
    tool_chars = max(MIN_TOOL_CHARS, target_bytes // turns - turn_overhead)
    history = [Message.system(system)]
    for index in range(turns):
        history.extend(turn(rng, index, tool_chars))
    return history[:messages]
