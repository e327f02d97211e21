"""Wire formats: real request bodies, their exact byte sizes, and responses (SPEC §1.4).

A history renders to the body each provider expects (``openai-chat``,
``openai-responses``, ``anthropic``, ``gemini``, ``bedrock-converse``);
:func:`encode_body` is the one serialisation senders use, so
``request_size(...) == len(encode_body(render_request(...)))`` byte for byte.

Sizing is compositional: JSON of a list is ``[`` + items joined by ``,`` + ``]``,
so each message's fragments are serialised once, their sizes cached on the
message (``msg._cache["wire:<format>"]``), and a body's size is those cached
integers plus computable framing. :class:`WireSizeTracker` keeps the running
total, so a budget check after appending one message costs O(that message).

:func:`encode_request` applies the same composition to bytes: it returns
``encode_body(render_request(...))`` byte for byte, assembled from each
message's encoded fragments, cached on the message
(``msg._cache["wire-bytes:<format>"]``), so a request re-serialises only the
messages it has not sent before. Memory: that cache holds one encoded copy of
each message per format rendered (about the history's UTF-8 size again),
freed with the message; ``cache=False`` renders without storing.

Rendering rules worth knowing:

- ``system_parts``, when present, *are* the system prompt on the wire (one text
  block each; joined by a blank line where only a string fits) and ``content``
  is taken as their flattened copy.
- anthropic, gemini and bedrock-converse take every system message into their
  system field and merge consecutive messages of the same wire role (tool
  results are ``user``), because their APIs require alternation and all tool
  results of a turn in one message.
- Tool-call arguments are parsed for the formats that want an object; text
  that is not a JSON object is kept whole under ``"_raw_arguments"``.

>>> from ctxrecover.wire import request_size
>>> body = render_request([Message.user("hi")], "anthropic", model="claude-sonnet-4-5")
>>> body["messages"]
[{'role': 'user', 'content': 'hi'}]
>>> request_size([Message.user("hi")], "anthropic", model="claude-sonnet-4-5") == len(encode_body(body))
True

The other pieces live in one module each and are re-exported by
:mod:`ctxrecover.wire`: :mod:`ctxrecover.wire.formats` (:class:`WireFormat`,
tables, :func:`encode_body`), :mod:`ctxrecover.wire.fragments` (what one
message renders to), :mod:`ctxrecover.wire.size` (cached fragments,
:class:`WireSizeTracker`), :mod:`ctxrecover.wire.chunks` (:class:`BodyEncoder`: successive bodies
as reused blocks of messages) and :mod:`ctxrecover.wire.response` (:func:`parse_response`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ctxrecover.messages import Message
from ctxrecover.wire.formats import (
    _ANTHROPIC,
    _CHAT,
    _GEMINI,
    _RESPONSES,
    GROUPED_FORMATS,
    REQUEST_PATHS,
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
    _system_value,
    _turn_blocks,
)
from ctxrecover.wire.size import (
    _cached_fragments,
    _Fragments,
)

__all__ = ["encode_request", "render_request", "request_path"]


def request_path(fmt: WireFormat | str, model: str) -> str:
    """The URL path of a request (gemini and bedrock-converse carry the model here)."""
    return REQUEST_PATHS[_fmt(fmt)].format(model=model)


def render_request(
    history: Iterable[Message],
    fmt: WireFormat | str,
    *,
    model: str,
    max_tokens: int | None = None,
    tools: Any = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The request body for ``fmt``, exactly as a sender will post it.

    ``tools`` are passed through in the provider's own format (bedrock-converse
    wraps them in ``toolConfig``); ``extra`` adds top-level fields (dict values
    merge into a rendered dict such as ``generationConfig``).

    >>> render_request([Message.user("hi")], "openai-chat", model="gpt-4o", max_tokens=10)
    {'model': 'gpt-4o', 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 10}
    """
    fmt = _fmt(fmt)
    messages = list(history)
    systems = [m for m in messages if m.role == "system"]
    items: list[Any]
    if fmt is _CHAT:
        items = [_chat_item(m) for m in messages]
    elif fmt is _RESPONSES:
        items = [item for m in messages if m.role != "system" for item in _responses_items(m)]
    else:
        items = _render_turns(messages, fmt)
    system = _system_value(systems, fmt) if systems and fmt is not _CHAT else None
    return _envelope(
        fmt, model=model, max_tokens=max_tokens, tools=tools, extra=extra, system=system, history=items
    )


