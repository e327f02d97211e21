"""The archive protocol and the in-memory store (SPEC §4).

Everything compaction cuts is kept in an :class:`Archive` first. Content is
addressed by its key (:mod:`ctxrecover.archive.keys`); a store gives back
exactly what was put.

>>> store = MemoryArchive()
>>> key = store.put("a long tool result")
>>> store.get(key)
'a long tool result'
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ctxrecover.archive.keys import archive_key, has_marker

__all__ = ["Archive", "MemoryArchive", "put_entries"]


@runtime_checkable
class Archive(Protocol):
    """A content-addressed store of cut content.

    ``put`` stores unconditionally and returns the key; ``archive`` is the
    compaction entry point: it refuses (returns ``None``) content that already
    carries a marker, so repeated compaction rounds never re-archive a stub.
    Both return only once the content is durable.

    A store may also offer ``put_keyed(entries: Sequence[tuple[str, str]]) -> None``,
    storing ``(key, content)`` pairs whose keys the caller already computed with
    :func:`archive_key` (no hashing; one durable step): :func:`put_entries` uses
    it when present and falls back to one ``put`` per distinct entry otherwise.
    """

    def put(self, content: str) -> str: ...

    def archive(self, content: str) -> str | None: ...

    def get(self, key: str) -> str | None: ...

    def __contains__(self, key: object) -> bool: ...


class MemoryArchive:
    """An in-process archive (a dict of key → the very same string object)."""

    def __init__(self) -> None:
        self._entries: dict[str, str] = {}
        self._lock = threading.Lock()

    def put(self, content: str) -> str:
        key = archive_key(content)
        with self._lock:
            self._entries.setdefault(key, content)
        return key

    def put_keyed(self, entries: Sequence[tuple[str, str]]) -> None:
        """Store ``(key, content)`` pairs whose keys are already :func:`archive_key` of their content."""
        with self._lock:
            self._entries.update(entries)  # an equal key holds equal content: replacing it loses nothing

    def archive(self, content: str) -> str | None:
        if has_marker(content):
            return None
        return self.put(content)

    def get(self, key: str) -> str | None:
        with self._lock:
            return self._entries.get(key)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._entries)

    @property
    def total_chars(self) -> int:
        """Characters held (for soak/memory reports)."""
        with self._lock:
            return sum(len(v) for v in self._entries.values())


def put_entries(store: Archive, entries: Sequence[tuple[str, str]]) -> None:
    """Store pre-keyed ``(key, content)`` entries; durable when it returns.

    One ``store.put_keyed`` call when the store has it (nothing is hashed
    again), else one ``put`` per distinct entry.
    """
    put_keyed = getattr(store, "put_keyed", None)
    if put_keyed is not None:
        put_keyed(entries)
        return
    for content in dict(entries).values():
        store.put(content)
