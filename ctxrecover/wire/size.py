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


# A merged turn of a grouped format (consecutive non-system messages of one wire role), as a list
# for speed: [wire role, position of its first message, that message's ``simple`` size, members,
# summed block sizes, block count]. A lone member with a ``simple`` form is sent as that string.
_Run = list[Any]
_ROLE, _FIRST, _SIMPLE, _MEMBERS, _TOTAL, _COUNT = range(6)


def _run_size(run: _Run, wrappers: Mapping[str, int]) -> int:
    if run[_MEMBERS] == 1 and run[_SIMPLE] is not None:
        return run[_SIMPLE]  # type: ignore[no-any-return]
    wrapper = wrappers[run[_ROLE]]
    return wrapper + run[_TOTAL] + run[_COUNT] - 1 if run[_COUNT] else wrapper


# What one message adds to a tracker: (the message, its sizes, a gemini function-name splice, its run).
_Record = tuple[Message, _Sizes, int, "_Run | None"]


_Static = tuple[Any, Any, int, int]  # (tools, extra) the sizes were taken for, fields' bytes, fields
_STATIC_MEMO = 8  # envelopes remembered by one tracker (max_tokens × tools × extra)


class WireSizeTracker:
    """The exact byte size of a request body, kept up to date one message at a time.

    Each message is measured once per format (cached on the message); the
    tracker adds framing. ``append`` costs O(size of the new message),
    :meth:`replace` of one message and :meth:`truncate` by ``k`` messages cost
    O(those messages), ``size`` is O(1): a history that changes by a few
    messages is re-sized by those few. ``messages`` counts the messages
    accounted for; :meth:`size_for` is the size of the same history under
    another envelope (``max_tokens``, ``tools``, ``extra``).

    >>> tracker = WireSizeTracker("openai-chat", model="gpt-4o")
    >>> tracker.reset([Message.system("be brief")])
    >>> tracker.append(Message.user("hi"))
    >>> history = [Message.system("be brief"), Message.user("hi")]
    >>> tracker.size == request_size(history, "openai-chat", model="gpt-4o")
    True
    """

    __slots__ = (
        "_call_names",
        "_default",
        "_grouped",
        "_history_key",
        "_items_count",
        "_items_sum",
        "_model",
        "_records",
        "_runs",
        "_statics",
        "_sys_block_count",
        "_sys_block_sum",
        "_sys_count",
        "_sys_first",
        "_sys_first_at",
        "_sys_key",
        "_sys_text",
        "_turn_wrappers",
        "format",
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
        self._model = model
        self._grouped = fmt in GROUPED_FORMATS
        self._statics: dict[tuple[int | None, int, int], _Static] = {}
        self._default = (max_tokens, tools, extra)
        self._static(max_tokens, tools, extra)  # a bad ``extra`` raises here, as render_request does
        self._history_key = _size(HISTORY_KEYS[fmt]) + 1
        self._sys_key = _size(SYSTEM_KEYS.get(fmt, "")) + 1
        roles = WIRE_ROLES.get(fmt, {}).values()
        self._turn_wrappers = {role: _size({"role": role, TURN_CONTENT_KEYS[fmt]: []}) for role in roles}
        self.reset()

    @property
    def messages(self) -> int:
        """How many messages are accounted for."""
        return len(self._records)

    def reset(self, history: Iterable[Message] = ()) -> None:
        """Start over from ``history`` (cached message sizes are reused)."""
        self._records: list[_Record] = []
        self._items_sum = self._items_count = 0
        self._sys_count = self._sys_text = self._sys_block_sum = self._sys_block_count = 0
        self._sys_first: int | None = None
        self._sys_first_at = -1
        self._runs: list[_Run] = []
        self._call_names: dict[str, list[str]] = {}  # gemini: call id → names of the calls so far
        self.extend(history)

    def extend(self, messages: Iterable[Message]) -> None:
        """Append several messages in order."""
        for msg in messages:
            self.append(msg)

    def append(self, msg: Message) -> None:
        """Account for one more message at the end of the history."""
        fmt = self.format
        sizes = _sizes(msg, fmt)
        if msg.role == "system" and fmt is not _CHAT:
            if self._sys_count == 0:
                self._sys_first, self._sys_first_at = sizes.simple, len(self._records)
            self._system(sizes, +1)
            self._records.append((msg, sizes, 0, None))
            return
        if not self._grouped:
            self._items_sum += sizes.total
            self._items_count += sizes.count
            self._records.append((msg, sizes, 0, None))
            return
        extra = 0
        if fmt is _GEMINI:
            if msg.role == "tool":
                names = self._call_names.get(msg.tool_call_id or "")
                extra = _size(msg.name or (names[-1] if names else "")) - 2
            for call in msg.tool_calls:
                self._call_names.setdefault(call.id, []).append(call.name)
        role = WIRE_ROLES[fmt][msg.role]
        runs, added = self._runs, sizes.total + extra
        run = runs[-1] if runs else None
        if run is not None and run[_ROLE] == role:
            before = _run_size(run, self._turn_wrappers)
            run[_MEMBERS] += 1
            run[_TOTAL] += added
            run[_COUNT] += sizes.count
            self._items_sum += _run_size(run, self._turn_wrappers) - before
        else:
            run = [role, len(self._records), sizes.simple, 1, added, sizes.count]
            runs.append(run)
            self._items_count += 1
            self._items_sum += _run_size(run, self._turn_wrappers)
        self._records.append((msg, sizes, extra, run))

    def truncate(self, length: int) -> None:
        """Forget every message from position ``length`` on (the last ones first)."""
        records = self._records
        while len(records) > length:
            msg, sizes, extra, run = records.pop()
            if run is None:
                if msg.role == "system" and self.format is not _CHAT:
                    self._system(sizes, -1)
                    if self._sys_count == 0:
                        self._sys_first, self._sys_first_at = None, -1
                else:
                    self._items_sum -= sizes.total
                    self._items_count -= sizes.count
                continue
            before = _run_size(run, self._turn_wrappers)
            run[_MEMBERS] -= 1
            run[_TOTAL] -= sizes.total + extra
            run[_COUNT] -= sizes.count
            if run[_MEMBERS]:
                self._items_sum += _run_size(run, self._turn_wrappers) - before
            else:
                self._runs.pop()
                self._items_sum -= before
                self._items_count -= 1
            for call in reversed(msg.tool_calls):
                names = self._call_names.get(call.id)
                if names:
                    names.pop()
                    if not names:
                        del self._call_names[call.id]

    def replace(self, index: int, msg: Message) -> bool:
        """Account for ``msg`` in place of the message at ``index``; O(that message).

        False (and nothing changed) when ``msg`` would change how the history is
        laid out — another role, or for gemini other tool calls, call id or name —
        then :meth:`truncate` to ``index`` and append from there instead.
        """
        old, sizes, extra, run = self._records[index]
        if old.role != msg.role:
            return False
        if self.format is _GEMINI and (
            old.tool_calls != msg.tool_calls or old.tool_call_id != msg.tool_call_id or old.name != msg.name
        ):
            return False
        new = _sizes(msg, self.format)
        if run is None:
            if msg.role == "system" and self.format is not _CHAT:
                self._system(sizes, -1)
                self._system(new, +1)
                if index == self._sys_first_at:
                    self._sys_first = new.simple
            else:
                self._items_sum += new.total - sizes.total
                self._items_count += new.count - sizes.count
        else:
            before = _run_size(run, self._turn_wrappers)
            run[_TOTAL] += new.total - sizes.total
            run[_COUNT] += new.count - sizes.count
            if run[_FIRST] == index:
                run[_SIMPLE] = new.simple
            self._items_sum += _run_size(run, self._turn_wrappers) - before
        self._records[index] = (msg, new, extra, run)
        return True

    def _system(self, sizes: _Sizes, sign: int) -> None:
        self._sys_count += sign
        self._sys_text += sign * sizes.text
        self._sys_block_sum += sign * sizes.total
        self._sys_block_count += sign * sizes.count

    def _system_size(self) -> int:
        fmt = self.format
        if fmt is _RESPONSES:
            return 2 + self._sys_text + (self._sys_count - 1) * (_size(SYSTEM_TEXT_SEPARATOR) - 2)
        if fmt is _ANTHROPIC and self._sys_count == 1 and self._sys_first is not None:
            return self._sys_first
        blocks = _list_size(self._sys_block_sum, self._sys_block_count)
        return blocks + len('{"parts":}') if fmt is _GEMINI else blocks

    def _static(self, max_tokens: int | None, tools: Any, extra: Mapping[str, Any] | None) -> tuple[int, int]:
        """Bytes and count of the body's fields besides history and system, measured once per envelope."""
        key = (max_tokens, id(tools), id(extra))
        found = self._statics.get(key)
        if found is not None and found[0] is tools and found[1] is extra:
            return found[2], found[3]
        skeleton = _envelope(
            self.format,
            model=self._model,
            max_tokens=max_tokens,
            tools=tools,
            extra=extra,
            system=None,
            history=[],
        )
        del skeleton[HISTORY_KEYS[self.format]]
        measured = sum(_size(k) + 1 + _size(v) for k, v in skeleton.items()), len(skeleton)
        if len(self._statics) >= _STATIC_MEMO:
            self._statics.clear()
        self._statics[key] = (tools, extra, *measured)
        return measured

    @property
    def size(self) -> int:
        """Bytes of ``encode_body(render_request(history, ...))`` for the messages so far."""
        return self.size_for(*self._default)

    def size_for(
        self, max_tokens: int | None = None, tools: Any = None, extra: Mapping[str, Any] | None = None
    ) -> int:
        """The size of a request carrying the same messages with this envelope.

        The envelope's bytes are measured once per ``(max_tokens, tools, extra)`` —
        the same objects: a tools list changed in place is not measured again.
        """
        static_sum, static_count = self._static(max_tokens, tools, extra)
        fields_sum = static_sum + self._history_key + _list_size(self._items_sum, self._items_count)
        fields = static_count + 1
        if self._sys_count and self.format is not _CHAT:
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