def _render_turns(messages: list[Message], fmt: WireFormat) -> list[dict[str, Any]]:
    roles, key = WIRE_ROLES[fmt], TURN_CONTENT_KEYS[fmt]
    call_names: dict[str, str] = {}
    turns: list[tuple[str, list[Message], list[Any]]] = []
    for msg in messages:
        if msg.role == "system":
            continue
        name = msg.name or call_names.get(msg.tool_call_id or "", "") if msg.role == "tool" else ""
        call_names.update((c.id, c.name) for c in msg.tool_calls)
        role = roles[msg.role]
        if not turns or turns[-1][0] != role:
            turns.append((role, [], []))
        turns[-1][1].append(msg)
        turns[-1][2].extend(_turn_blocks(msg, fmt, name))
    out: list[dict[str, Any]] = []
    for role, members, blocks in turns:
        if fmt is _ANTHROPIC and len(members) == 1 and _is_simple(members[0]):
            out.append({"role": role, "content": members[0].content})
        else:
            out.append({"role": role, key: blocks})
    return out


# -- exact bytes from cached fragments --------------------------------------------

_SPLICED = object()  # placeholder of the history and system fields in the envelope
_SEPARATOR_BYTES = encode_body(SYSTEM_TEXT_SEPARATOR)[1:-1]
_GEMINI_NAME_HEAD = b'{"functionResponse":{"name":'  # then the name; cached fragments hold ""


def _joined_items(fragments: list[_Fragments]) -> list[bytes]:
    """The non-empty ``items`` of ``fragments`` with ``,`` between them, as pieces.

    Pieces, not one joined copy: the body's single join then copies each
    fragment once (a large intermediate buffer costs as much as the join).
    """
    items = [f.items for f in fragments if f.count]
    pieces = [b","] * (2 * len(items) - 1) if items else []
    pieces[::2] = items
    return pieces


def _close_turn(out: list[Any], start: int, members: int, first: _Fragments, simple_turns: bool) -> None:
    if simple_turns and members == 1 and first.simple is not None:
        del out[start:]  # a lone plain-text turn goes as a string
        out.append(first.simple)
    else:
        out.append(b"]}")


def _turns_bytes(
    messages: list[Message] | tuple[Message, ...],
    fmt: WireFormat,
    store: bool,
    out: list[Any],
    call_names: dict[str, str] | None = None,
) -> None:
    """Append to ``out`` the merged turns of ``messages``, as :func:`_render_turns` renders them.

    ``call_names`` (gemini): tool call id → function name of calls made before
    ``messages``; it is updated with theirs.
    """
    roles, key = WIRE_ROLES[fmt], encode_body(TURN_CONTENT_KEYS[fmt])
    heads = {role: b'{"role":' + encode_body(role) + b"," + key + b":[" for role in roles.values()}
    simple_turns, gemini = fmt is _ANTHROPIC, fmt is _GEMINI
    call_names = {} if call_names is None else call_names
    encoded_names: dict[str, bytes] = {}
    turn_role: str | None = None
    start = members = blocks = 0
    first: _Fragments | None = None
    for msg, found in zip(messages, _cached_fragments(messages, fmt, store), strict=True):
        if msg.role == "system":
            continue
        role = roles[msg.role]
        if role != turn_role:
            if first is not None:
                _close_turn(out, start, members, first, simple_turns)
                out.append(b",")
            turn_role, start, members, blocks, first = role, len(out), 0, 0, found
            out.append(heads[role])
        members += 1
        if found.count:
            if blocks:
                out.append(b",")
            blocks += found.count
            named = gemini and msg.role == "tool"
            name = msg.name or call_names.get(msg.tool_call_id or "", "") if named else ""
            if name:  # splice the function name into the fragment cached with ""
                encoded = encoded_names.get(name) or encoded_names.setdefault(name, encode_body(name))
                out += (_GEMINI_NAME_HEAD, encoded, memoryview(found.items)[len(_GEMINI_NAME_HEAD) + 2 :])
            else:
                out.append(found.items)
        if gemini and msg.tool_calls:
            call_names.update((c.id, c.name) for c in msg.tool_calls)
    if first is not None:
        _close_turn(out, start, members, first, simple_turns)


