"""Composite entries: a dropped range of messages archived as one small index (SPEC §4, §6 step 5).

Each member (a message's content, each tool call's arguments, each inline
image's base64 data) is stored on its own; the index names them with
``[role]: <<ccr:KEY>>`` lines, and recall expands it back into the full
transcript (:func:`render_transcript`). A message's keys are hashed once and
memoized on the immutable message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any

from ctxrecover.archive.keys import archive_key, marker
from ctxrecover.archive.store import Archive, put_entries
from ctxrecover.errors import ConfigError

if TYPE_CHECKING:
    from ctxrecover.messages import Image, Message

__all__ = [
    "RANGE_HEADER",
    "UNKNOWN_KEY_TEXT",
    "RangeEntry",
    "RangeParts",
    "archive_message",
    "archive_range",
    "expand_entry",
    "member_keys",
    "range_entry",
    "range_parts",
    "read_original",
    "render_transcript",
]

UNKNOWN_KEY_TEXT = "[ccr:{key} — unknown or evicted: nothing is archived under this key]"
RANGE_HEADER = "[ccr range of %d messages]\n"
# A range index: the header, then per message ``[role]: <<ccr:KEY>>`` (its content),
# ``\n[tool_result ID]`` (a tool result's call id), ``\n[tool_call ID NAME: <<ccr:KEY>>]`` (its
# arguments), ``\n[image: LABEL]`` (``LABEL <<ccr:KEY>>`` for inline data), ``\n\n``:
# render_transcript's layout with every text replaced by its marker.
_RANGE_PREFIX = RANGE_HEADER.split("%", 1)[0]
_RANGE_RE = re.compile(
    r"\[ccr range of (\d+) messages\]\n"
    r"((?:\[(?:system|user|assistant|tool)\]: <<ccr:[0-9a-f]{16}>>"
    r"(?:\n\[tool_result [^\n]*\])?"
    r"(?:\n\[tool_call [^\n]*: <<ccr:[0-9a-f]{16}>>\])*"
    r"(?:\n\[image: [^\n]*\])*\n\n)*)"
)
# In an index, a marker is expanded to its member, except an image's (recalled on its own: base64).
_MEMBER_OR_IMAGE_RE = re.compile(r"\n\[image: [^\n]*\]|<<ccr:([0-9a-f]{16})>>")
_RANGE_ENTRY_CACHE = "archive:range"  # msg._cache entry: (its index block | None, its members)
RangeEntry = tuple[str | None, tuple[tuple[str, str], ...]]  # (its index block | None, its members)
_MESSAGE_CACHE = attrgetter("_cache")
_BLOCK, _MEMBERS = itemgetter(0), itemgetter(1)


def _image_label(image: Image) -> str:
    """How an image appears in a transcript: its URL, or its type and the marker of its base64 data."""
    if image.data is None:
        return image.url or image.media_type
    return f"{image.media_type} {marker(archive_key(image.data))}"


def render_transcript(messages: Sequence[Message]) -> str:
    """Render messages for verbatim archival: ``[role]: content`` lines, tool calls listed.

    Every char of each message's content and tool-call arguments appears in the
    result, with each tool result's call id; an inline image appears as its type
    and the marker of its base64 data (stored as a member by :func:`archive_range`),
    so a rendered range is a lossless record of the dropped messages (it is what
    :func:`recall` gives back for an :func:`archive_range` entry).
    """
    parts: list[str] = []
    for msg in messages:
        # pieces, not per-message f-strings: each content is copied once, by the final join
        parts += ("[", msg.role, "]: ", msg.content)
        if msg.role == "tool" and msg.tool_call_id is not None:
            parts.append(f"\n[tool_result {msg.tool_call_id}]")
        parts += (f"\n[tool_call {call.id} {call.name}: {call.arguments}]" for call in msg.tool_calls)
        parts += (f"\n[image: {_image_label(image)}]" for image in msg.images)
        parts.append("\n\n")
    return "".join(parts)


def range_entry(msg: Message) -> RangeEntry:
    """``msg``'s block of a range index and its members ``(key, text)``: what :func:`archive_range`
    stores for it, hashed once and memoized on the message.

    The block is ``None`` when a tool-call id, name, result id or image label holds
    a line break or a marker (the index could not be read back unambiguously).
    """
    entry: RangeEntry | None = msg._cache.get(_RANGE_ENTRY_CACHE)
    if entry is not None:
        return entry
    key = archive_key(msg.content)
    members = [(key, msg.content)]
    pieces = ["[", msg.role, "]: <<ccr:", key, ">>"]
    labels: list[str] = []
    if msg.role == "tool" and msg.tool_call_id is not None:
        pieces += ("\n[tool_result ", msg.tool_call_id, "]")
        labels.append(msg.tool_call_id)
    for call in msg.tool_calls:
        call_key = archive_key(call.arguments)
        members.append((call_key, call.arguments))
        pieces += ("\n[tool_call ", call.id, " ", call.name, ": <<ccr:", call_key, ">>]")
        labels += (call.id, call.name)
    for image in msg.images:
        if image.data is not None:
            image_key = archive_key(image.data)
            members.append((image_key, image.data))
            pieces += ("\n[image: ", image.media_type, " <<ccr:", image_key, ">>]")
            labels.append(image.media_type)
        else:
            pieces += ("\n[image: ", image.url or image.media_type, "]")
            labels.append(image.url or image.media_type)
    pieces.append("\n\n")
    ambiguous = any("\n" in label or "<<ccr:" in label for label in labels)
    entry = (None if ambiguous else "".join(pieces), tuple(members))
    msg._cache[_RANGE_ENTRY_CACHE] = entry
    return entry


def member_keys(msg: Message) -> tuple[str, ...]:
    """The keys ``msg``'s pieces are archived under: its content, each tool call's arguments, each inline
    image's data; hashed once and memoized on the message.

    A :class:`~ctxrecover.session.Session` computes them as messages enter its history (*archive on
    append*), so a later cut — :func:`archive_message`, :func:`archive_range` — stores them by key
    without hashing anything again.
    """
    return tuple(key for key, _ in range_entry(msg)[1])


def archive_message(store: Archive, msg: Message) -> str:
    """Archive ``msg``'s content and return its key; the content is hashed once per message object.

    For cut sites that keep a whole message's original (and for archiving a
    message when it enters the history). Content carrying markers is stored too,
    like :meth:`Archive.put`.
    """
    key, content = range_entry(msg)[1][0]
    put_entries(store, ((key, content),))
    return key


@dataclass(frozen=True, slots=True)
class RangeParts:
    """What :func:`archive_range` stores for a range of messages, gathered beforehand: each message's
    index block (``None`` for an ambiguous one) and every member ``(key, text)`` in order.

    Whoever already holds them hands them over (a session's index keeps them as messages enter,
    :class:`~ctxrecover.passes.facts.HistoryFacts`); :func:`range_parts` gathers them from the
    messages' memos.
    """

    blocks: Sequence[str | None]
    members: Sequence[tuple[str, str]]


def range_parts(messages: Sequence[Message]) -> RangeParts:
    """The :class:`RangeParts` of ``messages``, from each message's memoized :func:`range_entry`."""
    # The memoized entries fetched without a Python frame per message (archive on append memoized them).
    entries: list[Any] = list(map(dict.get, map(_MESSAGE_CACHE, messages), repeat(_RANGE_ENTRY_CACHE)))
    try:
        blocks = list(map(_BLOCK, entries))
    except TypeError:  # a message not memoized yet (None has no block)
        entries = [entry or range_entry(msg) for entry, msg in zip(entries, messages, strict=True)]
        blocks = list(map(_BLOCK, entries))
    return RangeParts(blocks, list(chain.from_iterable(map(_MEMBERS, entries))))


