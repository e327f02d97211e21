"""What one message renders to on the wire, and the request envelope (SPEC §1.4).

Private helpers shared by :mod:`ctxrecover.wire.render` (whole request bodies) and
:mod:`ctxrecover.wire.size` (per-message fragments and their sizes): the
blocks and items a message contributes in each format, the system field
value, and :func:`_envelope`, the top-level body around the history.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ctxrecover.errors import ConfigError
from ctxrecover.messages import Image, Message, ToolCall
from ctxrecover.wire.formats import (
    _ANTHROPIC,
    _BEDROCK,
    _CHAT,
    _GEMINI,
    _RESPONSES,
    DEFAULT_ANTHROPIC_MAX_TOKENS,
    HISTORY_KEYS,
    MAX_TOKENS_FIELDS,
    RAW_ARGUMENTS_KEY,
    SYSTEM_KEYS,
    SYSTEM_TEXT_SEPARATOR,
    WireFormat,
)

__all__: list[str] = []


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
        url: dict[str, str] = {"url": _data_url(image)}
        if image.detail is not None:
            url["detail"] = image.detail
        return {"type": "image_url", "image_url": url}
    if fmt is _RESPONSES:
        block = {"type": "input_image", "image_url": _data_url(image)}
        if image.detail is not None:
            block["detail"] = image.detail
        return block
    if fmt is _ANTHROPIC:
        source: dict[str, str | None]
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
