"""Exact request sizes from per-message fragments cached on the messages (SPEC §1.4).

Sizing is compositional: JSON of a list is ``[`` + items joined by ``,`` + ``]``,
so each message's fragments are serialised once, their sizes cached on the
message (``msg._cache["wire:<format>"]``, the encoded fragments themselves under
``"wire-bytes:<format>"`` when :func:`ctxrecover.wire.encode_request` stores
them), and a body's size is those cached integers plus computable framing.
:class:`WireSizeTracker` keeps the running total, so a budget check after
appending one message costs O(that message).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ctxrecover.messages import Message
from ctxrecover.wire.formats import (
    _ANTHROPIC,
    _CHAT,
    _GEMINI,
    _RESPONSES,
    GROUPED_FORMATS,
    HISTORY_KEYS,
    SYSTEM_KEYS,
    SYSTEM_TEXT_SEPARATOR,
    TURN_CONTENT_KEYS,
    WIRE_ROLES,
    WireFormat,
    _fmt,
    encode_body,
)
from ctxrecover.wire.fragments import (
    _chat_item,
    _envelope,
    _is_simple,
    _responses_items,
    _system_text,
    _system_texts,
    _text_block,
    _turn_blocks,
)

__all__ = [
    "WireSizeTracker",
    "history_bytes",
    "request_size",
    "system_bytes",
]

_CACHE_KEYS = {fmt: f"wire:{fmt}" for fmt in WireFormat}
_FRAGMENT_KEYS = {fmt: f"wire-bytes:{fmt}" for fmt in WireFormat}


def _size(value: Any) -> int:
    return len(encode_body(value))


# -- fragments and sizes ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Fragments:
    """The encoded JSON one message contributes to a body in one format.

    ``items``: its list items (messages, input items, blocks or system text
    blocks) joined by ``,``; ``count``: how many; ``simple``: the whole item
    when it can stand alone as a string (anthropic: a plain turn, or the
    system prompt of a lone system message); ``text``: its escaped system text
    without quotes (openai-responses instructions). A gemini tool result is
    rendered with an empty function name, spliced in at assembly.
    """

    items: bytes
    count: int
    simple: bytes | None = None
    text: bytes = b""


@dataclass(frozen=True, slots=True)
class _Sizes:
    """Cached wire sizes of one message in one format: the lengths of its :class:`_Fragments`.

    ``total`` is the summed size of its items (without the commas between them).
    """

    total: int
    count: int
    simple: int | None = None
    text: int = 0


def _encoded_items(values: Iterable[Any]) -> tuple[bytes, int]:
    encoded = [encode_body(v) for v in values]
    return b",".join(encoded), len(encoded)


def _render_fragments(msg: Message, fmt: WireFormat) -> _Fragments:
    if fmt is _CHAT:
        return _Fragments(encode_body(_chat_item(msg)), 1)
    if msg.role == "system":
        if fmt is _RESPONSES:
            return _Fragments(b"", 0, text=encode_body(_system_text(msg))[1:-1])
        items, count = _encoded_items(_text_block(t, fmt) for t in _system_texts(msg) if t)
        simple = encode_body(msg.content) if fmt is _ANTHROPIC and not msg.system_parts else None
        return _Fragments(items, count, simple)
    if fmt is _RESPONSES:
        return _Fragments(*_encoded_items(_responses_items(msg)))
    items, count = _encoded_items(_turn_blocks(msg, fmt))
    simple = None
    if fmt is _ANTHROPIC and _is_simple(msg):
        simple = encode_body({"role": WIRE_ROLES[fmt][msg.role], "content": msg.content})
    return _Fragments(items, count, simple)


def _sizes_of(fragments: _Fragments) -> _Sizes:
    count = fragments.count
    simple = None if fragments.simple is None else len(fragments.simple)
    return _Sizes(len(fragments.items) - max(count - 1, 0), count, simple, len(fragments.text))


def _measure(msg: Message, fmt: WireFormat) -> _Sizes:
    return _sizes_of(_render_fragments(msg, fmt))


def _sizes(msg: Message, fmt: WireFormat) -> _Sizes:
    key = _CACHE_KEYS[fmt]
    cached = msg._cache.get(key)
    if cached is None:
        cached = msg._cache[key] = _measure(msg, fmt)
    return cached


def _fragments(msg: Message, fmt: WireFormat, store: bool) -> _Fragments:
    """The message's fragments, from its cache; rendered (and stored when ``store``) on a miss."""
    cache = msg._cache
    found = cache.get(_FRAGMENT_KEYS[fmt])
    if found is None:
        found = _render_fragments(msg, fmt)
        if store:
            cache[_FRAGMENT_KEYS[fmt]] = found
        if _CACHE_KEYS[fmt] not in cache:
            cache[_CACHE_KEYS[fmt]] = _sizes_of(found)
    return found


