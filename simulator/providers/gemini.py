"""Mock Gemini ``generateContent`` API, with Google's real error texts.

The model comes from the URL path (``/models/{model}:generateContent``), not the
body; a ``function`` role counts as ``user``, and a function-response turn must
answer every call of the turn before it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from simulator.providers.wire import Invalid, ReplyParts, Tally, Wire, image_of, json_response

__all__ = ["GeminiWire"]

# -- real error texts ---------------------------------------------------------

GEMINI_INVALID_JSON = "Invalid JSON payload received. Unexpected token.\n%s\n^"
GEMINI_NO_CONTENTS = "* GenerateContentRequest.contents: contents is not specified\n"
GEMINI_EMPTY_PARTS = "* GenerateContentRequest.contents[%d].parts: contents.parts must not be empty.\n"
GEMINI_INVALID_ROLE = "Please use a valid role: user, model."
GEMINI_FIRST_USER = "First content should be with role 'user', got %s"
GEMINI_ALTERNATE = "Please ensure that multiturn requests alternate between user and model."
GEMINI_RESPONSE_ORDER = (
    "Please ensure that function response turn comes immediately after a function call turn."
)
GEMINI_RESPONSE_COUNT = (
    "Please ensure that the number of function response parts is equal to the number of function call "
    "parts of the function call turn."
)
GEMINI_LAST_TURN = "Please ensure that multiturn requests ends with a user role or a function response."
GEMINI_TOKEN_COUNT = "The input token count (%d) exceeds the maximum number of tokens allowed (%d)."
GEMINI_MAX_OUTPUT_TOO_LARGE = (
    "Unable to submit request because it has a maxOutputTokens value of %d but the supported range is "
    "from 1 (inclusive) to %d (exclusive). Update the value and try again."
)
GEMINI_RATE_LIMIT = "Resource has been exhausted (e.g. check quota)."


class GeminiWire(Wire):
    fmt = "gemini"
    tool_id_prefix = ""

    def model(self, body: Mapping[str, Any], path_model: str | None) -> str:
        return path_model or ""

    def max_tokens(self, body: Mapping[str, Any]) -> tuple[str, int | None]:
        value = (body.get("generationConfig") or {}).get("maxOutputTokens")
        return "maxOutputTokens", None if value is None else int(value)

    def analyse(self, body: Mapping[str, Any], tally: Tally) -> None:
        contents = body.get("contents")
        if not contents:
            raise Invalid(GEMINI_NO_CONTENTS)
        tally.message_count = len(contents)
        for part in (body.get("systemInstruction") or {}).get("parts") or []:
            tally.text(part.get("text"))
        previous_role: str | None = None
        previous_calls = 0
        for i, content in enumerate(contents):
            role = content.get("role") or "user"
            role = "user" if role == "function" else role
            if role not in ("user", "model"):
                raise Invalid(GEMINI_INVALID_ROLE)
            parts = content.get("parts") or []
            if not parts:
                raise Invalid(GEMINI_EMPTY_PARTS % i)
            if i == 0 and role != "user":
                raise Invalid(GEMINI_FIRST_USER % role, outcome="malformed_history")
            if role == previous_role:
                raise Invalid(GEMINI_ALTERNATE, outcome="malformed_history")
            calls = sum(1 for p in parts if "functionCall" in p)
            responses = sum(1 for p in parts if "functionResponse" in p)
            if responses and not previous_calls:
                raise Invalid(GEMINI_RESPONSE_ORDER, outcome="malformed_history")
            if previous_calls and responses != previous_calls:
                raise Invalid(GEMINI_RESPONSE_COUNT, outcome="malformed_history")
            for part in parts:
                if "inlineData" in part or "fileData" in part:
                    inline, file = part.get("inlineData") or {}, part.get("fileData") or {}
                    kind = inline.get("mimeType") or file.get("mimeType")
                    tally.image(image_of(inline.get("data"), url=file.get("fileUri"), media_type=kind))
                elif "functionCall" in part:
                    tally.text(part["functionCall"].get("name"))
                    tally.json(part["functionCall"].get("args") or {})
                elif "functionResponse" in part:
                    tally.text(part["functionResponse"].get("name"))
                    tally.json(part["functionResponse"].get("response") or {})
                else:
                    tally.text(part.get("text"))
            previous_role, previous_calls = role, calls
        if previous_role == "model":
            raise Invalid(GEMINI_LAST_TURN, outcome="malformed_history")
        if body.get("tools"):
            tally.json(body["tools"])

    def error(
        self, message: str, *, status: int = 400, param: str | None = None, code: str | None = None
    ) -> httpx.Response:
        status_name = {429: "RESOURCE_EXHAUSTED", 404: "NOT_FOUND"}.get(status, "INVALID_ARGUMENT")
        return json_response(status, {"error": {"code": status, "message": message, "status": status_name}})

    def invalid_json(self, raw: bytes) -> httpx.Response:
        return self.error(GEMINI_INVALID_JSON % raw[:64].decode("utf-8", "replace"))

    def overflow(self, input_tokens: int, window: int, max_tokens: int | None) -> httpx.Response | None:
        return self.error(GEMINI_TOKEN_COUNT % (input_tokens, window)) if input_tokens > window else None

    def output_cap(self, param: str, requested: int, cap: int, model: str) -> httpx.Response:
        return self.error(GEMINI_MAX_OUTPUT_TOO_LARGE % (requested, cap + 1))

    def rate_limited(self, model: str, retry_after: int, input_tokens: int) -> httpx.Response:
        response = self.error(GEMINI_RATE_LIMIT, status=429)
        response.headers["retry-after"] = str(retry_after)
        return response

    def reply_payload(self, parts: ReplyParts) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"text": parts.text}] if parts.text else []
        content += [
            {"functionCall": {"name": c.name, "args": json.loads(c.arguments or "{}")}}
            for c in parts.tool_calls
        ]
        usage = parts.usage
        return {
            "candidates": [
                {
                    "content": {"parts": content, "role": "model"},
                    "finishReason": "MAX_TOKENS" if parts.truncated else "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": usage.input_tokens,
                "candidatesTokenCount": usage.output_tokens,
                "totalTokenCount": usage.input_tokens + usage.output_tokens,
            },
            "modelVersion": parts.model,
            "responseId": parts.response_id,
        }
