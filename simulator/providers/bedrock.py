"""Mock Bedrock Converse API (``POST /model/{modelId}/converse``), with AWS's real error texts.

The model id comes URL-encoded in the path; errors carry their type in the
``x-amzn-errortype`` header with a bare ``{"message"}`` body, and ``cachePoint``
blocks mark prompt-cache breakpoints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

import httpx

from simulator.providers.wire import Invalid, ReplyParts, Tally, Wire, image_of, json_response

__all__ = ["BedrockConverseWire"]

# -- real error texts ---------------------------------------------------------

BEDROCK_VALIDATION = "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/"
BEDROCK_THROTTLING = "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"
BEDROCK_SERIALIZATION = "SerializationException:http://internal.amazon.com/coral/com.amazon.coral.service/"
BEDROCK_INVALID_JSON = "Unable to parse request body"
BEDROCK_NULL_MESSAGES = (
    "1 validation error detected: Value null at 'messages' failed to satisfy constraint: "
    "Member must not be null"
)
BEDROCK_INVALID_ROLE = (
    "1 validation error detected: Value '%s' at 'messages.%d.member.role' failed to satisfy constraint: "
    "Member must satisfy enum value set: [user, assistant]"
)
BEDROCK_FIRST_USER = (
    "A conversation must start with a user message. Try again with a conversation that starts with a "
    "user message."
)
BEDROCK_ALTERNATE = (
    "A conversation must alternate between user and assistant roles. Make sure the conversation "
    "alternates between user and assistant roles and try again."
)
BEDROCK_EMPTY_CONTENT = (
    "The content field in the Message object at messages.%d is empty. Add a ContentBlock object to the "
    "content field and try again."
)
BEDROCK_EXPECTED_RESULTS = "Expected toolResult blocks at messages.%d.content for the following Ids: %s"
BEDROCK_TOO_MANY_RESULTS = (
    "The number of toolResult blocks at messages.%d.content exceeds the number of toolUse blocks of "
    "previous turn."
)
BEDROCK_TOO_LONG = "Input is too long for requested model."
BEDROCK_MAX_TOKENS_TOO_LARGE = (
    "The maximum tokens you requested exceeds the model limit of %d. Try again with a maximum tokens "
    "value that is lower than %d."
)
BEDROCK_RATE_LIMIT = "Too many tokens, please wait before trying again."


class BedrockConverseWire(Wire):
    fmt = "bedrock-converse"
    tool_id_prefix = "tooluse_"

    def model(self, body: Mapping[str, Any], path_model: str | None) -> str:
        return unquote(path_model or "")

    def max_tokens(self, body: Mapping[str, Any]) -> tuple[str, int | None]:
        value = (body.get("inferenceConfig") or {}).get("maxTokens")
        return "maxTokens", None if value is None else int(value)

    def analyse(self, body: Mapping[str, Any], tally: Tally) -> None:
        messages = body.get("messages")
        if messages is None:
            raise Invalid(BEDROCK_NULL_MESSAGES)
        if not messages:
            raise Invalid(BEDROCK_FIRST_USER, outcome="malformed_history")
        tally.message_count = len(messages)
        for block in body.get("system") or []:
            tally.text(block.get("text"))
            tally.block(block, breakpoint_after="cachePoint" in block)
        pending: list[str] = []
        previous_role = None
        for i, message in enumerate(messages):
            role = message.get("role")
            if role not in ("user", "assistant"):
                raise Invalid(BEDROCK_INVALID_ROLE % (role, i + 1))
            blocks = message.get("content") or []
            if not blocks:
                raise Invalid(BEDROCK_EMPTY_CONTENT % i, outcome="malformed_history")
            if i == 0 and role != "user":
                raise Invalid(BEDROCK_FIRST_USER, outcome="malformed_history")
            if role == previous_role:
                raise Invalid(BEDROCK_ALTERNATE, outcome="malformed_history")
            if role == "user":
                results = [str(b["toolResult"].get("toolUseId")) for b in blocks if "toolResult" in b]
                if len(results) > len(pending):
                    raise Invalid(BEDROCK_TOO_MANY_RESULTS % i, outcome="malformed_history")
                missing = [tid for tid in pending if tid not in results]
                if missing:
                    raise Invalid(
                        BEDROCK_EXPECTED_RESULTS % (i, ", ".join(missing)), outcome="malformed_history"
                    )
                pending = []
            else:
                pending = [str(b["toolUse"].get("toolUseId")) for b in blocks if "toolUse" in b]
            for block in blocks:
                self._tally_block(block, tally)
                tally.block(block, breakpoint_after="cachePoint" in block)
            previous_role = role
        if pending:
            raise Invalid(
                BEDROCK_EXPECTED_RESULTS % (len(messages), ", ".join(pending)), outcome="malformed_history"
            )
        if body.get("toolConfig"):
            tally.json(body["toolConfig"])

    def _tally_block(self, block: Mapping[str, Any], tally: Tally) -> None:
        if "image" in block or "document" in block:
            image = block.get("image") or {}
            source = image.get("source") or {}
            media_type = f"image/{image['format']}" if isinstance(image.get("format"), str) else None
            url = (source.get("s3Location") or {}).get("uri")
            tally.image(image_of(source.get("bytes"), url=url, media_type=media_type))
        elif "toolUse" in block:
            tally.text(block["toolUse"].get("name"))
            tally.json(block["toolUse"].get("input") or {})
        elif "toolResult" in block:
            for inner in block["toolResult"].get("content") or []:
                self._tally_block(inner, tally)
        elif "json" in block:
            tally.json(block["json"])
        else:
            tally.text(block.get("text"))

    def error(
        self, message: str, *, status: int = 400, param: str | None = None, code: str | None = None
    ) -> httpx.Response:
        error_type = code or (BEDROCK_THROTTLING if status == 429 else BEDROCK_VALIDATION)
        return json_response(
            status,
            {"message": message},
            {
                "x-amzn-errortype": error_type,
                "x-amzn-requestid": "00000000-0000-4000-8000-000000000000",
            },
        )

    def invalid_json(self, raw: bytes) -> httpx.Response:
        return self.error(BEDROCK_INVALID_JSON, code=BEDROCK_SERIALIZATION)

    def overflow(self, input_tokens: int, window: int, max_tokens: int | None) -> httpx.Response | None:
        return self.error(BEDROCK_TOO_LONG) if input_tokens > window else None

    def output_cap(self, param: str, requested: int, cap: int, model: str) -> httpx.Response:
        return self.error(BEDROCK_MAX_TOKENS_TOO_LARGE % (cap, cap))

    def rate_limited(self, model: str, retry_after: int, input_tokens: int) -> httpx.Response:
        return self.error(BEDROCK_RATE_LIMIT, status=429)

    def reply_payload(self, parts: ReplyParts) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"text": parts.text}] if parts.text else []
        content += [
            {"toolUse": {"toolUseId": c.id, "name": c.name, "input": json.loads(c.arguments or "{}")}}
            for c in parts.tool_calls
        ]
        stop = "max_tokens" if parts.truncated else "tool_use" if parts.tool_calls else "end_turn"
        usage = parts.usage
        return {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": stop,
            "usage": {
                "inputTokens": usage.input_tokens,
                "outputTokens": usage.output_tokens,
                "totalTokens": usage.input_tokens + usage.output_tokens,
                "cacheReadInputTokens": usage.cache_read_tokens,
                "cacheWriteInputTokens": usage.cache_write_tokens,
            },
            "metrics": {"latencyMs": 100},
        }

    def reply_headers(self, parts: ReplyParts) -> dict[str, str]:
        return {"x-amzn-requestid": parts.response_id}
