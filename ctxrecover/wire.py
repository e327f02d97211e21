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

>>> body = render_request([Message.user("hi")], "anthropic", model="claude-sonnet-4-5")
>>> body["messages"]
[{'role': 'user', 'content': 'hi'}]
>>> request_size([Message.user("hi")], "anthropic", model="claude-sonnet-4-5") == len(encode_body(body))
True
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ctxrecover.errors import ConfigError
from ctxrecover.messages import Image, Message, ToolCall

__all__ = [
    "MAX_TOKENS_FIELDS",
    "TRUNCATION_STOP_REASONS",
    "ParsedResponse",
    "Usage",
    "WireFormat",
    "WireSizeTracker",
    "encode_body",
    "encode_request",
    "history_bytes",
    "parse_response",
    "render_request",
    "request_path",
    "request_size",
    "system_bytes",
]


class WireFormat(StrEnum):
    """The request/response dialects ctxrecover renders and parses."""

    OPENAI_CHAT = "openai-chat"
    OPENAI_RESPONSES = "openai-responses"
    ANTHROPIC = "anthropic"
    GEMINI = "gemini"
    BEDROCK_CONVERSE = "bedrock-converse"


_CHAT, _RESPONSES, _ANTHROPIC, _GEMINI, _BEDROCK = WireFormat

REQUEST_PATHS: dict[WireFormat, str] = {
    _CHAT: "/v1/chat/completions",
    _RESPONSES: "/v1/responses",
    _ANTHROPIC: "/v1/messages",
    _GEMINI: "/v1beta/models/{model}:generateContent",
    _BEDROCK: "/model/{model}/converse",
}
MAX_TOKENS_FIELDS: dict[WireFormat, str] = {
    _CHAT: "max_tokens",
    _RESPONSES: "max_output_tokens",
    _ANTHROPIC: "max_tokens",
    _GEMINI: "maxOutputTokens",
    _BEDROCK: "maxTokens",
}
HISTORY_KEYS: dict[WireFormat, str] = {
    _CHAT: "messages",
    _RESPONSES: "input",
    _ANTHROPIC: "messages",
    _GEMINI: "contents",
    _BEDROCK: "messages",
}
SYSTEM_KEYS: dict[WireFormat, str] = {
    _RESPONSES: "instructions",
    _ANTHROPIC: "system",
    _GEMINI: "systemInstruction",
    _BEDROCK: "system",
}
GROUPED_FORMATS = frozenset({_ANTHROPIC, _GEMINI, _BEDROCK})
WIRE_ROLES: dict[WireFormat, dict[str, str]] = {
    _ANTHROPIC: {"user": "user", "assistant": "assistant", "tool": "user"},
    _GEMINI: {"user": "user", "assistant": "model", "tool": "user"},
    _BEDROCK: {"user": "user", "assistant": "assistant", "tool": "user"},
}
TURN_CONTENT_KEYS: dict[WireFormat, str] = {_ANTHROPIC: "content", _GEMINI: "parts", _BEDROCK: "content"}
DEFAULT_ANTHROPIC_MAX_TOKENS = 4096  # the Messages API requires max_tokens
SYSTEM_TEXT_SEPARATOR = "\n\n"
RAW_ARGUMENTS_KEY = "_raw_arguments"
TRUNCATION_STOP_REASONS = frozenset({"length", "max_tokens", "MAX_TOKENS", "max_output_tokens"})
#: Where each response reports :class:`Usage` (input, output, cache read[, cache write]), as dotted paths.
USAGE_FIELDS: dict[WireFormat, tuple[str, ...]] = {
    _CHAT: ("usage.prompt_tokens", "usage.completion_tokens", "usage.prompt_tokens_details.cached_tokens"),
    _RESPONSES: ("usage.input_tokens", "usage.output_tokens", "usage.input_tokens_details.cached_tokens"),
    _ANTHROPIC: (
        "usage.input_tokens",
        "usage.output_tokens",
        "usage.cache_read_input_tokens",
        "usage.cache_creation_input_tokens",
    ),
    _GEMINI: (
        "usageMetadata.promptTokenCount",
        "usageMetadata.candidatesTokenCount",
        "usageMetadata.cachedContentTokenCount",
    ),
    _BEDROCK: (
        "usage.inputTokens",
        "usage.outputTokens",
        "usage.cacheReadInputTokens",
        "usage.cacheWriteInputTokens",
    ),
}

