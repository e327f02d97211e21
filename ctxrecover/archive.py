"""The CCR archive: everything compaction cuts is kept here first (SPEC §4).

Content is addressed by the first 16 hex chars of its sha256 and referenced in
the history by a marker ``<<ccr:KEY>>``; :func:`recall` turns markers (or keys,
or a JSON request) back into the original text.

A dropped range of messages is one composite entry (:func:`archive_range`): a
small index of ``[role]: <<ccr:KEY>>`` lines (plus tool-call and image lines)
whose members, each message's content and tool-call arguments, are archived on
their own first. :func:`recall` expands the index into the full transcript
(:func:`render_transcript`), so every dropped character comes back. Messages
are immutable, so a message's keys are hashed once and memoized on it: a cut
that meets messages already keyed (e.g. archived when they entered the history,
:func:`archive_message`) costs a slice and a key list, not a pass over megabytes.

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ctxrecover.messages import Message

__all__ = [
    "Archive",
    "MARKER_RE",
    "MemoryArchive",
    "RANGE_HEADER",
    "RecallResult",
    "archive_key",
    "archive_message",
    "archive_range",
    "extract_keys",
    "has_marker",
    "marker",
    "parse_recall_keys",
    "put_entries",
    "read_original",
    "recall",
    "render_transcript",
]

KEY_LENGTH = 16
MARKER_RE = re.compile(r"<<ccr:([0-9a-f]{16})>>")
_LOOSE_KEY_RE = re.compile(r"(?:<<)?(?:ccr:)?\b([0-9a-f]{16})\b(?:>>)?")
RECALL_JSON_FIELDS = ("key", "keys", "marker", "markers", "ccr", "id")
UNKNOWN_KEY_TEXT = "[ccr:{key} — unknown or evicted: nothing is archived under this key]"
RANGE_HEADER = "[ccr range of %d messages]\n"
# A range index: the header, then per message ``[role]: <<ccr:KEY>>`` (its content),
# ``\n[tool_call ID NAME: <<ccr:KEY>>]`` (its arguments), ``\n[image: LABEL]``, ``\n\n``:
# render_transcript's layout with every text replaced by its marker.
_RANGE_PREFIX = RANGE_HEADER.split("%", 1)[0]
_RANGE_RE = re.compile(
    r"\[ccr range of (\d+) messages\]\n"
    r"((?:\[(?:system|user|assistant|tool)\]: <<ccr:[0-9a-f]{16}>>"
    r"(?:\n\[tool_call [^\n]*: <<ccr:[0-9a-f]{16}>>\])*"
    r"(?:\n\[image: [^\n]*\])*\n\n)*)"
)
_RANGE_ENTRY_CACHE = "archive:range"  # msg._cache entry: (its index block | None, its members)


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


def render_transcript(messages: Sequence[Message]) -> str:
    """Render messages for verbatim archival: ``[role]: content`` lines, tool calls listed.

    Every char of each message's content and tool-call arguments appears in the
    result, so a rendered range is a lossless record of the dropped text (it is
    what :func:`recall` gives back for an :func:`archive_range` entry). Images are
    listed by type (their pixels are not text).
    """
    parts: list[str] = []
    for msg in messages:
        # pieces, not per-message f-strings: each content is copied once, by the final join
        parts += ("[", msg.role, "]: ", msg.content)
        parts += (f"\n[tool_call {call.id} {call.name}: {call.arguments}]" for call in msg.tool_calls)
        parts += (f"\n[image: {image.url or image.media_type}]" for image in msg.images)
        parts.append("\n\n")
    return "".join(parts)


def _range_entry(msg: Message) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """``msg``'s block of a range index and its members ``(key, text)``, hashed once per message.

    The block is ``None`` when a tool-call id, name or image label holds a line
    break or a marker (the index could not be read back unambiguously).
    """
    entry: tuple[str | None, tuple[tuple[str, str], ...]] | None = msg._cache.get(_RANGE_ENTRY_CACHE)
    if entry is not None:
        return entry
    key = archive_key(msg.content)
    members = [(key, msg.content)]
    pieces = ["[", msg.role, "]: <<ccr:", key, ">>"]
    labels: list[str] = []
    for call in msg.tool_calls:
        call_key = archive_key(call.arguments)
        members.append((call_key, call.arguments))
        pieces += ("\n[tool_call ", call.id, " ", call.name, ": <<ccr:", call_key, ">>]")
        labels += (call.id, call.name)
    for image in msg.images:
        label = image.url or image.media_type
        pieces += ("\n[image: ", label, "]")
        labels.append(label)
    pieces.append("\n\n")
    ambiguous = any("\n" in label or "<<ccr:" in label for label in labels)
    entry = (None if ambiguous else "".join(pieces), tuple(members))
    msg._cache[_RANGE_ENTRY_CACHE] = entry
    return entry


def archive_message(store: Archive, msg: Message) -> str:
    """Archive ``msg``'s content and return its key; the content is hashed once per message object.

    For cut sites that keep a whole message's original (and for archiving a
    message when it enters the history). Content carrying markers is stored too,
    like :meth:`Archive.put`.
    """
    key, content = _range_entry(msg)[1][0]
    put_entries(store, ((key, content),))
    return key


def archive_range(store: Archive, messages: Sequence[Message]) -> str:
    """Archive a dropped range as one composite entry and return its key.

    Each member (every message's content and tool-call arguments) is stored
    first, then the index naming them (:data:`RANGE_HEADER` + one block per
    message), so with a durable store an index is never written before its
    members. The key is the sha256 of the small index; :func:`recall` expands it
    to :func:`render_transcript` of ``messages``. A message whose tool-call id,
    name or image label could be mistaken for index syntax makes the range a
    plain rendered transcript instead.
    """
    entries = [msg._cache.get(_RANGE_ENTRY_CACHE) or _range_entry(msg) for msg in messages]
    blocks = list(map(itemgetter(0), entries))
    if None in blocks:
        return store.put(render_transcript(messages))
    put_entries(store, list(chain.from_iterable(map(itemgetter(1), entries))))
    return store.put(RANGE_HEADER % len(messages) + "".join(blocks))


def _expand(store: Archive, entry: str, missing: dict[str, None]) -> str:
    """``entry`` itself, or, for a range index, the transcript of its members (one level deep).

    Members are given back as stored: markers inside them (a summary's, an
    earlier truncation's) stay markers, recalled in turn. Unknown members are
    named in place and added to ``missing``.
    """
    if not entry.startswith(_RANGE_PREFIX):
        return entry
    index = _RANGE_RE.fullmatch(entry)
    if index is None or int(index[1]) != index[2].count("\n\n"):
        return entry
    fetched: dict[str, str] = {}

    def member(found: re.Match[str]) -> str:
        key = found[1]
        if key not in fetched:
            content = store.get(key)
            if content is None:
                missing[key] = None
                content = UNKNOWN_KEY_TEXT.format(key=key)
            fetched[key] = content
        return fetched[key]

    return MARKER_RE.sub(member, index[2])


def read_original(store: Archive, key: str) -> str | None:
    """The original archived under ``key`` (a range entry expanded, as :func:`recall` gives it), or ``None``.

    For code that restores an archived original itself (e.g. the summarizer's
    input); unknown members of a range are named in place.
    """
    content = store.get(key)
    return None if content is None else _expand(store, content, {})


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
    """Look up every key in a lenient ``query``; unknown or evicted keys are reported, not raised.

    A range entry (:func:`archive_range`) comes back expanded into the full
    transcript of its messages; a member that is unknown or evicted is named in
    place and listed in ``missing``.
    """
    found: dict[str, str] = {}
    missing: dict[str, None] = {}
    for key in parse_recall_keys(query):
        content = store.get(key)
        if content is None:
            missing[key] = None
        else:
            found[key] = _expand(store, content, missing)
    return RecallResult(found=found, missing=tuple(missing))
