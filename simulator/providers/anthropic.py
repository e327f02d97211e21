"""Mock Anthropic Messages API (``POST /v1/messages``), with Anthropic's real error texts.

Strict like the real API: roles alternate starting with ``user``, every
``tool_use`` is answered by a ``tool_result`` in the next message, and
``cache_control`` marks prompt-cache breakpoints (tools, system, then messages).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from simulator.providers.wire import Invalid, ReplyParts, Tally, Wire, content_blocks, image_of, json_response

__all__ = ["AnthropicWire"]

# -- real error texts ---------------------------------------------------------

ANTHROPIC_INVALID_JSON = "There was an issue with your request body: invalid JSON"
ANTHROPIC_FIELD_REQUIRED = "%s: Field required"
ANTHROPIC_NO_MESSAGES = "messages: at least one message is required"
ANTHROPIC_SYSTEM_ROLE = (
    'messages: Unexpected role "system". The Messages API accepts a top-level `system` parameter, '
    'not "system" as an input message role.'
)
ANTHROPIC_INVALID_ROLE = "messages.%d.role: Input should be 'user' or 'assistant'"
ANTHROPIC_FIRST_USER = 'messages: first message must use the "user" role'
ANTHROPIC_ALTERNATE = (
    'messages: roles must alternate between "user" and "assistant", but found multiple "%s" roles in a row'
)
ANTHROPIC_EMPTY_CONTENT = (
    "messages.%d: all messages must have non-empty content except for the optional final assistant message"
)
ANTHROPIC_TOOL_USE_WITHOUT_RESULT = (
    "messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. "
    "Each `tool_use` block must have a corresponding `tool_result` block in the next message."
)
ANTHROPIC_UNEXPECTED_RESULT = (
    "messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. "
    "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
)
ANTHROPIC_PROMPT_TOO_LONG = "prompt is too long: %d tokens > %d maximum"
ANTHROPIC_INPUT_AND_MAX_TOKENS = (
    "input length and `max_tokens` exceed context limit: %d + %d > %d, decrease input length or "
    "`max_tokens` and try again"
)
ANTHROPIC_MAX_TOKENS_TOO_LARGE = (
    "max_tokens: %d > %d, which is the maximum allowed number of output tokens for %s"
)
ANTHROPIC_RATE_LIMIT = (
    "Number of request tokens has exceeded your per-minute rate limit "
    "(https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage. "
    "Please reduce the prompt length or the maximum tokens requested, or try again later. You may also "
    "contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit "
    "increase."
)


class AnthropicWire(Wire):
    fmt = "anthropic"
    tool_id_prefix = "toolu_01"

    def max_tokens(self, body: Mapping[str, Any]) -> tuple[str, int | None]:
        value = body.get("max_tokens")
        return "max_tokens", None if value is None else int(value)

    def analyse(self, body: Mapping[str, Any], tally: Tally) -> None:
        for name in ("model", "max_tokens", "messages"):
            if body.get(name) is None:
                raise Invalid(ANTHROPIC_FIELD_REQUIRED % name)
        messages = body["messages"]
        if not messages:
            raise Invalid(ANTHROPIC_NO_MESSAGES)
        tally.message_count = len(messages)
        for tool in body.get("tools") or []:
            tally.json(tool)
            tally.block(tool, breakpoint_after="cache_control" in tool)
        for block in content_blocks(body.get("system")):
            tally.text(block.get("text"))
            tally.block(block, breakpoint_after="cache_control" in block)
        pending: list[str] = []
        previous_role = None
        for i, message in enumerate(messages):
            role = message.get("role")
            if role == "system":
                raise Invalid(ANTHROPIC_SYSTEM_ROLE)
            if role not in ("user", "assistant"):
                raise Invalid(ANTHROPIC_INVALID_ROLE % i)
            if i == 0 and role != "user":
                raise Invalid(ANTHROPIC_FIRST_USER, outcome="malformed_history")
            if role == previous_role:
                raise Invalid(ANTHROPIC_ALTERNATE % role, outcome="malformed_history")
            blocks = content_blocks(message.get("content"))
            if not blocks and not (role == "assistant" and i == len(messages) - 1):
                raise Invalid(ANTHROPIC_EMPTY_CONTENT % i, outcome="malformed_history")
            if role == "user":
                results = [
                    (j, b.get("tool_use_id")) for j, b in enumerate(blocks) if b.get("type") == "tool_result"
                ]
                unexpected = [(j, tid) for j, tid in results if tid not in pending]
                if unexpected:
                    ids = ", ".join(str(tid) for _, tid in unexpected)
                    raise Invalid(
                        ANTHROPIC_UNEXPECTED_RESULT % (i, unexpected[0][0], ids), outcome="malformed_history"
                    )
                missing = [tid for tid in pending if tid not in {r for _, r in results}]
                if missing:
                    raise Invalid(
                        ANTHROPIC_TOOL_USE_WITHOUT_RESULT % (i - 1, ", ".join(missing)),
                        outcome="malformed_history",
                    )
                pending = []
            else:
                pending = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
            for block in blocks:
                self._tally_block(block, tally)
                tally.block(block, breakpoint_after="cache_control" in block)
            previous_role = role
        if pending:
            raise Invalid(
                ANTHROPIC_TOOL_USE_WITHOUT_RESULT % (len(messages) - 1, ", ".join(pending)),
                outcome="malformed_history",
            )

    def _tally_block(self, block: Mapping[str, Any], tally: Tally) -> None:
        kind = block.get("type")
        if kind == "image":
            source = block.get("source") or {}
            tally.image(
                image_of(source.get("data"), url=source.get("url"), media_type=source.get("media_type"))
            )
        elif kind == "tool_use":
            tally.text(block.get("name"))
            tally.json(block.get("input") or {})
        elif kind == "tool_result":
            for inner in content_blocks(block.get("content")):
                self._tally_block(inner, tally)
        else:
            tally.text(block.get("text") or block.get("thinking"))

    def error(
        self, message: str, *, status: int = 400, param: str | None = None, code: str | None = None
    ) -> httpx.Response:
        error_type = {429: "rate_limit_error", 404: "not_found_error"}.get(status, "invalid_request_error")
        return json_response(status, {"type": "error", "error": {"type": error_type, "message": message}})

    def invalid_json(self, raw: bytes) -> httpx.Response:
        return self.error(ANTHROPIC_INVALID_JSON)

    def overflow(self, input_tokens: int, window: int, max_tokens: int | None) -> httpx.Response | None:
        if input_tokens > window:
            return self.error(ANTHROPIC_PROMPT_TOO_LONG % (input_tokens, window))
        if max_tokens is not None and input_tokens + max_tokens > window:
            return self.error(ANTHROPIC_INPUT_AND_MAX_TOKENS % (input_tokens, max_tokens, window))
        return None

    def output_cap(self, param: str, requested: int, cap: int, model: str) -> httpx.Response:
        return self.error(ANTHROPIC_MAX_TOKENS_TOO_LARGE % (requested, cap, model))

    def rate_limited(self, model: str, retry_after: int, input_tokens: int) -> httpx.Response:
        response = self.error(ANTHROPIC_RATE_LIMIT, status=429)
        response.headers.update(
            {"retry-after": str(retry_after), "anthropic-ratelimit-input-tokens-remaining": "0"}
        )
        return response

    def reply_payload(self, parts: ReplyParts) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": parts.text}] if parts.text else []
        content += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments or "{}")}
            for c in parts.tool_calls
        ]
        stop = "max_tokens" if parts.truncated else "tool_use" if parts.tool_calls else "end_turn"
        usage = parts.usage
        return {
            "id": parts.response_id,
            "type": "message",
            "role": "assistant",
            "model": parts.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": usage.input_tokens,
                "cache_creation_input_tokens": usage.cache_write_tokens,
                "cache_read_input_tokens": usage.cache_read_tokens,
                "output_tokens": usage.output_tokens,
            },
        }