_CACHE_KEYS = {fmt: f"wire:{fmt}" for fmt in WireFormat}
_FRAGMENT_KEYS = {fmt: f"wire-bytes:{fmt}" for fmt in WireFormat}


def _fmt(fmt: WireFormat | str) -> WireFormat:
    try:
        return WireFormat(fmt)
    except ValueError:
        valid = ", ".join(f.value for f in WireFormat)
        raise ConfigError(f"unknown wire format {fmt!r}; use one of: {valid}") from None


def encode_body(body: Any) -> bytes:
    """The canonical serialisation of a request body: compact UTF-8 JSON."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _size(value: Any) -> int:
    return len(encode_body(value))


def request_path(fmt: WireFormat | str, model: str) -> str:
    """The URL path of a request (gemini and bedrock-converse carry the model here)."""
    return REQUEST_PATHS[_fmt(fmt)].format(model=model)


# -- fragments: what one message renders to ------------------------------------


def _data_url(image: Image) -> str:
    return f"data:{image.media_type};base64,{image.data}" if image.data is not None else str(image.url)


def _arguments_object(arguments: str) -> Any:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {RAW_ARGUMENTS_KEY: arguments}


def _wants_text(msg: Message) -> bool:
    """A text block is sent when there is text or nothing else to send."""
    return bool(msg.content) or not (msg.images or msg.tool_calls)


def _system_texts(msg: Message) -> tuple[str, ...]:
    return msg.system_parts or (msg.content,)


def _system_text(msg: Message) -> str:
    return SYSTEM_TEXT_SEPARATOR.join(_system_texts(msg))


def _image_block(image: Image, fmt: WireFormat) -> dict[str, Any]:
    if fmt is _CHAT:
        return {"type": "image_url", "image_url": {"url": _data_url(image)}}
    if fmt is _RESPONSES:
        return {"type": "input_image", "image_url": _data_url(image)}
    if fmt is _ANTHROPIC:
        if image.data is not None:
            source = {"type": "base64", "media_type": image.media_type, "data": image.data}
        else:
            source = {"type": "url", "url": image.url}
        return {"type": "image", "source": source}
    if fmt is _GEMINI:
        if image.data is not None:
            return {"inlineData": {"mimeType": image.media_type, "data": image.data}}
        return {"fileData": {"mimeType": image.media_type, "fileUri": image.url}}
    kind = image.media_type.rpartition("/")[2].replace("jpg", "jpeg")
    if image.data is not None:
        return {"image": {"format": kind, "source": {"bytes": image.data}}}
    if str(image.url).startswith("s3://"):
        return {"image": {"format": kind, "source": {"s3Location": {"uri": image.url}}}}
    return {"text": f"[image: {image.url}]"}  # Converse takes no web URLs; keep the reference


def _text_block(text: str, fmt: WireFormat) -> dict[str, Any]:
    if fmt in (_CHAT, _ANTHROPIC):
        return {"type": "text", "text": text}
    return {"text": text}


def _chat_content(msg: Message, fmt: WireFormat, text_type: str) -> Any:
    """A string, or typed parts when the message carries images."""
    if not msg.images:
        return msg.content
    parts: list[Any] = [{"type": text_type, "text": msg.content}] if msg.content else []
    return parts + [_image_block(i, fmt) for i in msg.images]


def _chat_item(msg: Message) -> dict[str, Any]:
    if msg.role == "system":
        content: Any = [_text_block(p, _CHAT) for p in msg.system_parts] or msg.content
        return {"role": "system", "content": content}
    if msg.role == "tool":
        content = _chat_content(msg, _CHAT, "text")
        return {"role": "tool", "tool_call_id": msg.tool_call_id or "", "content": content}
    item: dict[str, Any] = {"role": msg.role, "content": _chat_content(msg, _CHAT, "text")}
    if msg.tool_calls:
        if not msg.content and not msg.images:
            item["content"] = None
        item["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in msg.tool_calls
        ]
    return item


def _responses_items(msg: Message) -> list[dict[str, Any]]:
    if msg.role == "tool":
        output = _chat_content(msg, _RESPONSES, "input_text")
        return [{"type": "function_call_output", "call_id": msg.tool_call_id or "", "output": output}]
    text_type = "output_text" if msg.role == "assistant" else "input_text"
    items: list[dict[str, Any]] = []
    if _wants_text(msg) or msg.images:
        parts = [{"type": text_type, "text": msg.content}] if _wants_text(msg) else []
        items.append({"role": msg.role, "content": parts + [_image_block(i, _RESPONSES) for i in msg.images]})
    items.extend(
        {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}
        for c in msg.tool_calls
    )
    return items


def _tool_result_block(msg: Message, fmt: WireFormat, tool_name: str) -> dict[str, Any]:
    images = [_image_block(i, fmt) for i in msg.images]
    if fmt is _ANTHROPIC:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": msg.tool_call_id or ""}
        text = [_text_block(msg.content, fmt)] if _wants_text(msg) else []
        block["content"] = text + images if images else msg.content
        if msg.is_error:
            block["is_error"] = True
        return block
    if fmt is _GEMINI:
        return {"functionResponse": {"name": tool_name, "response": {"content": msg.content}}}
    text = [{"text": msg.content}] if _wants_text(msg) else []
    result: dict[str, Any] = {"toolUseId": msg.tool_call_id or "", "content": text + images}
    if msg.is_error:
        result["status"] = "error"
    return {"toolResult": result}


def _call_block(call: ToolCall, fmt: WireFormat) -> dict[str, Any]:
    args = _arguments_object(call.arguments)
    if fmt is _ANTHROPIC:
        return {"type": "tool_use", "id": call.id, "name": call.name, "input": args}
    if fmt is _GEMINI:
        return {"functionCall": {"name": call.name, "args": args}}
    return {"toolUse": {"toolUseId": call.id, "name": call.name, "input": args}}


def _turn_blocks(msg: Message, fmt: WireFormat, tool_name: str = "") -> list[dict[str, Any]]:
    """The blocks one non-system message adds to its (possibly merged) turn."""
    if msg.role == "tool":
        blocks = [_tool_result_block(msg, fmt, tool_name)]
        return blocks + [_image_block(i, fmt) for i in msg.images] if fmt is _GEMINI else blocks
    blocks = [_text_block(msg.content, fmt)] if _wants_text(msg) else []
    blocks += [_image_block(i, fmt) for i in msg.images]
    return blocks + [_call_block(c, fmt) for c in msg.tool_calls]


def _is_simple(msg: Message) -> bool:
    """An anthropic turn of one plain-text message is sent as a string."""
    return msg.role != "tool" and not msg.images and not msg.tool_calls


def _system_value(systems: list[Message], fmt: WireFormat) -> Any:
    if fmt is _RESPONSES:
        return SYSTEM_TEXT_SEPARATOR.join(_system_text(m) for m in systems)
    if fmt is _ANTHROPIC and len(systems) == 1 and not systems[0].system_parts:
        return systems[0].content
    blocks = [_text_block(t, fmt) for m in systems for t in _system_texts(m) if t]
    return {"parts": blocks} if fmt is _GEMINI else blocks


# -- rendering -----------------------------------------------------------------


def _envelope(
    fmt: WireFormat,
    *,
    model: str,
    max_tokens: int | None,
    tools: Any,
    extra: Mapping[str, Any] | None,
    system: Any,
    history: list[Any],
) -> dict[str, Any]:
    """The top-level body; ``system`` is None when there is no system field."""
    body: dict[str, Any] = {}
    if fmt in (_CHAT, _RESPONSES, _ANTHROPIC):
        body["model"] = model
    if fmt is _ANTHROPIC:
        body["max_tokens"] = DEFAULT_ANTHROPIC_MAX_TOKENS if max_tokens is None else max_tokens
    if system is not None:
        body[SYSTEM_KEYS[fmt]] = system
    body[HISTORY_KEYS[fmt]] = history
    if max_tokens is not None:
        if fmt is _GEMINI:
            body["generationConfig"] = {"maxOutputTokens": max_tokens}
        elif fmt is _BEDROCK:
            body["inferenceConfig"] = {"maxTokens": max_tokens}
        elif fmt is not _ANTHROPIC:
            body[MAX_TOKENS_FIELDS[fmt]] = max_tokens
    if tools:
        if fmt is _BEDROCK:
            body["toolConfig"] = {"tools": tools}
        else:
            body["tools"] = tools
    for key, value in (extra or {}).items():
        if key in (HISTORY_KEYS[fmt], SYSTEM_KEYS.get(fmt)):
            raise ConfigError(
                f"extra[{key!r}] would replace the rendered history of a {fmt} request; "
                "put messages in the history instead"
            )
        current = body.get(key)
        body[key] = {**current, **value} if isinstance(current, dict) and isinstance(value, dict) else value
    return body


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


# -- exact bytes from cached fragments --------------------------------------------

_SPLICED = object()  # placeholder of the history and system fields in the envelope
_SEPARATOR_BYTES = encode_body(SYSTEM_TEXT_SEPARATOR)[1:-1]
_GEMINI_NAME_HEAD = b'{"functionResponse":{"name":'  # then the name; cached fragments hold ""


def _cached_fragments(messages: Iterable[Message], fmt: WireFormat, store: bool) -> list[_Fragments]:
    key = _FRAGMENT_KEYS[fmt]
    return [m._cache.get(key) or _fragments(m, fmt, store) for m in messages]


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


def _turns_bytes(messages: list[Message], fmt: WireFormat, store: bool, out: list[Any]) -> None:
    """Append to ``out`` the merged turns of ``messages``, as :func:`_render_turns` renders them."""
    roles, key = WIRE_ROLES[fmt], encode_body(TURN_CONTENT_KEYS[fmt])
    heads = {role: b'{"role":' + encode_body(role) + b"," + key + b":[" for role in roles.values()}
    simple_turns, gemini = fmt is _ANTHROPIC, fmt is _GEMINI
    call_names: dict[str, str] = {}
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
        if fmt in GROUPED_FORMATS:
            _turns_bytes(messages, fmt, cache, out)
        else:
            chosen = messages if fmt is _CHAT else [m for m in messages if m.role != "system"]
            out += _joined_items(_cached_fragments(chosen, fmt, cache))
        out.append(b"]")
    out.append(b"}")
    return b"".join(out)


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


# -- responses -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage as the provider reports it.

    OpenAI and Gemini count cached prompt tokens inside ``input_tokens``;
    Anthropic and Bedrock report them only in the cache fields.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ParsedResponse:
    """A successful response: the assistant message, why it stopped, and usage."""

    message: Message
    stop_reason: str | None
    truncated: bool
    usage: Usage


def _get(data: Any, path: str, kind: type | tuple[type, ...], fmt: WireFormat) -> Any:
    """``data[a][b]...`` for ``path`` "a.b.0", checking the final type."""
    value = data
    for step in path.split("."):
        if isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        elif isinstance(value, dict) and step in value:
            value = value[step]
        else:
            raise ValueError(f"malformed {fmt} response: field {path!r} is missing")
    if not isinstance(value, kind):
        raise ValueError(f"malformed {fmt} response: field {path!r} is {type(value).__name__}")
    return value


def _int(data: Any, path: str) -> int:
    for key in path.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, int) and not isinstance(data, bool) else 0


def _arguments_text(value: Any) -> str:
    if isinstance(value, str):
        return value or "{}"
    return json.dumps({} if value is None else value, ensure_ascii=False, separators=(",", ":"))


def _parse_chat(data: dict[str, Any]) -> tuple[str, list[ToolCall], str | None]:
    message = _get(data, "choices.0.message", dict, _CHAT)
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    text = content or message.get("refusal") or ""
    calls = []
    for i, call in enumerate(_get(message, "tool_calls", list, _CHAT) if message.get("tool_calls") else ()):
        fn = _get(message, f"tool_calls.{i}.function", dict, _CHAT)
        name = _get(data, f"choices.0.message.tool_calls.{i}.function.name", str, _CHAT)
        calls.append(ToolCall(str(call.get("id") or ""), name, _arguments_text(fn.get("arguments"))))
    return text, calls, data["choices"][0].get("finish_reason")


def _parse_responses(data: dict[str, Any]) -> tuple[str, list[ToolCall], str | None]:
    texts: list[str] = []
    calls = []
    for i, item in enumerate(_get(data, "output", list, _RESPONSES)):
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            for part in _get(item, "content", list, _RESPONSES):
                if isinstance(part, dict) and part.get("type") in ("output_text", "refusal"):
                    texts.append(part.get("text") or part.get("refusal") or "")
        elif kind == "function_call":
            name = _get(data, f"output.{i}.name", str, _RESPONSES)
            arguments = _arguments_text(item.get("arguments"))
            calls.append(ToolCall(str(item.get("call_id") or ""), name, arguments))
    status = data.get("status")
    stop = (data.get("incomplete_details") or {}).get("reason") if status == "incomplete" else status
    return "".join(texts), calls, stop


def _parse_anthropic(data: dict[str, Any]) -> tuple[str, list[ToolCall], str | None]:
    texts: list[str] = []
    calls = []
    for i, block in enumerate(_get(data, "content", list, _ANTHROPIC)):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(_get(data, f"content.{i}.text", str, _ANTHROPIC))
        elif kind == "tool_use":
            name = _get(data, f"content.{i}.name", str, _ANTHROPIC)
            calls.append(ToolCall(str(block.get("id") or ""), name, _arguments_text(block.get("input"))))
    return "".join(texts), calls, data.get("stop_reason")


def _parse_gemini(data: dict[str, Any]) -> tuple[str, list[ToolCall], str | None]:
    if not data.get("candidates") and isinstance(data.get("promptFeedback"), dict):
        return "", [], data["promptFeedback"].get("blockReason")
    candidate = _get(data, "candidates.0", dict, _GEMINI)
    texts: list[str] = []
    calls = []
    for i, part in enumerate((candidate.get("content") or {}).get("parts") or ()):
        if not isinstance(part, dict) or part.get("thought"):
            continue
        if "text" in part:
            texts.append(str(part["text"]))
        elif "functionCall" in part:
            name = _get(data, f"candidates.0.content.parts.{i}.functionCall.name", str, _GEMINI)
            call_id = part["functionCall"].get("id") or f"{name}:{len(calls)}"
            calls.append(ToolCall(str(call_id), name, _arguments_text(part["functionCall"].get("args"))))
    return "".join(texts), calls, candidate.get("finishReason")


def _parse_bedrock(data: dict[str, Any]) -> tuple[str, list[ToolCall], str | None]:
    texts: list[str] = []
    calls = []
    for i, block in enumerate(_get(data, "output.message.content", list, _BEDROCK)):
        if not isinstance(block, dict):
            continue
        if "text" in block:
            texts.append(str(block["text"]))
        elif "toolUse" in block:
            use = _get(data, f"output.message.content.{i}.toolUse", dict, _BEDROCK)
            name = _get(data, f"output.message.content.{i}.toolUse.name", str, _BEDROCK)
            calls.append(ToolCall(str(use.get("toolUseId") or ""), name, _arguments_text(use.get("input"))))
    return "".join(texts), calls, data.get("stopReason")


_PARSERS = {
    _CHAT: _parse_chat,
    _RESPONSES: _parse_responses,
    _ANTHROPIC: _parse_anthropic,
    _GEMINI: _parse_gemini,
    _BEDROCK: _parse_bedrock,
}


def parse_response(fmt: WireFormat | str, data: dict[str, Any]) -> ParsedResponse:
    """Parse a provider's success JSON into an assistant message, stop reason and usage.

    ``truncated`` is True for the stop reasons of SPEC §2.6. A body that is not
    a success response raises ``ValueError`` naming the missing field.
    """
    fmt = _fmt(fmt)
    if not isinstance(data, dict):
        raise ValueError(f"malformed {fmt} response: expected a JSON object, got {type(data).__name__}")
    if "error" in data and isinstance(data["error"], dict | str):
        raise ValueError(f"{fmt} response is an error, not a success response: {data['error']!r}")
    text, calls, stop = _PARSERS[fmt](data)
    usage = Usage(*(_int(data, path) for path in USAGE_FIELDS[fmt]))
    stop = stop if isinstance(stop, str) else None
    return ParsedResponse(
        Message.assistant(text, tool_calls=calls), stop, stop in TRUNCATION_STOP_REASONS, usage
    )
