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
from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from ctxrecover.archive.keys import archive_key, extract_keys, has_marker
from ctxrecover.errors import ArchiveError, ConfigError

__all__ = ["DEFAULT_NAMESPACE", "Archive", "MemoryArchive", "PinningArchive", "put_entries"]

DEFAULT_NAMESPACE = "default"


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


@runtime_checkable
class PinningArchive(Protocol):
    """A bounded store that evicts only what no live history reaches (e.g. :class:`DiskArchive`).

    An *owner* (one session) declares the keys its history holds with ``pin``
    (a change, or with ``reset=True`` the whole set); ``put``/``put_keyed``
    accept ``owner=`` to hold what a cut just stored until that owner's next
    ``pin``. :class:`~ctxrecover.archive.SessionArchive` drives this for a session.
    """

    def pin(
        self, owner: str, added: Iterable[str] = (), removed: Iterable[str] = (), *, reset: bool = False
    ) -> None: ...

    def release(self, owner: str) -> None: ...


def check_namespace(namespace: object) -> str:
    """``namespace`` when it is a non-empty str, else :class:`ConfigError`."""
    if not isinstance(namespace, str) or not namespace:
        raise ConfigError(f"an archive namespace must be a non-empty str (got {namespace!r})")
    return namespace


class MemoryArchive:
    """An in-process archive (a dict of key → the very same string object), in one namespace.

    Unbounded, so nothing is ever evicted. :meth:`view` gives a handle on another
    namespace of the same store: namespaces never read each other's entries
    unless :meth:`share` copies them.
    """

    def __init__(self, *, namespace: str = DEFAULT_NAMESPACE) -> None:
        self._spaces: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        self.namespace = check_namespace(namespace)
        self._entries = self._spaces.setdefault(namespace, {})

    def view(self, namespace: str) -> MemoryArchive:
        """A handle on ``namespace`` of this same store."""
        other = object.__new__(MemoryArchive)
        other._spaces, other._lock = self._spaces, self._lock
        other.namespace = check_namespace(namespace)
        with self._lock:
            other._entries = self._spaces.setdefault(namespace, {})
        return other

    def share(self, keys: Iterable[str], namespace: str) -> tuple[str, ...]:
        """Copy the entries under ``keys`` and every entry they reach into ``namespace``; returns
        the keys newly stored there. Raises :class:`ArchiveError` for a key not stored here."""
        target = self.view(namespace)._entries
        roots = list(dict.fromkeys(keys))
        copied: list[str] = []
        with self._lock:
            frontier, seen = list(reversed(roots)), set()
            while frontier:
                key = frontier.pop()
                if key in seen:
                    continue
                seen.add(key)
                content = self._entries.get(key)
                if content is None:
                    if key in roots:
                        raise ArchiveError(
                            f"cannot share ccr:{key}: nothing is stored under it in namespace "
                            f"{self.namespace!r}"
                        )
                    continue
                if key not in target:
                    target[key] = content
                    copied.append(key)
                frontier.extend(extract_keys(content))
        return tuple(copied)

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
