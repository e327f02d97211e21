"""Mock OpenAI wire formats: Chat Completions and Responses, with OpenAI's real error texts.

Both answer errors in OpenAI's ``{"error": {message, type, param, code}}`` shape
and count the requested output (``max_tokens``) against the window; only the
Chat Completions overflow text states the numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import is_
from typing import Any

import httpx

from simulator.providers.wire import Invalid, ReplyParts, Tally, Wire, content_blocks, image_of, json_response

__all__ = ["SYSTEM_FINGERPRINT", "OpenAIChatWire", "OpenAIResponsesWire"]

CREATED_EPOCH = 1_700_000_000  # deterministic "created" timestamps: epoch + call number
SYSTEM_FINGERPRINT = "fp_ctxsim"  # every chat.completion and chunk carries the backend's fingerprint

# -- real error texts ---------------------------------------------------------

OPENAI_INVALID_JSON = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your "
    "HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. "
    "If you have trouble figuring out how to fix this, please contact us through our help center at "
    "help.openai.com.)"
)
OPENAI_MISSING_MODEL = "you must provide a model parameter"
OPENAI_MISSING_PARAMETER = "Missing required parameter: '%s'."
OPENAI_EMPTY_ARRAY = (
    "Invalid '%s': empty array. Expected an array with minimum length 1, but got an empty array instead."
)
OPENAI_INVALID_ROLE = (
    "Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', "
    "and 'developer'."
)
OPENAI_TOOL_WITHOUT_CALL = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
    "'tool_calls'."
)
OPENAI_MISSING_TOOL_RESPONSES = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
    "'tool_call_id'. The following tool_call_ids did not have response messages: %s"
)
OPENAI_CONTEXT_LENGTH = (
    "This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. "
    "Please reduce the length of the messages."
)
OPENAI_CONTEXT_LENGTH_WITH_COMPLETION = (
    "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the "
    "messages, %d in the completion). Please reduce the length of the messages or completion."
)
OPENAI_MAX_TOKENS_TOO_LARGE = (
    "max_tokens is too large: %d. This model supports at most %d completion tokens, whereas you provided %d."
)
OPENAI_RATE_LIMIT = (
    "Rate limit reached for %s in organization org-ctxsim on tokens per min (TPM): Limit 30000, "
    "Used 30000, Requested %d. Please try again in %ds. "
    "Visit https://platform.openai.com/account/rate-limits to learn more."
)
RESPONSES_CONTEXT_WINDOW = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)
RESPONSES_INVALID_ROLE = (
    "Invalid value: '%s'. Supported values are: 'assistant', 'system', 'developer', and 'user'."
)
RESPONSES_INVALID_TYPE = "Invalid value: '%s'."
RESPONSES_ORPHAN_OUTPUT = "No tool call found for function call output with call_id %s."
RESPONSES_MISSING_OUTPUT = "No tool output found for function call %s."
RESPONSES_MAX_OUTPUT_TOO_LARGE = (
    "Invalid 'max_output_tokens': integer above maximum value. Expected a value <= %d, but got %d instead."
)


class _OpenAIErrors(Wire):
    def error(
        self, message: str, *, status: int = 400, param: str | None = None, code: str | None = None
    ) -> httpx.Response:
        return json_response(
            status,
            {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}},
        )

    def invalid_json(self, raw: bytes) -> httpx.Response:
        return self.error(OPENAI_INVALID_JSON)

    def rate_limited(self, model: str, retry_after: int, input_tokens: int) -> httpx.Response:
        payload = {
            "error": {
                "message": OPENAI_RATE_LIMIT % (model or "gpt-4o", input_tokens, retry_after),
                "type": "tokens",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        }
        return json_response(
            429,
            payload,
            {
                "retry-after": str(retry_after),
                "x-ratelimit-limit-tokens": "30000",
                "x-ratelimit-remaining-tokens": "0",
            },
        )


def _shared_prefix(messages: list[Any], previous: list[Any]) -> int:
    """How many of the first ``messages`` are the very objects of ``previous`` (identity, not equality)."""
    count = min(len(messages), len(previous))
    if all(map(is_, messages[:count], previous[:count])):
        return count
    return next(i for i, (new, old) in enumerate(zip(messages, previous, strict=False)) if new is not old)


def _count_content(content: object, tally: Tally) -> None:
    """Count one chat message's content: a string, or parts (text and ``image_url``)."""
    if isinstance(content, str):  # the common case, without building a text block
        tally.counter.add(content)
        return
    for part in content_blocks(content):
        if isinstance(part, dict) and part.get("type") == "image_url":
            url = part.get("image_url")
            url = url if isinstance(url, dict) else {"url": url}
            tally.image(image_of(url=url.get("url"), detail=url.get("detail")))
        elif isinstance(part, dict):
            tally.text(part.get("text"))


