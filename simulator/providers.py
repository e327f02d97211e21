"""Mock LLM providers for the five wire formats, strict like the real APIs.

A :class:`MockProvider` is a plain ``handler(request) -> httpx.Response``: plug
it into ``httpx.MockTransport``, a respx side effect or the loopback server. It
parses the real request JSON of its format, validates the history the way the
real API does (tool-call pairing, role order) and answers with that provider's
real status, headers and error body; it rejects prompts over its context window
with the provider's real overflow body; otherwise it answers with the next
scripted reply in the provider's real response format, with usage (Anthropic
and Bedrock prompt-cache fields included), stop reason and ``max_tokens``
truncation. Every call is recorded on ``provider.calls`` (like respx's calls).

==================  ==================================================
format              path (matched as a suffix, so base-URL prefixes work)
==================  ==================================================
``openai-chat``      ``POST /v1/chat/completions``
``openai-responses`` ``POST /v1/responses``
``anthropic``        ``POST /v1/messages``
``gemini``           ``POST /v1beta/models/{model}:generateContent``
``bedrock-converse`` ``POST /model/{modelId}/converse``
==================  ==================================================

Tokens are estimated deterministically: ``ceil(chars / chars_per_token)`` over
every text, tool name, tool argument and tool definition, plus 85 per image.

>>> provider = MockProvider("anthropic", context_window=1000, script=["Hello!"])
>>> client = httpx.Client(transport=httpx.MockTransport(provider))
>>> body = {"model": "claude-sonnet-4", "max_tokens": 64,
...         "messages": [{"role": "user", "content": "hi"}]}
>>> client.post("http://mock/v1/messages", json=body).json()["stop_reason"]
'end_turn'
>>> provider.last_call.outcome
'ok'
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import string
from abc import ABC, abstractmethod
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar
from urllib.parse import unquote

import httpx

from ctxrecover.messages import ToolCall

__all__ = [
    "DEFAULT_PRICE",
    "FORMATS",
    "IMAGE_TOKENS",
    "PRICES",
    "MockProvider",
    "ParsedRequest",
    "Price",
    "ProviderCall",
    "Reply",
    "Script",
    "Usage",
    "cost",
    "estimate_tokens",
    "format_for_path",
    "price_for",
    "rate_limit_response",
]

FORMATS: tuple[str, ...] = ("openai-chat", "openai-responses", "anthropic", "gemini", "bedrock-converse")

# Matched against the end of the raw request path; the named group is the model.
PATH_PATTERNS: Mapping[str, re.Pattern[str]] = MappingProxyType(
    {
        "openai-chat": re.compile(r"/chat/completions$"),
        "openai-responses": re.compile(r"/responses$"),
        "anthropic": re.compile(r"/messages$"),
        "gemini": re.compile(r"/models/(?P<model>[^/]+?):generateContent$"),
        "bedrock-converse": re.compile(r"/model/(?P<model>[^/]+)/converse$"),
    }
)
PATH_HINTS: Mapping[str, str] = MappingProxyType(
    {
        "openai-chat": "POST /v1/chat/completions",
        "openai-responses": "POST /v1/responses",
        "anthropic": "POST /v1/messages",
        "gemini": "POST /v1beta/models/{model}:generateContent",
        "bedrock-converse": "POST /model/{modelId}/converse",
    }
)

IMAGE_TOKENS = 85
ANTHROPIC_MIN_CACHE_TOKENS = 1024  # shorter cache_control prefixes are not cached, as on the real API
CREATED_EPOCH = 1_700_000_000  # deterministic "created" timestamps: epoch + call number
ID_ALPHABET = string.ascii_letters + string.digits
DEFAULT_RETRY_AFTER_S = 20

# -- real error texts, per provider ------------------------------------------

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
GEMINI_INVALID_JSON = 'Invalid JSON payload received. Unexpected token.\n%s\n^'
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
INVALID_SHAPE = "ctxsim MockProvider could not read the request body (%s: %s); check its shape"
NO_STREAMING = "ctxsim MockProvider does not stream; send the request without stream=true"


# -- prices ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens: input, output, cache read and cache write."""

    input: float
    output: float
    cache_read: float
    cache_write: float

    def cost(self, usage: Usage) -> float:
        """The USD cost of ``usage`` at this price."""
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_tokens * self.cache_write
        ) / 1_000_000