def _system_bytes(systems: list[Message], fmt: WireFormat, store: bool) -> list[Any]:
    fragments = _cached_fragments(systems, fmt, store)
    if fmt is _RESPONSES:
        return [b'"', _SEPARATOR_BYTES.join(f.text for f in fragments), b'"']
    if fmt is _ANTHROPIC and len(systems) == 1 and fragments[0].simple is not None:
        return [fragments[0].simple]
    blocks = [b"[", *_joined_items(fragments), b"]"]
    return [b'{"parts":', *blocks, b"}"] if fmt is _GEMINI else blocks


def encode_request(
    history: Iterable[Message],
    fmt: WireFormat | str,
    *,
    model: str,
    max_tokens: int | None = None,
    tools: Any = None,
    extra: Mapping[str, Any] | None = None,
    cache: bool = True,
) -> bytes:
    """``encode_body(render_request(...))`` byte for byte, joined from cached per-message JSON.

    Each message is encoded once per format and its fragments kept on the
    message; a later request re-encodes only new messages and the small
    envelope. ``cache=False`` reuses fragments already cached but stores no
    new ones (the cache costs about one encoded copy of each message).

    >>> history = [Message.system("be brief"), Message.user("hi")]
    >>> encode_request(history, "anthropic", model="m", max_tokens=5)
    b'{"model":"m","max_tokens":5,"system":"be brief","messages":[{"role":"user","content":"hi"}]}'
    """
    fmt = _fmt(fmt)
    messages = list(history)
    systems = [m for m in messages if m.role == "system"] if fmt is not _CHAT else []
    pieces = _body_pieces(
        fmt,
        systems,
        _history_pieces(messages, fmt, cache),
        model=model,
        max_tokens=max_tokens,
        tools=tools,
        extra=extra,
        cache=cache,
    )
    return b"".join(pieces)


def _history_pieces(messages: list[Message], fmt: WireFormat, store: bool) -> list[Any]:
    """The pieces of the body's history list between its brackets (:func:`encode_request`'s)."""
    if fmt in GROUPED_FORMATS:
        out: list[Any] = []
        _turns_bytes(messages, fmt, store, out)
        return out
    chosen = messages if fmt is _CHAT else [m for m in messages if m.role != "system"]
    return _joined_items(_cached_fragments(chosen, fmt, store))


def _body_pieces(
    fmt: WireFormat,
    systems: list[Message],
    history: list[Any],
    *,
    model: str,
    max_tokens: int | None,
    tools: Any,
    extra: Mapping[str, Any] | None,
    cache: bool,
) -> list[Any]:
    """The whole body as pieces: the envelope's fields around ``history``, the history list's pieces."""
    body = _envelope(
        fmt,
        model=model,
        max_tokens=max_tokens,
        tools=tools,
        extra=extra,
        system=_SPLICED if systems else None,
        history=_SPLICED,  # type: ignore[arg-type]
    )
    out: list[Any] = [b"{"]
    for key, value in body.items():
        if len(out) > 1:
            out.append(b",")
        if value is not _SPLICED:
            out.append(encode_body({key: value})[1:-1])
            continue
        out += (encode_body(key), b":")
        if key == SYSTEM_KEYS.get(fmt):
            out += _system_bytes(systems, fmt, cache)
            continue
        out.append(b"[")
        out += history
        out.append(b"]")
    out.append(b"}")
    return out
