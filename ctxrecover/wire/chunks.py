"""Request bodies as a few large chunks that the next request of the same conversation reuses.

:func:`~ctxrecover.wire.encode_request` joins every message's cached JSON into
one ``bytes`` per request: each turn of a long conversation copies the whole
history again. :class:`BodyEncoder` cuts the history into blocks (about
``block_messages`` messages or ``block_bytes`` of JSON; at turn starts for the
formats that merge turns), joins each block once and keeps it while its
messages stay the same, so a request that appends to the history adds the new
messages to its open last block (appending their JSON to its bytes; for the
formats that merge turns, joining that block again) and hands the rest to the
transport as they are. A block whose messages changed is joined again; the
blocks after it are found again by their first message.

>>> from ctxrecover.messages import Message
>>> encoder = BodyEncoder("openai-chat")
>>> history = [Message.system("be brief"), Message.user("hi")]
>>> b"".join(encoder.encode(history, model="m"))
b'{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message
from ctxrecover.wire.formats import _CHAT, _GEMINI, GROUPED_FORMATS, WIRE_ROLES, WireFormat, _fmt
from ctxrecover.wire.render import _body_pieces, _joined_items, _turns_bytes
from ctxrecover.wire.size import _cached_fragments, _Fragments

__all__ = ["BodyEncoder"]

BLOCK_MESSAGES = 64
BLOCK_BYTES = 256 * 1024
SMALL_PIECE_BYTES = 16 * 1024  # pieces under this are joined with their neighbours into one chunk


@dataclass(frozen=True, slots=True)
class _Block:
    """Consecutive messages and their wire bytes: the history list's items, after a ``,`` if ``comma``."""

    messages: tuple[Message, ...]
    data: bytes
    comma: bool
    systems: tuple[Message, ...]
    # the history's last block when it was joined, before it was full: a later request that
    # appends to the history grows it with what follows, so blocks fill up
    open: bool
    # gemini: the (call id, function name) pairs its messages call, the call ids its unnamed tool
    # results look up in earlier blocks, and the names those look-ups found when it was joined
    calls: tuple[tuple[str, str], ...] = ()
    lookups: tuple[str, ...] = ()
    names: tuple[str, ...] = ()


