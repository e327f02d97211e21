"""The CCR archive: everything compaction cuts is kept here first (SPEC §4).

Content is addressed by the first 16 hex chars of its sha256 and referenced in
the history by a marker ``<<ccr:KEY>>``; :func:`recall` turns markers (or keys,
or a JSON request) back into the original text.

>>> store = MemoryArchive()
>>> key = store.put("a long tool result")
>>> marker(key) in f"[... see {marker(key)}]"
True
>>> store.get(key)
'a long tool result'
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "Archive",
    "MARKER_RE",
    "MemoryArchive",
    "RecallResult",
    "archive_key",
    "extract_keys",
    "has_marker",
    "marker",
    "parse_recall_keys",
    "recall",
]

KEY_LENGTH = 16
MARKER_RE = re.compile(r"<<ccr:([0-9a-f]{16})>>")
_LOOSE_KEY_RE = re.compile(r"(?:<<)?(?:ccr:)?\b([0-9a-f]{16})\b(?:>>)?")
RECALL_JSON_FIELDS = ("key", "keys", "marker", "markers", "ccr", "id")
UNKNOWN_KEY_TEXT = "[ccr:{key} — unknown or evicted: nothing is archived under this key]"


def archive_key(content: str) -> str:
    """The content address: first 16 hex chars of sha256(UTF-8 content)."""
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()[:KEY_LENGTH]


def marker(key: str) -> str:
    """The in-history reference to an archived entry: ``<<ccr:KEY>>``."""
    return f"<<ccr:{key}>>"


def has_marker(text: str) -> bool:
    """True when ``text`` already carries a ``<<ccr:KEY>>`` marker."""
    return "<<ccr:" in text and MARKER_RE.search(text) is not None


def extract_keys(text: str) -> list[str]:
    """Keys of every marker in ``text``, in order of first appearance, without repeats."""
    if "<<ccr:" not in text:
        return []
    return list(dict.fromkeys(MARKER_RE.findall(text)))


@runtime_checkable
class Archive(Protocol):
    """A content-addressed store of cut content.

    ``put`` stores unconditionally and returns the key; ``archive`` is the
    compaction entry point: it refuses (returns ``None``) content that already
    carries a marker, so repeated compaction rounds never re-archive a stub.
    Both return only once the content is durable.
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


@dataclass(frozen=True, slots=True)
class RecallResult:
    """What :func:`recall` found: originals by key, and the keys it did not know."""

    found: dict[str, str]
    missing: tuple[str, ...]

    @property
    def text(self) -> str:
        """One text for the model: each original, or a clear unknown/evicted line."""
        parts = [self.found[k] for k in self.found]
        parts += [UNKNOWN_KEY_TEXT.format(key=k) for k in self.missing]
        return "\n\n".join(parts)


def _keys_from_json(value: object) -> Iterable[str]:
    if isinstance(value, str):
        yield from (m.group(1) for m in _LOOSE_KEY_RE.finditer(value.lower()))
    elif isinstance(value, list):
        for item in value:
            yield from _keys_from_json(item)
    elif isinstance(value, dict):
        for name in RECALL_JSON_FIELDS:
            if name in value:
                yield from _keys_from_json(value[name])


def parse_recall_keys(query: str) -> list[str]:
    """Keys in a lenient recall request, in order, without repeats.

    Accepts ``<<ccr:KEY>>``, ``ccr:KEY``, a bare 16-hex key, several of them,
    or JSON with ``key|keys|marker|markers|ccr|id`` (JSON without those
    fields is scanned like text). Never raises.
    """
    if not isinstance(query, str):
        return []
    stripped = query.strip()
    keys: list[str] = []
    if stripped[:1] in ("{", "["):
        try:
            keys = list(_keys_from_json(json.loads(stripped)))
        except (ValueError, RecursionError):
            keys = []
    if not keys:  # plain text, broken JSON, or JSON whose fields we do not know: scan the text
        keys = [m.group(1) for m in _LOOSE_KEY_RE.finditer(stripped.lower())]
    return list(dict.fromkeys(keys))


def recall(store: Archive, query: str) -> RecallResult:
    """Look up every key in a lenient ``query``; unknown or evicted keys are reported, not raised."""
    found: dict[str, str] = {}
    missing: list[str] = []
    for key in parse_recall_keys(query):
        content = store.get(key)
        if content is None:
            missing.append(key)
        else:
            found[key] = content
    return RecallResult(found=found, missing=tuple(missing))
