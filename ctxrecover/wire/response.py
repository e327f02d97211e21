"""Parsing provider success responses into an assistant message, stop reason and usage (SPEC §1.4, §2.6)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ctxrecover.errors import ResponseFormatError
from ctxrecover.messages import Message, ToolCall
from ctxrecover.wire.formats import _ANTHROPIC, _BEDROCK, _CHAT, _GEMINI, _RESPONSES, WireFormat, _fmt

__all__ = [
    "TRUNCATION_STOP_REASONS",
    "USAGE_FIELDS",
    "ParsedResponse",
    "Usage",
    "parse_response",
]

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
            raise ResponseFormatError(f"malformed {fmt} response: field {path!r} is missing", field=path)
    if not isinstance(value, kind):
        raise ResponseFormatError(
            f"malformed {fmt} response: field {path!r} is {type(value).__name__}", field=path
        )
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
    calls: list[ToolCall] = []
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
    a success response raises :class:`~ctxrecover.errors.ResponseFormatError` (a
    ``ValueError``) naming the missing field.
    """
    fmt = _fmt(fmt)
    if not isinstance(data, dict):
        raise ResponseFormatError(
            f"malformed {fmt} response: expected a JSON object, got {type(data).__name__}", field="(body)"
        )
    if "error" in data and isinstance(data["error"], dict | str):
        raise ResponseFormatError(
            f"{fmt} response is an error, not a success response: {data['error']!r}", field="error"
        )
    text, calls, stop = _PARSERS[fmt](data)
    usage = Usage(*(_int(data, path) for path in USAGE_FIELDS[fmt]))
    stop = stop if isinstance(stop, str) else None
    return ParsedResponse(
        Message.assistant(text, tool_calls=calls), stop, stop in TRUNCATION_STOP_REASONS, usage
    )
