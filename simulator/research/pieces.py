"""What the loss ledger counts: the pieces of a message, and what an archive entry offers.

A **piece** is ``(pool, value)``: a message's ``role`` and ``content``, each tool
call's ``call_id``, ``tool_name`` and ``arguments``, a tool result's ``result_id``
(its ``tool_call_id``) and each image's bytes (``image``: base64 data, else the
url). :func:`message_pieces` lists them; the ledger matches pools separately.

:func:`parse_entry` reads one archive entry once and says what it offers per
occurrence it stands for: its pieces (role, ids, names and image urls of the
messages it records) and its edges, the ``<<ccr:KEY>>`` markers it names, each
typed by what the target is to a reader: a message's content, a call's arguments
or an image's data. The layouts are those of :mod:`ctxrecover.archive` (its public
``RANGE_HEADER`` and ``render_transcript``), read independently:

- a **range index**: ``[ccr range of N messages]``, then per message
  ``[role]: <<ccr:KEY>>``, an optional ``[tool_result ID]`` line, ``[tool_call ID
  NAME: <<ccr:KEY>>]`` lines and ``[image: LABEL]`` lines (``LABEL`` a url, a media
  type, or a media type and the marker of the stored data);
- a **rendered transcript**: the same blocks with the texts inline;
- a tool call archived as ``{"id", "name", "arguments"}`` JSON;
- anything else: a text whose markers are content edges.

An image moved out of a message (:func:`ctxrecover.passes.parts.archive_images`, and a
message set aside) leaves a line ``[image archived — MEDIA, SIZE — recoverable via
@recall <<ccr:KEY>>]`` after the message's text, its public ``IMAGE_ARCHIVED_NOTE``: the
text before those lines is the message's content, and each such marker is an image edge
whose entry, a ``data:`` URL, offers the image's base64 data (:func:`offered_values`).

Where a layout names no result id (older range indexes), a tool block takes the
id of the next unanswered call of the assistant block before it: results follow
their calls in call order, as pairing repair leaves them and a reader would pair
them. A block that does not read back as its layout makes the whole entry a
plain text: the ledger then finds the pieces missing rather than guessing them.

>>> from ctxrecover.archive import MemoryArchive, archive_range
>>> from ctxrecover.messages import Message, ToolCall
>>> store = MemoryArchive()
>>> call = Message.assistant("", tool_calls=[ToolCall("c1", "read", '{"path": "a.py"}')])
>>> edges, pieces = parse_entry(store.get(archive_range(store, [call, Message.tool("c1", "x = 1")])))
>>> pieces
[('role', 'assistant'), ('call_id', 'c1'), ('tool_name', 'read'), ('role', 'tool'), ('result_id', 'c1')]
>>> sorted(kind for _key, kind, _count in edges)
[0, 0, 1]
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import TYPE_CHECKING

from ctxrecover.archive import RANGE_HEADER, extract_keys
from ctxrecover.passes.parts import IMAGE_ARCHIVED_NOTE
from ctxrecover.passes.withhold import WITHHELD_ARGUMENT_FIELD, WITHHELD_IMAGE_NOTE

if TYPE_CHECKING:
    from ctxrecover.messages import Message

__all__ = [
    "EDGE_POOLS",
    "Edge",
    "POOL_FIELDS",
    "Piece",
    "message_pieces",
    "offered_values",
    "parse_entry",
    "split_image_notes",
]

Piece = tuple[str, str]  # (pool, value)
Edge = tuple[str, int, int]  # (key, index into EDGE_POOLS, multiplicity)

# Pools, and the loss field each reports to: both kinds of call id report as call_id.
POOL_FIELDS: dict[str, str] = {
    "role": "role",
    "content": "content",
    "tool_name": "tool_name",
    "call_id": "call_id",
    "result_id": "call_id",
    "arguments": "arguments",
    "image": "image",
}
# What the target of an edge is to a reader; the index is an edge's kind.
EDGE_POOLS: tuple[str, ...] = ("content", "arguments", "image")
CONTENT, ARGUMENTS, IMAGE = range(len(EDGE_POOLS))

ROLE = r"(system|user|assistant|tool)"
ANY_ROLE = r"(?:system|user|assistant|tool)"
KEY = r"<<ccr:([0-9a-f]{16})>>"
RANGE_HEADER_RE = re.compile(re.escape(RANGE_HEADER).replace("%d", r"(\d+)"))
RANGE_HEAD_RE = re.compile(rf"\[{ROLE}\]: {KEY}")
RANGE_CALL_RE = re.compile(rf"\[tool_call (\S+) (.+): {KEY}\]")
RESULT_LINE_RE = re.compile(r"\[tool_result ([^\n]+)\]")
IMAGE_LINE_RE = re.compile(r"\[image: ([^\n]*)\]")
IMAGE_DATA_LABEL_RE = re.compile(rf"(.+) {KEY}")
RENDERED_HEAD_RE = re.compile(rf"\[{ROLE}\]: ")
RENDERED_SPLIT_RE = re.compile(rf"\n\n(?=\[{ANY_ROLE}\]: )")
RENDERED_IMAGE_RE = re.compile(r"\n\[image: ([^\n]*)\]$")
RENDERED_RESULT_RE = re.compile(r"\n\[tool_result ([^\n]+)\]$")
RENDERED_CALL_RE = re.compile(r"(\S+) (\S+): (.*)\]", re.DOTALL)
CALL_LINE_START = "\n[tool_call "
CALL_JSON_FIELDS = frozenset({"id", "name", "arguments"})
# IMAGE_ARCHIVED_NOTE's media type and size are any text on the line, WITHHELD_IMAGE_NOTE's media type
# (a withheld message's image, SPEC §12); the marker of either is the edge.
IMAGE_NOTE_RE = re.compile(
    "|".join(
        re.escape(note)
        .replace(re.escape("%s"), r"[^\n]*?", note.count("%s") - 1)
        .replace(re.escape("%s"), KEY)
        for note in (IMAGE_ARCHIVED_NOTE, WITHHELD_IMAGE_NOTE)
    )
)
DATA_URL_RE = re.compile(r"data:[^;,\n]*;base64,")


def split_image_notes(text: str) -> tuple[str, list[str]]:
    """``text`` without the image-archived notes that end it, and their keys in order."""
    keys: list[str] = []
    end = len(text)
    while end:
        start = text.rfind("\n", 0, end) + 1
        note = IMAGE_NOTE_RE.fullmatch(text, start, end)
        if note is None:
            break
        keys.append(next(key for key in note.groups() if key))  # the one alternative that matched
        end = max(start - 1, 0)
    return (text[:end], keys[::-1]) if keys else (text, keys)


def offered_values(text: str) -> tuple[str, ...]:
    """What an entry's text is to each pool of :data:`EDGE_POOLS`: a content without its image notes,
    arguments as they are, and image data without its ``data:`` URL prefix."""
    data = DATA_URL_RE.match(text)
    return split_image_notes(text)[0], text, text[data.end() :] if data else text


def message_pieces(msg: Message) -> list[Piece]:
    """The pieces of ``msg`` the ledger accounts for (its content without image notes); empty values
    are left out."""
    pieces: list[Piece] = [("role", msg.role), ("content", split_image_notes(msg.content)[0])]
    for call in msg.tool_calls:
        pieces += (("call_id", call.id), ("tool_name", call.name), ("arguments", call.arguments))
    if msg.tool_call_id:
        pieces.append(("result_id", msg.tool_call_id))
    pieces += (("image", image.data if image.data is not None else image.url or "") for image in msg.images)
    return [piece for piece in pieces if piece[1]]


def text_edges(texts: list[str], kind: int = CONTENT) -> list[Edge]:
    """One ``kind`` edge per distinct marker of each text (an ``ARGUMENTS`` edge for a marker in a tool
    call's arguments: the entry it names holds arguments); an image note's marker is an image edge."""
    edges: list[Edge] = []
    for text in texts:
        body, images = split_image_notes(text)
        edges += [(key, kind, 1) for key in extract_keys(body)]
        edges += [(key, IMAGE, 1) for key in images]
    return edges


class _Offer:
    """What the blocks of one entry offer, gathered block by block."""

    def __init__(self) -> None:
        self.edges: Counter[tuple[str, int]] = Counter()
        self.pieces: list[Piece] = []
        self.open_calls: list[str] = []  # calls of the last assistant block not answered yet
        self.role = ""
        self.result_named = False

    def block(self, role: str) -> None:
        self.finish_block()
        self.role, self.result_named = role, False
        self.pieces.append(("role", role))
        if role == "assistant":
            self.open_calls = []

    def text(self, pool: str, text: str) -> None:
        value = split_image_notes(text)[0] if pool == "content" else text
        if value:
            self.pieces.append((pool, value))
        for key, kind, count in text_edges([text], ARGUMENTS if pool == "arguments" else CONTENT):
            self.edges[key, kind] += count

    def result(self, call_id: str) -> None:
        self.pieces.append(("result_id", call_id))
        self.result_named = True

    def call(self, call_id: str, name: str) -> None:
        self.pieces += [piece for piece in (("call_id", call_id), ("tool_name", name)) if piece[1]]
        self.open_calls.append(call_id)

    def image(self, label: str) -> None:
        data = IMAGE_DATA_LABEL_RE.fullmatch(label)
        if data is not None:
            self.edges[data[2], IMAGE] += 1
        elif label:
            self.pieces.append(("image", label))

    def finish_block(self) -> None:
        if self.role == "tool" and not self.result_named and self.open_calls:
            self.pieces.append(("result_id", self.open_calls.pop(0)))
        self.role = ""

    def result_of(self) -> tuple[list[Edge], list[Piece]]:
        self.finish_block()
        return [(key, kind, count) for (key, kind), count in self.edges.items()], self.pieces


def _range_index(text: str) -> tuple[list[Edge], list[Piece]] | None:
    header = RANGE_HEADER_RE.match(text)
    if header is None or not text.endswith("\n\n"):
        return None
    blocks = text[header.end() : -2].split("\n\n")
    if len(blocks) != int(header[1]):
        return None
    offer = _Offer()
    for block in blocks:
        head, *lines = block.split("\n")
        found = RANGE_HEAD_RE.fullmatch(head)
        if found is None:
            return None
        offer.block(found[1])
        offer.edges[found[2], CONTENT] += 1
        for line in lines:
            if (call := RANGE_CALL_RE.fullmatch(line)) is not None and found[1] == "assistant":
                offer.call(call[1], call[2])
                offer.edges[call[3], ARGUMENTS] += 1
            elif (result := RESULT_LINE_RE.fullmatch(line)) is not None and found[1] == "tool":
                offer.result(result[1])
            elif (image := IMAGE_LINE_RE.fullmatch(line)) is not None:
                offer.image(image[1])
            else:
                return None
    return offer.result_of()


def _rendered_transcript(text: str) -> tuple[list[Edge], list[Piece]] | None:
    if RENDERED_HEAD_RE.match(text) is None or not text.endswith("\n\n"):
        return None
    offer = _Offer()
    for block in RENDERED_SPLIT_RE.split(text[:-2]):
        head = RENDERED_HEAD_RE.match(block)
        if head is None:
            return None
        role, body = head[1], block[head.end() :]
        labels: list[str] = []
        while (image := RENDERED_IMAGE_RE.search(body)) is not None:
            labels.insert(0, image[1])
            body = body[: image.start()]
        content, *parts = body.split(CALL_LINE_START)
        calls: list[str] = []
        for part in parts:  # a part that does not read as a call belongs to the text before it
            if RENDERED_CALL_RE.fullmatch(part) is not None:
                calls.append(part)
            elif calls:
                calls[-1] += CALL_LINE_START + part
            else:
                content += CALL_LINE_START + part
        offer.block(role)
        result = RENDERED_RESULT_RE.search(content) if role == "tool" else None
        if result is not None:
            content = content[: result.start()]
        offer.text("content", content)
        if result is not None:
            offer.result(result[1])
        for part in calls:
            call = RENDERED_CALL_RE.fullmatch(part)
            if call is None or role != "assistant":
                return None
            offer.call(call[1], call[2])
            offer.text("arguments", call[3])
        for label in labels:
            offer.image(label)
    return offer.result_of()


def _call_json(text: str) -> list[Piece]:
    if not text.startswith("{") or '"arguments"' not in text:
        return []
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return []
    if not isinstance(value, dict) or set(value) != CALL_JSON_FIELDS:
        return []
    if not all(isinstance(value[name], str) for name in CALL_JSON_FIELDS):
        return []
    pieces = [("call_id", value["id"]), ("tool_name", value["name"]), ("arguments", value["arguments"])]
    return [piece for piece in pieces if piece[1]]


def parse_entry(text: str) -> tuple[list[Edge], list[Piece]]:
    """What an archive entry offers per occurrence it stands for: its edges and its pieces.

    The entry's own text is offered apart from these (as content, arguments or
    image data, by the kind of edge that reaches it).
    """
    for layout in (_range_index, _rendered_transcript):
        parsed = layout(text)
        if parsed is not None:
            return parsed
    kind = ARGUMENTS if _withheld_arguments(text) else CONTENT
    return text_edges([text], kind), _call_json(text)


def _withheld_arguments(text: str) -> bool:
    """True for the arguments a withheld tool call is left with (``{"withheld": STUB}``, SPEC §12):
    the marker in its stub names the call's original arguments."""
    if not text.startswith('{"' + WITHHELD_ARGUMENT_FIELD):
        return False
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and set(value) == {WITHHELD_ARGUMENT_FIELD}