class BodyEncoder:
    """Successive request bodies of one conversation in one wire format, as chunks.

    ``b"".join(encoder.encode(history, ...)) == encode_request(history, fmt, ...)``
    byte for byte, for any history. The encoder keeps the blocks of the last
    request (about one more copy of its history); a sender talking for several
    conversations stays correct, with less reuse.
    """

    def __init__(
        self,
        wire_format: WireFormat | str,
        *,
        block_messages: int = BLOCK_MESSAGES,
        block_bytes: int = BLOCK_BYTES,
    ) -> None:
        if block_messages < 1 or block_bytes < 1:
            raise ConfigError(
                f"BodyEncoder needs block_messages >= 1 and block_bytes >= 1 "
                f"(got {block_messages} and {block_bytes})"
            )
        self.wire_format = _fmt(wire_format)
        self.block_messages = block_messages
        self.block_bytes = block_bytes
        self._blocks: list[_Block] = []

    def encode(
        self,
        history: Sequence[Message],
        *,
        model: str,
        max_tokens: int | None = None,
        tools: Any = None,
        extra: Mapping[str, Any] | None = None,
    ) -> list[bytes]:
        """The body of a request of ``history``, as chunks to post in order."""
        fmt = self.wire_format
        blocks = self._blocks_of(tuple(history))
        self._blocks = blocks
        history_pieces = [block.data for block in blocks if block.data]
        systems = [m for block in blocks for m in block.systems] if fmt is not _CHAT else []
        pieces = _body_pieces(
            fmt,
            systems,
            history_pieces,
            model=model,
            max_tokens=max_tokens,
            tools=tools,
            extra=extra,
            cache=True,
        )
        return _coalesced(pieces)

    def _blocks_of(self, messages: tuple[Message, ...]) -> list[_Block]:
        """The blocks of ``messages``: the last request's where they still apply, new ones elsewhere."""
        previous = {id(block.messages[0]): block for block in self._blocks}
        gemini = self.wire_format is _GEMINI
        call_names: dict[str, str] = {}
        blocks: list[_Block] = []
        start, count, comma = 0, len(messages), False
        while start < count:
            block = previous.get(id(messages[start]))
            base = None
            if block is not None and not self._still_applies(block, messages, start, call_names, comma):
                base = block if self._grows(block, messages, start, comma) else None
                block = None
            if block is None:
                block = self._new_block(messages, start, previous, dict(call_names), comma, base)
            blocks.append(block)
            comma = comma or bool(block.data)
            if gemini:
                call_names.update(block.calls)
            start += len(block.messages)
        return blocks

    def _still_applies(
        self,
        block: _Block,
        messages: tuple[Message, ...],
        start: int,
        call_names: dict[str, str],
        comma: bool,
    ) -> bool:
        end = start + len(block.messages)
        if messages[start:end] != block.messages or (block.open and end != len(messages)):
            return False
        if block.data and block.comma != comma:
            return False
        if self.wire_format in GROUPED_FORMATS and not (
            _starts_turn(messages, start, self.wire_format) and _starts_turn(messages, end, self.wire_format)
        ):
            return False
        return tuple(call_names.get(call_id, "") for call_id in block.lookups) == block.names

    def _grows(self, block: _Block, messages: tuple[Message, ...], start: int, comma: bool) -> bool:
        """Whether ``block`` was the open end of a history that ``messages`` continues (list formats only:
        there a message's items never depend on the next message)."""
        end = start + len(block.messages)
        return (
            block.open
            and self.wire_format not in GROUPED_FORMATS
            and end < len(messages)
            and messages[start:end] == block.messages
            and (not block.data or block.comma == comma)
        )

    def _new_block(
        self,
        messages: tuple[Message, ...],
        start: int,
        previous: dict[int, _Block],
        call_names: dict[str, str],
        comma: bool,
        base: _Block | None,
    ) -> _Block:
        """A block from ``start`` (continuing ``base``, its open start), up to ``block_messages`` or
        ``block_bytes``, or a kept block's start."""
        fmt = self.wire_format
        grouped = fmt in GROUPED_FORMATS
        if base is None:
            fragments = [_fragment(messages[start], fmt)]
            size, end = len(fragments[0].items), start + 1
        else:
            fragments, size, end = [], len(base.data), start + len(base.messages)
        count = len(messages)
        while end < count:
            boundary = not grouped or _starts_turn(messages, end, fmt)
            full = end - start >= self.block_messages or size >= self.block_bytes
            if boundary and (full or id(messages[end]) in previous):
                break
            fragments.append(_fragment(messages[end], fmt))
            size += len(fragments[-1].items)
            end += 1
        full = end - start >= self.block_messages or size >= self.block_bytes
        members, is_open = messages[start:end], end == count and not full
        added = members[len(base.messages) :] if base else members
        systems = (base.systems if base else ()) + tuple(m for m in added if m.role == "system")
        if not grouped:
            if fmt is not _CHAT:
                fragments = [f for f, m in zip(fragments, added, strict=True) if m.role != "system"]
            items = _joined_items(fragments)
            if base is not None and base.data:
                data = b"".join([base.data, b",", *items]) if items else base.data
            else:
                data = b"".join([b",", *items] if comma else items) if items else b""
            return _Block(members, data, comma, systems, is_open)
        out: list[Any] = [b","] if comma else []
        lookups: tuple[str, ...] = ()
        names: tuple[str, ...] = ()
        calls: tuple[tuple[str, str], ...] = ()
        if fmt is not _GEMINI:
            _turns_bytes(members, fmt, True, out)
        else:
            lookups = tuple(m.tool_call_id or "" for m in members if m.role == "tool" and not m.name)
            names = tuple(call_names.get(call_id, "") for call_id in lookups)
            calls = tuple((c.id, c.name) for m in members for c in m.tool_calls)
            _turns_bytes(members, fmt, True, out, call_names)
        data = b"".join(out) if len(out) > comma else b""
        return _Block(members, data, comma, systems, is_open, calls, lookups, names)


def _fragment(message: Message, fmt: WireFormat) -> _Fragments:
    return _cached_fragments((message,), fmt, True)[0]


def _starts_turn(messages: tuple[Message, ...], index: int, fmt: WireFormat) -> bool:
    """Whether no merged turn spans position ``index`` (system messages are not in turns)."""
    roles = WIRE_ROLES[fmt]
    before = index - 1
    while before >= 0 and messages[before].role == "system":
        before -= 1
    after = index
    while after < len(messages) and messages[after].role == "system":
        after += 1
    if before < 0 or after >= len(messages):
        return True
    return roles[messages[before].role] != roles[messages[after].role]


def _coalesced(pieces: list[Any]) -> list[bytes]:
    """``pieces`` with each run of small ones joined into one chunk (fewer writes to the socket)."""
    chunks: list[bytes] = []
    small: list[Any] = []
    for piece in pieces:
        if len(piece) < SMALL_PIECE_BYTES:
            small.append(piece)
            continue
        if small:
            chunks.append(b"".join(small))
            small = []
        chunks.append(piece)
    if small:
        chunks.append(b"".join(small))
    return chunks
