"""Suite-wide test settings."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, settings

from ctxrecover.archive import Archive, extract_keys
from ctxrecover.messages import Message

settings.register_profile("ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def reachable_text(history: Sequence[Message], archive: Archive) -> str:
    """The history's text plus every archive entry reachable from its markers, transitively."""
    texts = [m.content for m in history]
    seen: set[str] = set()
    frontier = [key for text in texts for key in extract_keys(text)]
    while frontier:
        key = frontier.pop()
        if key in seen:
            continue
        seen.add(key)
        entry = archive.get(key)
        if entry is not None:
            texts.append(entry)
            frontier.extend(extract_keys(entry))
    return "\n".join(texts)


@pytest.fixture
def assert_nothing_lost() -> Callable[[Sequence[Message], Sequence[Message], Archive], None]:
    """Check that every original message's content is in the history or recallable from it."""

    def check(original: Sequence[Message], final: Sequence[Message], archive: Archive) -> None:
        haystack = reachable_text(final, archive)
        lost = [m.content[:60] for m in original if m.content not in haystack]
        assert not lost, f"not in the history nor recallable from its markers: {lost}"

    return check