# Keyed by model family; a model id matches the longest family it contains
# (Bedrock ids such as "anthropic.claude-3-5-sonnet-20241022-v2:0" included).
PRICES: Mapping[str, Price] = MappingProxyType(
    {
        "gpt-4o": Price(2.50, 10.00, 1.25, 2.50),
        "gpt-4o-mini": Price(0.15, 0.60, 0.075, 0.15),
        "gpt-4.1": Price(2.00, 8.00, 0.50, 2.00),
        "gpt-4.1-mini": Price(0.40, 1.60, 0.10, 0.40),
        "gpt-4.1-nano": Price(0.10, 0.40, 0.025, 0.10),
        "claude-opus-4": Price(15.00, 75.00, 1.50, 18.75),
        "claude-sonnet-4": Price(3.00, 15.00, 0.30, 3.75),
        "claude-3-7-sonnet": Price(3.00, 15.00, 0.30, 3.75),
        "claude-3-5-sonnet": Price(3.00, 15.00, 0.30, 3.75),
        "claude-3-5-haiku": Price(0.80, 4.00, 0.08, 1.00),
        "claude-haiku-4-5": Price(1.00, 5.00, 0.10, 1.25),
        "gemini-2.5-pro": Price(1.25, 10.00, 0.31, 1.25),
        "gemini-2.5-flash": Price(0.30, 2.50, 0.075, 0.30),
        "gemini-2.0-flash": Price(0.10, 0.40, 0.025, 0.10),
        "gemini-1.5-pro": Price(1.25, 5.00, 0.3125, 1.25),
    }
)
DEFAULT_PRICE = Price(3.00, 15.00, 0.30, 3.75)  # unknown models are priced like a mid-tier model


def price_for(model: str, prices: Mapping[str, Price] = PRICES, *, default: Price = DEFAULT_PRICE) -> Price:
    """The price of ``model``: the longest family name it contains, else ``default``."""
    matches = [family for family in prices if family in model]
    return prices[max(matches, key=len)] if matches else default


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one reply, normalised across formats (``model`` prices it)."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    model: str = ""


def cost(usage: Usage, price: Price | None = None) -> float:
    """USD cost of ``usage``; the price defaults to :func:`price_for` ``(usage.model)``."""
    return (price or price_for(usage.model)).cost(usage)


# -- values ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted assistant reply: text and optional tool calls.

    A tool call with an empty ``id`` gets a provider-style id minted from the
    provider's seed; ``arguments`` must be a JSON object.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        for call in self.tool_calls:
            try:
                arguments = json.loads(call.arguments or "{}")
            except json.JSONDecodeError as exc:
                raise ValueError(f"Reply tool call {call.name!r}: arguments are not JSON ({exc})") from exc
            if not isinstance(arguments, dict):
                raise ValueError(f"Reply tool call {call.name!r}: arguments must be a JSON object")


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """What a mock provider understood of one valid request (passed to the script)."""

    format: str
    model: str
    body: Mapping[str, Any]
    message_count: int
    input_tokens: int
    max_tokens: int | None
    call_index: int


@dataclass(frozen=True, slots=True, eq=False)
class ProviderCall:
    """One recorded call: request, response and what the mock made of it.

    ``outcome`` is ``ok``, ``output_truncated``, ``context_overflow``,
    ``malformed_history``, ``invalid_request``, ``rate_limit`` or ``not_found``.
    """

    index: int
    request: httpx.Request
    response: httpx.Response
    request_bytes: int
    model: str
    message_count: int
    input_tokens: int
    max_tokens: int | None
    outcome: str
    usage: Usage | None = None