def archive_range(store: Archive, messages: Sequence[Message], *, parts: RangeParts | None = None) -> str:
    """Archive a dropped range as one composite entry and return its key.

    Each member (every message's content, tool-call arguments and inline image
    data) is stored first, then the index naming them (:data:`RANGE_HEADER` + one block per
    message), so with a durable store an index is never written before its
    members. The key is the sha256 of the small index; :func:`recall` expands it
    to :func:`render_transcript` of ``messages``. A message whose tool-call id,
    name or image label could be mistaken for index syntax makes the range a
    plain rendered transcript instead. ``parts`` are the range's :class:`RangeParts` when the
    caller already holds them (else gathered from the messages: :func:`range_parts`).
    """
    if parts is None:
        parts = range_parts(messages)
    elif len(parts.blocks) != len(messages):
        raise ConfigError(
            f"archive_range got the parts of {len(parts.blocks)} messages for a range of {len(messages)}"
        )
    try:
        blocks = "".join(parts.blocks)  # type: ignore[arg-type]  # a None block raises TypeError
    except TypeError:  # an ambiguous message: the range is a plain transcript
        images = [(archive_key(i.data), i.data) for m in messages for i in m.images if i.data is not None]
        if images:
            put_entries(store, images)
        return store.put(render_transcript(messages))
    put_entries(store, parts.members)
    return store.put(RANGE_HEADER % len(messages) + blocks)


def expand_entry(store: Archive, entry: str, missing: dict[str, None]) -> str:
    """``entry`` itself, or, for a range index, the transcript of its members (one level deep).

    Members are given back as stored: markers inside them (a summary's, an
    earlier truncation's) stay markers, recalled in turn, and so does an inline
    image's (its base64 data is recalled by its own key). Unknown members are
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
        if key is None:  # an image line: its data stays behind its own marker
            return found[0]
        if key not in fetched:
            content = store.get(key)
            if content is None:
                missing[key] = None
                content = UNKNOWN_KEY_TEXT.format(key=key)
            fetched[key] = content
        return fetched[key]

    return _MEMBER_OR_IMAGE_RE.sub(member, index[2])


def read_original(store: Archive, key: str) -> str | None:
    """The original archived under ``key`` (a range entry expanded, as :func:`recall` gives it), or ``None``.

    For code that restores an archived original itself (e.g. the summarizer's
    input); unknown members of a range are named in place.
    """
    content = store.get(key)
    return None if content is None else expand_entry(store, content, {})
