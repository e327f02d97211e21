"""Suite-wide test settings."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, settings

from ctxrecover.archive import Archive, extract_keys, marker, recall
from ctxrecover.messages import Message

settings.register_profile("ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (``@pytest.mark.anyio``, anyio's own pytest plugin) run on asyncio, the loop users run."""
    return "asyncio"


def _follow_markers(texts: list[str], entry: Callable[[str], str | None]) -> list[str]:
    """``texts`` plus every archive entry reachable from their markers, transitively.

    ``entry(key)`` returns the stored text, or None for a marker that points at nothing.
    """
    texts = list(texts)
    seen: set[str] = set()
    frontier = [key for text in texts for key in extract_keys(text)]
    while frontier:
        key = frontier.pop()
        if key in seen:
            continue
        seen.add(key)
        found = entry(key)
        if found is not None:
            texts.append(found)
            frontier.extend(extract_keys(found))
    return texts


def reachable_text(history: Sequence[Message], archive: Archive) -> str:
    """The history's text plus every archive entry reachable from its markers, transitively."""
    return "\n".join(_follow_markers([m.content for m in history], archive.get))


def _recalled_texts(
    history: Sequence[Message], archive: Archive, *, with_arguments: bool = False
) -> list[str]:
    """Every text of ``history`` (and its tool-call arguments, if asked) plus every entry ``recall``
    returns for its markers, transitively; a marker that points at nothing fails the test."""

    def entry(key: str) -> str:
        found = recall(archive, marker(key)).found
        assert key in found, f"marker {key} points at nothing"
        return found[key]

    texts = [m.content for m in history]
    if with_arguments:
        texts += [c.arguments for m in history for c in m.tool_calls]
    return _follow_markers(texts, entry)


@pytest.fixture
def reachable_entries() -> Callable[[Sequence[Message], Archive], set[str]]:
    """Every archive entry a history reaches through its markers, transitively (entries only, whole)."""

    def entries(history: Sequence[Message], archive: Archive) -> set[str]:
        texts = [m.content for m in history]
        return set(_follow_markers(texts, archive.get)[len(texts) :])

    return entries


@pytest.fixture
def assert_nothing_lost() -> Callable[[Sequence[Message], Sequence[Message], Archive], None]:
    """Check that every original message's content is in the history or recallable from it."""

    def check(original: Sequence[Message], final: Sequence[Message], archive: Archive) -> None:
        haystack = reachable_text(final, archive)
        lost = [m.content[:60] for m in original if m.content not in haystack]
        assert not lost, f"not in the history nor recallable from its markers: {lost}"

    return check


@pytest.fixture(scope="session")
def assert_nothing_lost_strict() -> Callable[..., None]:
    """Stricter ``assert_nothing_lost``: every marker resolves and each original content stands whole
    in one text (a message or one recalled entry), not spread over several.

    Call as ``assert_nothing_lost_strict(original, final, archive, with_arguments=False)``.
    """

    def check(
        original: Sequence[Message],
        final: Sequence[Message],
        archive: Archive,
        *,
        with_arguments: bool = False,
    ) -> None:
        texts = _recalled_texts(final, archive, with_arguments=with_arguments)
        for msg in original:
            assert any(msg.content in t for t in texts), f"lost: {msg.content[:60]!r}"

    return check
