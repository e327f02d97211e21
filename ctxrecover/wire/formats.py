"""Wire formats and their per-format tables (SPEC §1.4).

:class:`WireFormat` names the five dialects; the tables below say where each
one puts the model, the history, the system prompt and the output cap, and
:func:`encode_body` is the one canonical JSON serialisation every request
body goes through. The other modules of :mod:`ctxrecover.wire` build on this one.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from typing import Any

from ctxrecover.errors import ConfigError

__all__ = [
    "DEFAULT_ANTHROPIC_MAX_TOKENS",
    "GROUPED_FORMATS",
    "HISTORY_KEYS",
    "MAX_TOKENS_FIELDS",
    "RAW_ARGUMENTS_KEY",
    "REQUEST_PATHS",
    "SYSTEM_KEYS",
    "SYSTEM_TEXT_SEPARATOR",
    "TURN_CONTENT_KEYS",
    "WIRE_ROLES",
    "WireFormat",
    "encode_body",
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
_LONE_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _fmt(fmt: WireFormat | str) -> WireFormat:
    try:
        return WireFormat(fmt)
    except ValueError:
        valid = ", ".join(f.value for f in WireFormat)
        raise ConfigError(f"unknown wire format {fmt!r}; use one of: {valid}") from None


def encode_body(body: Any) -> bytes:
    """The canonical serialisation of a request body: compact UTF-8 JSON.

    Never raises on text: a lone surrogate (no UTF-8 form) is written as its
    JSON escape (``\\ud800``), so ``json.loads`` gives the very same string
    back. Sessions refuse such text where it enters (``Session.add``), because
    providers reject the escape; this keeps text that arrived another way (a
    provider's answer, a restored state) from crashing the encoder.
    """
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # only inside JSON strings: escaping there keeps the document valid
        return _LONE_SURROGATE_RE.sub(_escape_surrogate, text).encode("utf-8")


def _escape_surrogate(found: re.Match[str]) -> str:
    return f"\\u{ord(found.group()):04x}"