# The walk's state after a message: chars, excess tokens, image tokens, pending call ids, their owner.
_WalkState = tuple[int, float, int, tuple[str, ...], int]


def _walk(messages: Any, tally: Tally, walked: list[Any], states: list[_WalkState]) -> tuple[list[str], int]:
    """Validate and count chat ``messages`` from ``len(walked)`` on, after the state ``states`` ends with;
    each message walked and the state after it are appended. Returns the call ids still unanswered and the
    position of the assistant that made them."""
    pending: list[str] = []  # call ids of the owning assistant still waiting for a tool message
    owner = -1
    if states:
        tally.counter.chars, tally.counter.excess, tally.image_tokens, resumed, owner = states[-1]
        pending = list(resumed)
    for i in range(len(walked), len(messages)):
        message = messages[i]
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool", "function"):
            raise Invalid(OPENAI_INVALID_ROLE % role, param=f"messages.[{i}].role", code="invalid_value")
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                raise Invalid(
                    OPENAI_TOOL_WITHOUT_CALL, outcome="malformed_history", param=f"messages.[{i}].role"
                )
            pending.remove(message["tool_call_id"])
        else:
            if pending:
                raise Invalid(
                    OPENAI_MISSING_TOOL_RESPONSES % ", ".join(pending),
                    outcome="malformed_history",
                    param=f"messages.[{i}].role",
                )
            calls = (message.get("tool_calls") or []) if role == "assistant" else []
            pending = [str(call.get("id")) for call in calls]
            owner = i
            for call in calls:
                function = call.get("function") or {}
                tally.text(function.get("name"))
                tally.text(function.get("arguments"))
        _count_content(message.get("content"), tally)
        walked.append(message)
        states.append((tally.counter.chars, tally.counter.excess, tally.image_tokens, tuple(pending), owner))
    return pending, owner