class _Invalid(Exception):
    """A request the real API would refuse (raised by the format validators)."""

    def __init__(
        self,
        message: str,
        *,
        outcome: str = "invalid_request",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.outcome = outcome
        self.param = param
        self.code = code


@dataclass(slots=True)
class _Tally:
    """Chars and images of a request, plus prompt-cache breakpoints (hash, chars, images)."""

    message_count: int = 0
    chars: int = 0
    images: int = 0
    breakpoints: list[tuple[str, int, int]] = field(default_factory=list)
    _digest: Any = field(default_factory=hashlib.sha256)

    def text(self, value: object) -> None:
        if isinstance(value, str):
            self.chars += len(value)

    def json(self, value: object) -> None:
        self.chars += _json_len(value)

    def block(self, block: object, *, breakpoint_after: bool = False) -> None:
        """Feed one content block to the prompt-cache hash; mark a breakpoint after it."""
        if isinstance(block, dict):
            block = {k: v for k, v in block.items() if k != "cache_control"}
        self._digest.update(json.dumps(block, sort_keys=True, ensure_ascii=False).encode())
        if breakpoint_after:
            self.breakpoints.append((self._digest.copy().hexdigest(), self.chars, self.images))


def _json_len(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def estimate_tokens(chars: int, images: int = 0, *, chars_per_token: float = 4.0) -> int:
    """Deterministic token estimate: ``ceil(chars / chars_per_token) + 85 × images``."""
    return math.ceil(chars / chars_per_token) + IMAGE_TOKENS * images


def format_for_path(path: str) -> str | None:
    """The wire format whose endpoint ``path`` is, or None."""
    path = path.split("?", 1)[0]
    for fmt, pattern in PATH_PATTERNS.items():
        if pattern.search(path):
            return fmt
    return None


def _blocks(content: object) -> list[Any]:
    """Content as a list of blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content) if isinstance(content, list) else []


def _json_response(
    status: int, payload: object, headers: Mapping[str, str] | None = None
) -> httpx.Response:
    body = json.dumps(payload, ensure_ascii=False).encode()
    all_headers = {"content-type": "application/json", **(headers or {})}
    return httpx.Response(status, headers=all_headers, content=body)


# -- wire formats ------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _ReplyParts:
    """A reply ready to render: ids minted, truncation applied, usage known."""

    model: str
    text: str
    tool_calls: tuple[ToolCall, ...]
    truncated: bool
    usage: Usage
    response_id: str
    call_index: int


class _Wire(ABC):
    """How one provider parses, validates, errs and replies."""

    fmt: ClassVar[str]
    tool_id_prefix: ClassVar[str] = "call_"

    def model(self, body: Mapping[str, Any], path_model: str | None) -> str:
        return str(body.get("model") or "")

    @abstractmethod
    def max_tokens(self, body: Mapping[str, Any]) -> tuple[str, int | None]:
        raise NotImplementedError

    @abstractmethod
    def analyse(self, body: Mapping[str, Any], tally: _Tally) -> None:
        raise NotImplementedError

    @abstractmethod
    def error(self, message: str, *, status: int = 400, param: str | None = None,
              code: str | None = None) -> httpx.Response:
        raise NotImplementedError

    @abstractmethod
    def invalid_json(self, raw: bytes) -> httpx.Response:
        raise NotImplementedError

    @abstractmethod
    def overflow(self, input_tokens: int, window: int, max_tokens: int | None) -> httpx.Response | None:
        raise NotImplementedError

    @abstractmethod
    def output_cap(self, param: str, requested: int, cap: int, model: str) -> httpx.Response:
        raise NotImplementedError

    @abstractmethod
    def rate_limited(self, model: str, retry_after: int, input_tokens: int) -> httpx.Response:
        raise NotImplementedError

    @abstractmethod
    def reply(self, parts: _ReplyParts) -> httpx.Response:
        raise NotImplementedError


class _OpenAIErrors(_Wire):
    def error(self, message: str, *, status: int = 400, param: str | None = None,
              code: str | None = None) -> httpx.Response:
        return _json_response(
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
        return _json_response(429, payload, {"retry-after": str(retry_after),
                                             "x-ratelimit-limit-tokens": "30000",
                                             "x-ratelimit-remaining-tokens": "0"})


class _OpenAIChat(_OpenAIErrors):
    fmt = "openai-chat"

    def max_tokens(self, body: Mapping[str, Any]) -> tuple[str, int | None]:
        for name in ("max_completion_tokens", "max_tokens"):
            if body.get(name) is not None:
                return name, int(body[name])
        return "max_tokens", None

    def analyse(self, body: Mapping[str, Any], tally: _Tally) -> None:
        if not body.get("model"):
            raise _Invalid(OPENAI_MISSING_MODEL)
        messages = body.get("messages")
        if messages is None:
            raise _Invalid(OPENAI_MISSING_PARAMETER % "messages", param="messages",
                           code="missing_required_parameter")
        if not messages:
            raise _Invalid(OPENAI_EMPTY_ARRAY % "messages", param="messages", code="empty_array")
        tally.message_count = len(messages)
        pending: list[str] = []  # call ids of the owning assistant still waiting for a tool message
        owner = -1
        for i, message in enumerate(messages):
            role = message.get("role")
            if role not in ("system", "developer", "user", "assistant", "tool", "function"):
                raise _Invalid(OPENAI_INVALID_ROLE % role, param=f"messages.[{i}].role", code="invalid_value")
            if role == "tool":
                if message.get("tool_call_id") not in pending:
                    raise _Invalid(OPENAI_TOOL_WITHOUT_CALL, outcome="malformed_history",
                                   param=f"messages.[{i}].role")
                pending.remove(message["tool_call_id"])
            else:
                if pending:
                    raise _Invalid(OPENAI_MISSING_TOOL_RESPONSES % ", ".join(pending),
                                   outcome="malformed_history", param=f"messages.[{i}].role")
                calls = (message.get("tool_calls") or []) if role == "assistant" else []
                pending = [str(call.get("id")) for call in calls]
                owner = i
                for call in calls:
                    function = call.get("function") or {}
                    tally.text(function.get("name"))
                    tally.text(function.get("arguments"))
            content = message.get("content")
            if isinstance(content, str):  # the common case, without building a text block
                tally.chars += len(content)
                continue
            for part in _blocks(content):
                if isinstance(part, dict) and part.get("type") == "image_url":
                    tally.images += 1
                elif isinstance(part, dict):
                    tally.text(part.get("text"))
        if pending:
            raise _Invalid(OPENAI_MISSING_TOOL_RESPONSES % ", ".join(pending), outcome="malformed_history",
                           param=f"messages.[{owner}].role")
        if body.get("tools"):
            tally.json(body["tools"])

    def overflow(self, input_tokens: int, window: int, max_tokens: int | None) -> httpx.Response | None:
        if input_tokens > window:
            message = OPENAI_CONTEXT_LENGTH % (window, input_tokens)
        elif max_tokens is not None and input_tokens + max_tokens > window:
            message = OPENAI_CONTEXT_LENGTH_WITH_COMPLETION % (
                window, input_tokens + max_tokens, input_tokens, max_tokens)
        else:
            return None
        return self.error(message, param="messages", code="context_length_exceeded")

    def output_cap(self, param: str, requested: int, cap: int, model: str) -> httpx.Response:
        return self.error(OPENAI_MAX_TOKENS_TOO_LARGE % (requested, cap, requested), param=param,
                          code="invalid_value")

    def reply(self, parts: _ReplyParts) -> httpx.Response:
        message: dict[str, Any] = {"role": "assistant", "content": parts.text or None, "refusal": None}
        if parts.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in parts.tool_calls
            ]
        finish = "length" if parts.truncated else "tool_calls" if parts.tool_calls else "stop"
        usage = parts.usage
        return _json_response(200, {
            "id": parts.response_id,
            "object": "chat.completion",
            "created": CREATED_EPOCH + parts.call_index,
            "model": parts.model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": usage.input_tokens,
                "completion_tokens": usage.output_tokens,
                "total_tokens": usage.input_tokens + usage.output_tokens,
                "prompt_tokens_details": {"cached_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
        })


class _OpenAIResponses(_OpenAIErrors):
    fmt = "openai-responses"

    def max_tokens(self, body: Mapping[str, Any]) -> tuple[str, int | None]:
        value = body.get("max_output_tokens")
        return "max_output_tokens", None if value is None else int(value)

    def analyse(self, body: Mapping[str, Any], tally: _Tally) -> None:
        if not body.get("model"):
            raise _Invalid(OPENAI_MISSING_MODEL)
        items = body.get("input")
        if items is None:
            raise _Invalid(OPENAI_MISSING_PARAMETER % "input", param="input",
                           code="missing_required_parameter")
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
                    raise _Invalid(RESPONSES_ORPHAN_OUTPUT % item.get("call_id"), outcome="malformed_history",
                                   param="input")
                answered.add(item["call_id"])
                output = item.get("output")
                tally.text(output) if isinstance(output, str) else tally.json(output)
            elif kind == "message":
                if item.get("role") not in ("user", "assistant", "system", "developer"):
                    raise _Invalid(RESPONSES_INVALID_ROLE % item.get("role"), param=f"input[{i}].role",
                                   code="invalid_value")
                for part in _blocks(item.get("content")):
                    if isinstance(part, dict) and part.get("type") == "input_image":
                        tally.images += 1
                    elif isinstance(part, dict):
                        tally.text(part.get("text"))
            elif kind != "reasoning":
                raise _Invalid(RESPONSES_INVALID_TYPE % kind, param=f"input[{i}].type", code="invalid_value")
        missing = [call for call in calls if call not in answered]
        if missing:
            raise _Invalid(RESPONSES_MISSING_OUTPUT % missing[0], outcome="malformed_history", param="input")
        if body.get("tools"):
            tally.json(body["tools"])

    def overflow(self, input_tokens: int, window: int, max_tokens: int | None) -> httpx.Response | None:
        if input_tokens + (max_tokens or 0) <= window:
            return None
        return self.error(RESPONSES_CONTEXT_WINDOW, param="input", code="context_length_exceeded")

    def output_cap(self, param: str, requested: int, cap: int, model: str) -> httpx.Response:
        return self.error(RESPONSES_MAX_OUTPUT_TOO_LARGE % (cap, requested), param=param,
                          code="integer_above_max_value")

    def reply(self, parts: _ReplyParts) -> httpx.Response:
        suffix = parts.response_id.removeprefix("resp_")
        output: list[dict[str, Any]] = []
        if parts.text or not parts.tool_calls:
            output.append({
                "type": "message", "id": f"msg_{suffix}", "status": "incomplete" if parts.truncated else
                "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": parts.text, "annotations": []}],
            })
        for n, call in enumerate(parts.tool_calls):
            output.append({"type": "function_call", "id": f"fc_{suffix}{n}", "call_id": call.id,
                           "name": call.name, "arguments": call.arguments, "status": "completed"})
        usage = parts.usage
        return _json_response(200, {
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
        })


class _Anthropic(_Wire):
    fmt = "anthropic"
    tool_id_prefix = "toolu_01"

    def max_tokens(self, body: Mapping[str, Any]) -> tuple[str, int | None]:
        value = body.get("max_tokens")
        return "max_tokens", None if value is None else int(value)

    def analyse(self, body: Mapping[str, Any], tally: _Tally) -> None:
        for name in ("model", "max_tokens", "messages"):
            if body.get(name) is None:
                raise _Invalid(ANTHROPIC_FIELD_REQUIRED % name)
        messages = body["messages"]
        if not messages:
            raise _Invalid(ANTHROPIC_NO_MESSAGES)
        tally.message_count = len(messages)
        for tool in body.get("tools") or []:
            tally.json(tool)
            tally.block(tool, breakpoint_after="cache_control" in tool)
        for block in _blocks(body.get("system")):
            tally.text(block.get("text"))
            tally.block(block, breakpoint_after="cache_control" in block)
        pending: list[str] = []
        previous_role = None
        for i, message in enumerate(messages):
            role = message.get("role")
            if role == "system":
                raise _Invalid(ANTHROPIC_SYSTEM_ROLE)
            if role not in ("user", "assistant"):
                raise _Invalid(ANTHROPIC_INVALID_ROLE % i)
            if i == 0 and role != "user":
                raise _Invalid(ANTHROPIC_FIRST_USER, outcome="malformed_history")
            if role == previous_role:
                raise _Invalid(ANTHROPIC_ALTERNATE % role, outcome="malformed_history")
            blocks = _blocks(message.get("content"))
            if not blocks and not (role == "assistant" and i == len(messages) - 1):
                raise _Invalid(ANTHROPIC_EMPTY_CONTENT % i, outcome="malformed_history")
            if role == "user":
                results = [(j, b.get("tool_use_id")) for j, b in enumerate(blocks)
                           if b.get("type") == "tool_result"]
                unexpected = [(j, tid) for j, tid in results if tid not in pending]
                if unexpected:
                    ids = ", ".join(str(tid) for _, tid in unexpected)
                    raise _Invalid(ANTHROPIC_UNEXPECTED_RESULT % (i, unexpected[0][0], ids),
                                   outcome="malformed_history")
                missing = [tid for tid in pending if tid not in {r for _, r in results}]
                if missing:
                    raise _Invalid(ANTHROPIC_TOOL_USE_WITHOUT_RESULT % (i - 1, ", ".join(missing)),
                                   outcome="malformed_history")
                pending = []
            else:
                pending = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
            for block in blocks:
                self._tally_block(block, tally)
                tally.block(block, breakpoint_after="cache_control" in block)
            previous_role = role
        if pending:
            raise _Invalid(ANTHROPIC_TOOL_USE_WITHOUT_RESULT % (len(messages) - 1, ", ".join(pending)),
                           outcome="malformed_history")

    def _tally_block(self, block: Mapping[str, Any], tally: _Tally) -> None:
        kind = block.get("type")
        if kind == "image":
            tally.images += 1
        elif kind == "tool_use":
            tally.text(block.get("name"))
            tally.json(block.get("input") or {})
        elif kind == "tool_result":
            for inner in _blocks(block.get("content")):
                self._tally_block(inner, tally)
        else:
            tally.text(block.get("text") or block.get("thinking"))

    def error(self, message: str, *, status: int = 400, param: str | None = None,
              code: str | None = None) -> httpx.Response:
        error_type = {429: "rate_limit_error", 404: "not_found_error"}.get(status, "invalid_request_error")
        return _json_response(status, {"type": "error", "error": {"type": error_type, "message": message}})

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
        response.headers.update({"retry-after": str(retry_after),
                                 "anthropic-ratelimit-input-tokens-remaining": "0"})
        return response

    def reply(self, parts: _ReplyParts) -> httpx.Response:
        content: list[dict[str, Any]] = [{"type": "text", "text": parts.text}] if parts.text else []
        content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments or "{}")}
                    for c in parts.tool_calls]
        stop = "max_tokens" if parts.truncated else "tool_use" if parts.tool_calls else "end_turn"
        usage = parts.usage
        return _json_response(200, {
            "id": parts.response_id, "type": "message", "role": "assistant", "model": parts.model,
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {
                "input_tokens": usage.input_tokens,
                "cache_creation_input_tokens": usage.cache_write_tokens,
                "cache_read_input_tokens": usage.cache_read_tokens,
                "output_tokens": usage.output_tokens,
            },
        })


class _Gemini(_Wire):
    fmt = "gemini"
    tool_id_prefix = ""

    def model(self, body: Mapping[str, Any], path_model: str | None) -> str:
        return path_model or ""

    def max_tokens(self, body: Mapping[str, Any]) -> tuple[str, int | None]:
        value = (body.get("generationConfig") or {}).get("maxOutputTokens")
        return "maxOutputTokens", None if value is None else int(value)

    def analyse(self, body: Mapping[str, Any], tally: _Tally) -> None:
        contents = body.get("contents")
        if not contents:
            raise _Invalid(GEMINI_NO_CONTENTS)
        tally.message_count = len(contents)
        for part in (body.get("systemInstruction") or {}).get("parts") or []:
            tally.text(part.get("text"))
        previous_role: str | None = None
        previous_calls = 0
        for i, content in enumerate(contents):
            role = content.get("role") or "user"
            role = "user" if role == "function" else role
            if role not in ("user", "model"):
                raise _Invalid(GEMINI_INVALID_ROLE)
            parts = content.get("parts") or []
            if not parts:
                raise _Invalid(GEMINI_EMPTY_PARTS % i)
            if i == 0 and role != "user":
                raise _Invalid(GEMINI_FIRST_USER % role, outcome="malformed_history")
            if role == previous_role:
                raise _Invalid(GEMINI_ALTERNATE, outcome="malformed_history")
            calls = sum(1 for p in parts if "functionCall" in p)
            responses = sum(1 for p in parts if "functionResponse" in p)
            if responses and not previous_calls:
                raise _Invalid(GEMINI_RESPONSE_ORDER, outcome="malformed_history")
            if previous_calls and responses != previous_calls:
                raise _Invalid(GEMINI_RESPONSE_COUNT, outcome="malformed_history")
            for part in parts:
                if "inlineData" in part or "fileData" in part:
                    tally.images += 1
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
            raise _Invalid(GEMINI_LAST_TURN, outcome="malformed_history")
        if body.get("tools"):
            tally.json(body["tools"])

    def error(self, message: str, *, status: int = 400, param: str | None = None,
              code: str | None = None) -> httpx.Response:
        status_name = {429: "RESOURCE_EXHAUSTED", 404: "NOT_FOUND"}.get(status, "INVALID_ARGUMENT")
        return _json_response(status, {"error": {"code": status, "message": message, "status": status_name}})

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

    def reply(self, parts: _ReplyParts) -> httpx.Response:
        content: list[dict[str, Any]] = [{"text": parts.text}] if parts.text else []
        content += [{"functionCall": {"name": c.name, "args": json.loads(c.arguments or "{}")}}
                    for c in parts.tool_calls]
        usage = parts.usage
        return _json_response(200, {
            "candidates": [{
                "content": {"parts": content, "role": "model"},
                "finishReason": "MAX_TOKENS" if parts.truncated else "STOP",
                "index": 0,
            }],
            "usageMetadata": {
                "promptTokenCount": usage.input_tokens,
                "candidatesTokenCount": usage.output_tokens,
                "totalTokenCount": usage.input_tokens + usage.output_tokens,
            },
            "modelVersion": parts.model,
            "responseId": parts.response_id,
        })


class _BedrockConverse(_Wire):
    fmt = "bedrock-converse"
    tool_id_prefix = "tooluse_"

    def model(self, body: Mapping[str, Any], path_model: str | None) -> str:
        return unquote(path_model or "")

    def max_tokens(self, body: Mapping[str, Any]) -> tuple[str, int | None]:
        value = (body.get("inferenceConfig") or {}).get("maxTokens")
        return "maxTokens", None if value is None else int(value)

    def analyse(self, body: Mapping[str, Any], tally: _Tally) -> None:
        messages = body.get("messages")
        if messages is None:
            raise _Invalid(BEDROCK_NULL_MESSAGES)
        if not messages:
            raise _Invalid(BEDROCK_FIRST_USER, outcome="malformed_history")
        tally.message_count = len(messages)
        for block in body.get("system") or []:
            tally.text(block.get("text"))
            tally.block(block, breakpoint_after="cachePoint" in block)
        pending: list[str] = []
        previous_role = None
        for i, message in enumerate(messages):
            role = message.get("role")
            if role not in ("user", "assistant"):
                raise _Invalid(BEDROCK_INVALID_ROLE % (role, i + 1))
            blocks = message.get("content") or []
            if not blocks:
                raise _Invalid(BEDROCK_EMPTY_CONTENT % i, outcome="malformed_history")
            if i == 0 and role != "user":
                raise _Invalid(BEDROCK_FIRST_USER, outcome="malformed_history")
            if role == previous_role:
                raise _Invalid(BEDROCK_ALTERNATE, outcome="malformed_history")
            if role == "user":
                results = [str(b["toolResult"].get("toolUseId")) for b in blocks if "toolResult" in b]
                if len(results) > len(pending):
                    raise _Invalid(BEDROCK_TOO_MANY_RESULTS % i, outcome="malformed_history")
                missing = [tid for tid in pending if tid not in results]
                if missing:
                    raise _Invalid(BEDROCK_EXPECTED_RESULTS % (i, ", ".join(missing)),
                                   outcome="malformed_history")
                pending = []
            else:
                pending = [str(b["toolUse"].get("toolUseId")) for b in blocks if "toolUse" in b]
            for block in blocks:
                self._tally_block(block, tally)
                tally.block(block, breakpoint_after="cachePoint" in block)
            previous_role = role
        if pending:
            raise _Invalid(BEDROCK_EXPECTED_RESULTS % (len(messages), ", ".join(pending)),
                           outcome="malformed_history")
        if body.get("toolConfig"):
            tally.json(body["toolConfig"])

    def _tally_block(self, block: Mapping[str, Any], tally: _Tally) -> None:
        if "image" in block or "document" in block:
            tally.images += 1
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

    def error(self, message: str, *, status: int = 400, param: str | None = None,
              code: str | None = None) -> httpx.Response:
        error_type = code or (BEDROCK_THROTTLING if status == 429 else BEDROCK_VALIDATION)
        return _json_response(status, {"message": message}, {
            "x-amzn-errortype": error_type,
            "x-amzn-requestid": "00000000-0000-4000-8000-000000000000",
        })

    def invalid_json(self, raw: bytes) -> httpx.Response:
        return self.error(BEDROCK_INVALID_JSON, code=BEDROCK_SERIALIZATION)

    def overflow(self, input_tokens: int, window: int, max_tokens: int | None) -> httpx.Response | None:
        return self.error(BEDROCK_TOO_LONG) if input_tokens > window else None

    def output_cap(self, param: str, requested: int, cap: int, model: str) -> httpx.Response:
        return self.error(BEDROCK_MAX_TOKENS_TOO_LARGE % (cap, cap))

    def rate_limited(self, model: str, retry_after: int, input_tokens: int) -> httpx.Response:
        return self.error(BEDROCK_RATE_LIMIT, status=429)

    def reply(self, parts: _ReplyParts) -> httpx.Response:
        content: list[dict[str, Any]] = [{"text": parts.text}] if parts.text else []
        content += [{"toolUse": {"toolUseId": c.id, "name": c.name, "input": json.loads(c.arguments or "{}")}}
                    for c in parts.tool_calls]
        stop = "max_tokens" if parts.truncated else "tool_use" if parts.tool_calls else "end_turn"
        usage = parts.usage
        return _json_response(200, {
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
        }, {"x-amzn-requestid": parts.response_id})


WIRES: Mapping[str, _Wire] = MappingProxyType(
    {w.fmt: w for w in (_OpenAIChat(), _OpenAIResponses(), _Anthropic(), _Gemini(), _BedrockConverse())}
)
RESPONSE_ID_PREFIXES: Mapping[str, str] = MappingProxyType(
    {"openai-chat": "chatcmpl-", "openai-responses": "resp_", "anthropic": "msg_01", "gemini": "",
     "bedrock-converse": ""}
)


def rate_limit_response(fmt: str, *, model: str = "", retry_after: int = DEFAULT_RETRY_AFTER_S,
                        requested_tokens: int = 0) -> httpx.Response:
    """The provider's real 429 answer (status, headers and body) for ``fmt``."""
    return _wire(fmt).rate_limited(model, retry_after, requested_tokens)


def _wire(fmt: str) -> _Wire:
    try:
        return WIRES[fmt]
    except KeyError:
        raise ValueError(f"unknown wire format {fmt!r}; valid formats: {', '.join(FORMATS)}") from None


# -- the provider ------------------------------------------------------------

Script = Callable[[ParsedRequest], "Reply | str"] | Iterable["Reply | str"]


class MockProvider:
    """A strict mock of one provider's API, as an httpx handler.

    ``script`` produces the next assistant reply: a callable taking the
    :class:`ParsedRequest`, or an iterable of :class:`Reply`/``str`` (an
    exhausted iterable raises ``LookupError``); None answers with a short
    deterministic acknowledgement. Requests over ``context_window`` tokens get
    the provider's overflow error; a ``max_tokens`` above
    ``max_output_tokens_cap`` gets its "too large" error; a reply longer than
    the request's ``max_tokens`` (else the cap) is cut with the truncation stop
    reason. ``rate_limit_calls`` lists 1-based call numbers answered with 429.
    """

    def __init__(
        self,
        fmt: str,
        *,
        context_window: int,
        script: Script | None = None,
        max_output_tokens_cap: int | None = None,
        chars_per_token: float = 4.0,
        prices: Mapping[str, Price] | Price | None = None,
        rate_limit_calls: Container[int] = frozenset(),
        retry_after: int = DEFAULT_RETRY_AFTER_S,
        seed: int = 0,
    ) -> None:
        self.wire = _wire(fmt)
        if context_window <= 0:
            raise ValueError(f"context_window must be a positive number of tokens, got {context_window}")
        if chars_per_token <= 0:
            raise ValueError(f"chars_per_token must be > 0, got {chars_per_token}")
        if max_output_tokens_cap is not None and max_output_tokens_cap <= 0:
            raise ValueError(f"max_output_tokens_cap must be > 0 or None, got {max_output_tokens_cap}")
        self.format = fmt
        self.context_window = context_window
        self.max_output_tokens_cap = max_output_tokens_cap
        self.chars_per_token = chars_per_token
        self.prices = prices
        self.rate_limit_calls = rate_limit_calls
        self.retry_after = retry_after
        self.calls: list[ProviderCall] = []
        self._script = self._as_callable(script)
        self._rng = random.Random(seed)
        self._cached_prefixes: set[str] = set()

    @staticmethod
    def _as_callable(script: Script | None) -> Callable[[ParsedRequest], Reply | str]:
        if script is None:
            return lambda req: Reply(
                f"Acknowledged turn {req.call_index}: {req.message_count} messages, "
                f"about {req.input_tokens} input tokens."
            )
        if callable(script):
            return script
        iterator = iter(script)

        def next_reply(req: ParsedRequest) -> Reply | str:
            try:
                return next(iterator)
            except StopIteration:
                raise LookupError(
                    f"MockProvider script is exhausted at call {req.call_index}; pass a longer iterable "
                    "or a callable script"
                ) from None

        return next_reply

    # -- recording -----------------------------------------------------------

    @property
    def call_count(self) -> int:
        """Number of calls answered so far."""
        return len(self.calls)

    @property
    def last_call(self) -> ProviderCall:
        """The most recent call (``IndexError`` before the first)."""
        return self.calls[-1]

    @property
    def total_usage(self) -> Usage:
        """Usage summed over every successful call."""
        usages = [c.usage for c in self.calls if c.usage is not None]
        return Usage(
            sum(u.input_tokens for u in usages),
            sum(u.output_tokens for u in usages),
            sum(u.cache_read_tokens for u in usages),
            sum(u.cache_write_tokens for u in usages),
        )

    @property
    def total_cost(self) -> float:
        """USD cost of every successful call, each priced by its own model."""
        return sum(self.cost(c.usage) for c in self.calls if c.usage is not None)

    def cost(self, usage: Usage) -> float:
        """USD cost of ``usage`` at this provider's prices (``prices`` overrides the table)."""
        if isinstance(self.prices, Price):
            return self.prices.cost(usage)
        return price_for(usage.model, self.prices or PRICES).cost(usage)

    # -- handling ------------------------------------------------------------

    def __call__(self, request: httpx.Request) -> httpx.Response:
        raw = request.read()
        index = len(self.calls) + 1
        record = {"index": index, "request": request, "request_bytes": len(raw), "model": "",
                  "message_count": 0, "input_tokens": 0, "max_tokens": None}
        path = request.url.raw_path.decode("ascii", "replace").split("?", 1)[0]
        match = PATH_PATTERNS[self.format].search(path)
        if request.method != "POST" or match is None:
            message = (f"ctxsim MockProvider({self.format}) serves {PATH_HINTS[self.format]}; "
                       f"got {request.method} {path}")
            return self._record(self.wire.error(message, status=404), "not_found", record)
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._record(self.wire.invalid_json(raw), "invalid_request", record)
        if not isinstance(body, dict):
            return self._record(self.wire.invalid_json(raw), "invalid_request", record)
        model = self.wire.model(body, match.groupdict().get("model"))
        record["model"] = model
        tally = _Tally()
        try:
            try:
                param, max_tokens = self.wire.max_tokens(body)
                record["max_tokens"] = max_tokens
                if body.get("stream"):
                    raise _Invalid(NO_STREAMING, param="stream")
                self.wire.analyse(body, tally)
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                # A body of the wrong shape (a string where a list belongs...) gets a 400, never a crash.
                raise _Invalid(INVALID_SHAPE % (type(exc).__name__, exc)) from exc
        except _Invalid as invalid:
            record["message_count"] = tally.message_count
            response = self.wire.error(invalid.message, param=invalid.param, code=invalid.code)
            return self._record(response, invalid.outcome, record)
        input_tokens = self._tokens(tally.chars, tally.images)
        record.update(message_count=tally.message_count, input_tokens=input_tokens)
        if index in self.rate_limit_calls:
            response = self.wire.rate_limited(model, self.retry_after, input_tokens)
            return self._record(response, "rate_limit", record)
        cap = self.max_output_tokens_cap
        if cap is not None and max_tokens is not None and max_tokens > cap:
            response = self.wire.output_cap(param, max_tokens, cap, model)
            return self._record(response, "invalid_request", record)
        overflow = self.wire.overflow(input_tokens, self.context_window, max_tokens)
        if overflow is not None:
            return self._record(overflow, "context_overflow", record)
        parsed = ParsedRequest(self.format, model, body, tally.message_count, input_tokens, max_tokens, index)
        parts = self._reply_parts(parsed, tally, max_tokens if max_tokens is not None else cap)
        outcome = "output_truncated" if parts.truncated else "ok"
        return self._record(self.wire.reply(parts), outcome, record, usage=parts.usage)

    def _record(self, response: httpx.Response, outcome: str, record: dict[str, Any],
                usage: Usage | None = None) -> httpx.Response:
        self.calls.append(ProviderCall(response=response, outcome=outcome, usage=usage, **record))
        return response

    def _tokens(self, chars: int, images: int = 0) -> int:
        return estimate_tokens(chars, images, chars_per_token=self.chars_per_token)

    def _mint(self, prefix: str, length: int = 24) -> str:
        return prefix + "".join(self._rng.choice(ID_ALPHABET) for _ in range(length))

    def _reply_parts(self, parsed: ParsedRequest, tally: _Tally, limit: int | None) -> _ReplyParts:
        reply = self._script(parsed)
        if isinstance(reply, str):
            reply = Reply(reply)
        elif not isinstance(reply, Reply):
            raise TypeError(f"MockProvider script must return a Reply or str, got {type(reply).__name__}")
        text = reply.text
        prefix = self.wire.tool_id_prefix
        calls = tuple(
            c if c.id or not prefix else ToolCall(self._mint(prefix), c.name, c.arguments)
            for c in reply.tool_calls
        )
        output_tokens = self._tokens(len(text) + sum(len(c.name) + len(c.arguments) for c in calls))
        truncated = False
        if limit is not None and output_tokens > limit:
            text, calls, output_tokens, truncated = text[: int(limit * self.chars_per_token)], (), limit, True
        read, write = self._cache(tally)
        usage = Usage(parsed.input_tokens - read - write, output_tokens, read, write, parsed.model)
        response_id = self._mint(RESPONSE_ID_PREFIXES[self.format])
        return _ReplyParts(parsed.model, text, calls, truncated, usage, response_id, parsed.call_index)

    def _cache(self, tally: _Tally) -> tuple[int, int]:
        """Prompt-cache (read, write) tokens: the longest seen breakpoint prefix is read, the rest written."""
        eligible = [(digest, self._tokens(chars, images)) for digest, chars, images in tally.breakpoints]
        eligible = [(d, t) for d, t in eligible if t >= ANTHROPIC_MIN_CACHE_TOKENS]
        if not eligible:
            return 0, 0
        read = max((t for d, t in eligible if d in self._cached_prefixes), default=0)
        self._cached_prefixes.update(d for d, _ in eligible)
        return read, eligible[-1][1] - read
