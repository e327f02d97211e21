"""The committed synthetic fixtures: how each ``fixtures/transcripts/`` file is generated."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.transcripts.generator import generate_to_file

__all__ = ["FIXTURE_RECIPES", "FixtureRecipe", "write_fixtures"]


@dataclass(frozen=True, slots=True)
class FixtureRecipe:
    """How one committed fixture in ``fixtures/transcripts/`` is generated."""

    filename: str
    seed: int
    turns: int
    description: str
    options: dict[str, Any] = field(default_factory=dict, hash=False)


FIXTURE_RECIPES: tuple[FixtureRecipe, ...] = (
    FixtureRecipe(
        "chat-50k.jsonl",
        101,
        15,
        "chat only, short questions and medium answers",
        {"tool_turn_ratio": 0.0, "answer_chars": 3_000, "recall_every": 0, "feedback_every": 0},
    ),
    FixtureRecipe("coding-120k.jsonl", 102, 8, "coding session with big file reads and re-reads", {}),
    FixtureRecipe(
        "floor-system-prompt-300k.jsonl",
        103,
        20,
        "a 100,000-char system prompt (payload-floor scenarios)",
        {"system_prompt_chars": 100_000, "big_read_chars": 6_000},
    ),
    FixtureRecipe(
        "chat-long-answers-600k.jsonl",
        104,
        70,
        "chat only, very long assistant answers",
        {"tool_turn_ratio": 0.0, "answer_chars": 8_000, "recall_every": 0, "feedback_every": 0},
    ),
    FixtureRecipe(
        "small-tools-1m.jsonl",
        105,
        72,
        "many small tool calls, often parallel",
        {
            "steps_per_turn": (3, 8),
            "max_parallel_calls": 5,
            "parallel_ratio": 0.5,
            "big_read_chars": 1_500,
            "small_result_chars": 300,
            "answer_chars": 600,
        },
    ),
    FixtureRecipe(
        "images-2m.jsonl",
        106,
        110,
        "coding session with a screenshot (real PNG) on every 2nd turn",
        {"image_every": 2},
    ),
    FixtureRecipe(
        "screenshots-1m.jsonl",
        109,
        10,
        "coding session with a screenshot as heavy as a real one on every user task",
        {"image_every": 1, "image_detail": 0.1},
    ),
    FixtureRecipe(
        "dense-text-400k.jsonl",
        110,
        23,
        "coding session where 60% of the texts are dense in tokens per char: Chinese and Japanese "
        "prose with emoji, base64 payloads printed by commands, reads of minified JavaScript",
        {"dense_text": 0.6},
    ),
    FixtureRecipe(
        "screens-600k.jsonl",
        111,
        10,
        "coding session with a full-screen capture (1366 × 768 to 2560 × 1440) on every user task, early "
        "ones inside the ranges a summary covers",
        {"image_every": 1, "image_detail": 0.004, "large_screenshots": True},
    ),
    FixtureRecipe(
        "big-reads-3500k.jsonl",
        107,
        70,
        "huge file reads, many repeated reads",
        {"big_read_chars": 40_000, "reread_ratio": 0.5},
    ),
    FixtureRecipe(
        "marathon-5m.jsonl",
        108,
        240,
        "long mixed session: everything at once",
        {"image_every": 7, "recall_every": 5, "feedback_every": 3},
    ),
)


def write_fixtures(
    directory: str | Path, *, recipes: tuple[FixtureRecipe, ...] = FIXTURE_RECIPES
) -> list[Path]:
    """(Re)generate the committed fixture transcripts into ``directory``; returns the paths written."""
    written = []
    for recipe in recipes:
        out = Path(directory) / recipe.filename
        name = recipe.filename.removesuffix(".jsonl")
        generate_to_file(recipe.seed, recipe.turns, out, name=name, **recipe.options)
        written.append(out)
    return written