def _cached_fragments(messages: Iterable[Message], fmt: WireFormat, store: bool) -> list[_Fragments]:
    key = _FRAGMENT_KEYS[fmt]
    return [m._cache.get(key) or _fragments(m, fmt, store) for m in messages]


def _list_size(total: int, count: int) -> int:
    return 2 + total + (count - 1 if count else 0)


class WireSizeTracker:
    """The exact byte size of a request body, kept up to date one message at a time.

    Each message is measured once per format (cached on the message); the
    tracker adds framing, so ``append`` is O(size of the new message) and
    ``size`` is O(1). ``messages`` counts the messages accounted for.

    >>> tracker = WireSizeTracker("openai-chat", model="gpt-4o")
    >>> tracker.reset([Message.system("be brief")])
    >>> tracker.append(Message.user("hi"))
    >>> history = [Message.system("be brief"), Message.user("hi")]
    >>> tracker.size == request_size(history, "openai-chat", model="gpt-4o")
    True
    """

    __slots__ = (
        "_call_names",
        "_history_key",
        "_items_count",
        "_items_sum",
        "_static_count",
        "_static_sum",
        "_sys_block_count",
        "_sys_block_sum",
        "_sys_count",
        "_sys_first",
        "_sys_key",
        "_sys_text",
        "_turn_count",
        "_turn_members",
        "_turn_role",
        "_turn_simple",
        "_turn_sum",
        "_turn_wrappers",
        "format",
        "messages",
    )

    def __init__(
        self,
        fmt: WireFormat | str,
        *,
        model: str,
        max_tokens: int | None = None,
        tools: Any = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.format = fmt = _fmt(fmt)
        skeleton = _envelope(
            fmt, model=model, max_tokens=max_tokens, tools=tools, extra=extra, system=None, history=[]
        )
        del skeleton[HISTORY_KEYS[fmt]]
        self._static_sum = sum(_size(k) + 1 + _size(v) for k, v in skeleton.items())
        self._static_count = len(skeleton)
        self._history_key = _size(HISTORY_KEYS[fmt]) + 1
        self._sys_key = _size(SYSTEM_KEYS.get(fmt, "")) + 1
        roles = WIRE_ROLES.get(fmt, {}).values()
        self._turn_wrappers = {role: _size({"role": role, TURN_CONTENT_KEYS[fmt]: []}) for role in roles}
        self.reset()

    def reset(self, history: Iterable[Message] = ()) -> None:
        """Start over from ``history`` (cached message sizes are reused)."""
        self.messages = 0
        self._items_sum = self._items_count = 0
        self._sys_count = self._sys_text = self._sys_block_sum = self._sys_block_count = 0
        self._sys_first: int | None = None
        self._turn_role: str | None = None
        self._turn_members = self._turn_sum = self._turn_count = 0
        self._turn_simple: int | None = None
        self._call_names: dict[str, str] = {}
        self.extend(history)

    def extend(self, messages: Iterable[Message]) -> None:
        """Append several messages in order."""
        for msg in messages:
            self.append(msg)

    def append(self, msg: Message) -> None:
        """Account for one more message at the end of the history."""
        fmt = self.format
        sizes = _sizes(msg, fmt)
        self.messages += 1
        if msg.role == "system" and fmt is not _CHAT:
            if self._sys_count == 0:
                self._sys_first = sizes.simple
            self._sys_count += 1
            self._sys_text += sizes.text
            self._sys_block_sum += sizes.total
            self._sys_block_count += sizes.count
            return
        if fmt not in GROUPED_FORMATS:
            self._items_sum += sizes.total
            self._items_count += sizes.count
            return
        total = sizes.total
        if msg.role == "tool" and fmt is _GEMINI:
            total += _size(msg.name or self._call_names.get(msg.tool_call_id or "", "")) - 2
        if msg.tool_calls and fmt is _GEMINI:
            self._call_names.update((c.id, c.name) for c in msg.tool_calls)
        role = WIRE_ROLES[fmt][msg.role]
        if role != self._turn_role:
            if self._turn_role is not None:
                self._items_sum += self._turn_size()
                self._items_count += 1
            self._turn_role, self._turn_members = role, 0
            self._turn_sum = self._turn_count = 0
            self._turn_simple = sizes.simple
        self._turn_members += 1
        self._turn_sum += total
        self._turn_count += sizes.count

    def _turn_size(self) -> int:
        if self._turn_members == 1 and self._turn_simple is not None:
            return self._turn_simple
        wrapper = self._turn_wrappers[self._turn_role]
        return wrapper + self._turn_sum + self._turn_count - 1 if self._turn_count else wrapper

    def _system_size(self) -> int:
        fmt = self.format
        if fmt is _RESPONSES:
            return 2 + self._sys_text + (self._sys_count - 1) * (_size(SYSTEM_TEXT_SEPARATOR) - 2)
        if fmt is _ANTHROPIC and self._sys_count == 1 and self._sys_first is not None:
            return self._sys_first
        blocks = _list_size(self._sys_block_sum, self._sys_block_count)
        return blocks + len('{"parts":}') if fmt is _GEMINI else blocks

    @property
    def size(self) -> int:
        """Bytes of ``encode_body(render_request(history, ...))`` for the messages so far."""
        fmt = self.format
        items_sum, items_count = self._items_sum, self._items_count
        if self._turn_role is not None:
            items_sum += self._turn_size()
            items_count += 1
        fields_sum = self._static_sum + self._history_key + _list_size(items_sum, items_count)
        fields = self._static_count + 1
        if self._sys_count and fmt is not _CHAT:
            fields_sum += self._sys_key + self._system_size()
            fields += 1
        return 2 + fields_sum + fields - 1


def request_size(
    history: Iterable[Message],
    fmt: WireFormat | str,
    *,
    model: str,
    max_tokens: int | None = None,
    tools: Any = None,
    extra: Mapping[str, Any] | None = None,
) -> int:
    """``len(encode_body(render_request(...)))``, from cached per-message sizes."""
    tracker = WireSizeTracker(fmt, model=model, max_tokens=max_tokens, tools=tools, extra=extra)
    tracker.extend(history)
    return tracker.size


def history_bytes(history: Iterable[Message], fmt: WireFormat | str) -> int:
    """Bytes the messages add to a request body (its size minus an empty request's)."""
    tracker = WireSizeTracker(fmt, model="")
    empty = tracker.size
    tracker.extend(history)
    return tracker.size - empty


def system_bytes(history: Iterable[Message], fmt: WireFormat | str) -> int:
    """Bytes the leading system messages add to a request body, as rendered.

    The non-compactable floor that SPEC §6 compares with a rejected size.
    """
    leading: list[Message] = []
    for msg in history:
        if msg.role != "system":
            break
        leading.append(msg)
    return history_bytes(leading, fmt)