class OpenAIChatWire(_OpenAIErrors):
    fmt = "openai-chat"

    def max_tokens(self, body: Mapping[str, Any]) -> tuple[str, int | None]:
        for name in ("max_completion_tokens", "max_tokens"):
            if body.get(name) is not None:
                return name, int(body[name])
        return "max_tokens", None

    def __init__(self) -> None:
        # The messages last analysed and the walk's state after each one, replaced whole: the wire of a
        # format is shared by every provider of the process, whose requests may be analysed in parallel
        # threads. A body that starts with the first k of those very message objects (the mock's
        # PrefixDecoder reuses an unchanged prefix) resumes the walk after the k-th.
        self._walked: tuple[list[Any], list[_WalkState]] = ([], [])

    def analyse(self, body: Mapping[str, Any], tally: Tally) -> None:
        if not body.get("model"):
            raise Invalid(OPENAI_MISSING_MODEL)
        messages = body.get("messages")
        if messages is None:
            raise Invalid(
                OPENAI_MISSING_PARAMETER % "messages", param="messages", code="missing_required_parameter"
            )
        if not messages:
            raise Invalid(OPENAI_EMPTY_ARRAY % "messages", param="messages", code="empty_array")
        tally.message_count = len(messages)
        if isinstance(messages, list):
            last, states = self._walked
            start = _shared_prefix(messages, last)
            walked, states = last[:start], states[:start]
            try:
                pending, owner = _walk(messages, tally, walked, states)
            finally:  # a walk that stopped at an invalid message is kept up to it
                self._walked = (walked, states)
        else:
            pending, owner = _walk(messages, tally, [], [])
        if pending:
            raise Invalid(
                OPENAI_MISSING_TOOL_RESPONSES % ", ".join(pending),
                outcome="malformed_history",
                param=f"messages.[{owner}].role",
            )
        if body.get("tools"):
            tally.json(body["tools"])

    def overflow(self, input_tokens: int, window: int, max_tokens: int | None) -> httpx.Response | None:
        if input_tokens > window:
            message = OPENAI_CONTEXT_LENGTH % (window, input_tokens)
        elif max_tokens is not None and input_tokens + max_tokens > window:
            message = OPENAI_CONTEXT_LENGTH_WITH_COMPLETION % (
                window,
                input_tokens + max_tokens,
                input_tokens,
                max_tokens,
            )
        else:
            return None
        return self.error(message, param="messages", code="context_length_exceeded")

    def output_cap(self, param: str, requested: int, cap: int, model: str) -> httpx.Response:
        return self.error(
            OPENAI_MAX_TOKENS_TOO_LARGE % (requested, cap, requested), param=param, code="invalid_value"
        )

    def reply_payload(self, parts: ReplyParts) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": parts.text or None, "refusal": None}
        if parts.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in parts.tool_calls
            ]
        finish = "length" if parts.truncated else "tool_calls" if parts.tool_calls else "stop"
        usage = parts.usage
        return {
            "id": parts.response_id,
            "object": "chat.completion",
            "created": CREATED_EPOCH + parts.call_index,
            "model": parts.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": usage.input_tokens,
                "completion_tokens": usage.output_tokens,
                "total_tokens": usage.input_tokens + usage.output_tokens,
                "prompt_tokens_details": {"cached_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
        }


class OpenAIResponsesWire(_OpenAIErrors):
    fmt = "openai-responses"

    def max_tokens(self, body: Mapping[str, Any]) -> tuple[str, int | None]:
        value = body.get("max_output_tokens")
        return "max_output_tokens", None if value is None else int(value)

    def analyse(self, body: Mapping[str, Any], tally: Tally) -> None:
        if not body.get("model"):
            raise Invalid(OPENAI_MISSING_MODEL)
        items = body.get("input")
        if items is None:
            raise Invalid(
                OPENAI_MISSING_PARAMETER % "input", param="input", code="missing_required_parameter"
            )
        tally.text(body.get("instructions"))
        if isinstance(items, str):
            tally.message_count = 1
            tally.text(items)
            items = []
        else:
            tally.message_count = len(items)
        calls: list[str] = []
        answered: set[str] = set()
        for i, item in enumerate(items):
            kind = item.get("type") or ("message" if "role" in item else None)
            if kind == "function_call":
                calls.append(str(item.get("call_id")))
                tally.text(item.get("name"))
                tally.text(item.get("arguments"))
            elif kind == "function_call_output":
                if item.get("call_id") not in calls:
                    raise Invalid(
                        RESPONSES_ORPHAN_OUTPUT % item.get("call_id"),
                        outcome="malformed_history",
                        param="input",
                    )
                answered.add(item["call_id"])
                output = item.get("output")
                tally.text(output) if isinstance(output, str) else tally.json(output)
            elif kind == "message":
                if item.get("role") not in ("user", "assistant", "system", "developer"):
                    raise Invalid(
                        RESPONSES_INVALID_ROLE % item.get("role"),
                        param=f"input[{i}].role",
                        code="invalid_value",
                    )
                for part in content_blocks(item.get("content")):
                    if isinstance(part, dict) and part.get("type") == "input_image":
                        tally.image(image_of(url=part.get("image_url"), detail=part.get("detail")))
                    elif isinstance(part, dict):
                        tally.text(part.get("text"))
            elif kind != "reasoning":
                raise Invalid(RESPONSES_INVALID_TYPE % kind, param=f"input[{i}].type", code="invalid_value")
        missing = [call for call in calls if call not in answered]
        if missing:
            raise Invalid(RESPONSES_MISSING_OUTPUT % missing[0], outcome="malformed_history", param="input")
        if body.get("tools"):
            tally.json(body["tools"])

    def overflow(self, input_tokens: int, window: int, max_tokens: int | None) -> httpx.Response | None:
        if input_tokens + (max_tokens or 0) <= window:
            return None
        return self.error(RESPONSES_CONTEXT_WINDOW, param="input", code="context_length_exceeded")

    def output_cap(self, param: str, requested: int, cap: int, model: str) -> httpx.Response:
        return self.error(
            RESPONSES_MAX_OUTPUT_TOO_LARGE % (cap, requested), param=param, code="integer_above_max_value"
        )

    def reply_payload(self, parts: ReplyParts) -> dict[str, Any]:
        suffix = parts.response_id.removeprefix("resp_")
        output: list[dict[str, Any]] = []
        if parts.text or not parts.tool_calls:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{suffix}",
                    "status": "incomplete" if parts.truncated else "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": parts.text, "annotations": []}],
                }
            )
        for n, call in enumerate(parts.tool_calls):
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{suffix}{n}",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                    "status": "completed",
                }
            )
        usage = parts.usage
        return {
            "id": parts.response_id,
            "object": "response",
            "created_at": CREATED_EPOCH + parts.call_index,
            "status": "incomplete" if parts.truncated else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if parts.truncated else None,
            "model": parts.model,
            "output": output,
            "usage": {
                "input_tokens": usage.input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": usage.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.input_tokens + usage.output_tokens,
            },
        }
