"""Mock LLM providers for the five wire formats, strict like the real APIs.

A :class:`MockProvider` is a plain ``handler(request) -> httpx.Response``: plug
it into ``httpx.MockTransport``, a respx side effect or the loopback server. It
parses the real request JSON of its format, validates the history the way the
real API does (tool-call pairing, role order) and answers with that provider's
real status, headers and error body; it rejects prompts over its context window
with the provider's real overflow body; otherwise it answers with the next
scripted reply in the provider's real response format, with usage (Anthropic
and Bedrock prompt-cache fields included), stop reason and ``max_tokens``
truncation. Every call is recorded on ``provider.calls`` (like respx's calls); with
``keep_calls=N`` only the last N are kept, while ``call_count``, ``total_usage`` and
``total_cost`` keep counting (a long-running proxy stays within bounded memory).

Each wire format lives in its own module (:mod:`simulator.providers.openai`,
:mod:`simulator.providers.anthropic`, :mod:`simulator.providers.gemini`,
:mod:`simulator.providers.bedrock`, on the contract in :mod:`simulator.providers.wire`);
prices and usage in :mod:`simulator.providers.prices`, re-exported here.

==================  ==================================================
format              path (matched as a suffix, so base-URL prefixes work)
==================  ==================================================
``openai-chat``      ``POST /v1/chat/completions``
``openai-responses`` ``POST /v1/responses``
``anthropic``        ``POST /v1/messages``
``gemini``           ``POST /v1beta/models/{model}:generateContent`` (``:streamGenerateContent``)
``bedrock-converse`` ``POST /model/{modelId}/converse`` (``/converse-stream``)
==================  ==================================================

A streamed request (``"stream": true``, Gemini's ``:streamGenerateContent``, Bedrock's
``/converse-stream``) gets the same reply as the provider's real event sequence
(:mod:`simulator.providers.streaming`); errors stay plain JSON answers, as on the real APIs.

Tokens are estimated deterministically: ``ceil(chars / chars_per_token)`` over
every text, tool name, tool argument and tool definition — more for text denser in
tokens than English (CJK, emoji, base64, minified code:
:mod:`simulator.providers.tokens`) — plus each image as its provider's published rule
counts it from the image's header (:mod:`ctxrecover.image_tokens`, the library's own
table: the budget and the mock count images alike; SPEC §1.2's estimate for a URL or an
unknown format).

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

import json
import math
import random
import re
import string
from collections import deque
from collections.abc import Callable, Container, Iterable, Mapping, MutableSequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import httpx

from ctxrecover.image_tokens import image_token_cost
from ctxrecover.messages import ToolCall
from simulator.providers.anthropic import AnthropicWire
from simulator.providers.bedrock import BedrockConverseWire
from simulator.providers.decode import PrefixDecoder
from simulator.providers.gemini import GeminiWire
from simulator.providers.openai import OpenAIChatWire, OpenAIResponsesWire
from simulator.providers.prices import DEFAULT_PRICE, PRICES, Price, Usage, cost, price_for
from simulator.providers.streaming import StreamOptions, stream_response
from simulator.providers.tokens import TokenCounter
from simulator.providers.wire import Invalid, ReplyParts, Tally, Wire

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
        "gemini": re.compile(
            r"/models/(?P<model>[^/]+?):(?:generateContent|(?P<stream>streamGenerateContent))$"
        ),
        "bedrock-converse": re.compile(r"/model/(?P<model>[^/]+)/converse(?P<stream>-stream)?$"),
    }
)
PATH_HINTS: Mapping[str, str] = MappingProxyType(
    {
        "openai-chat": "POST /v1/chat/completions",
        "openai-responses": "POST /v1/responses",
        "anthropic": "POST /v1/messages",
        "gemini": "POST /v1beta/models/{model}:generateContent (or :streamGenerateContent)",
        "bedrock-converse": "POST /model/{modelId}/converse (or /converse-stream)",
    }
)

IMAGE_TOKENS = 85
ANTHROPIC_MIN_CACHE_TOKENS = 1024  # shorter cache_control prefixes are not cached, as on the real API
ID_ALPHABET = string.ascii_letters + string.digits
DEFAULT_RETRY_AFTER_S = 20

INVALID_SHAPE = "ctxsim MockProvider could not read the request body (%s: %s); check its shape"


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


def estimate_tokens(chars: int, images: int = 0, *, chars_per_token: float = 4.0) -> int:
    """The estimate for ``chars`` of ordinary text and ``images`` URL-only images (SPEC §1.2's 85 each):
    ``ceil(chars / chars_per_token) + 85 × images`` (token-dense text and images with a header cost
    more: :class:`~simulator.providers.tokens.TokenCounter`, :mod:`ctxrecover.image_tokens`)."""
    return math.ceil(chars / chars_per_token) + IMAGE_TOKENS * images


def format_for_path(path: str) -> str | None:
    """The wire format whose endpoint ``path`` is, or None."""
    path = path.split("?", 1)[0]
    for fmt, pattern in PATH_PATTERNS.items():
        if pattern.search(path):
            return fmt
    return None


WIRES: Mapping[str, Wire] = MappingProxyType(
    {
        w.fmt: w
        for w in (
            OpenAIChatWire(),
            OpenAIResponsesWire(),
            AnthropicWire(),
            GeminiWire(),
            BedrockConverseWire(),
        )
    }
)
RESPONSE_ID_PREFIXES: Mapping[str, str] = MappingProxyType(
    {
        "openai-chat": "chatcmpl-",
        "openai-responses": "resp_",
        "anthropic": "msg_01",
        "gemini": "",
        "bedrock-converse": "",
    }
)


def rate_limit_response(
    fmt: str, *, model: str = "", retry_after: int = DEFAULT_RETRY_AFTER_S, requested_tokens: int = 0
) -> httpx.Response:
    """The provider's real 429 answer (status, headers and body) for ``fmt``."""
    return _wire(fmt).rate_limited(model, retry_after, requested_tokens)


def _wire(fmt: str) -> Wire:
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
    ``keep_calls`` bounds :attr:`calls` to the last N (None keeps every call).
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
        keep_calls: int | None = None,
    ) -> None:
        self.wire = _wire(fmt)
        if context_window <= 0:
            raise ValueError(f"context_window must be a positive number of tokens, got {context_window}")
        if chars_per_token <= 0:
            raise ValueError(f"chars_per_token must be > 0, got {chars_per_token}")
        if max_output_tokens_cap is not None and max_output_tokens_cap <= 0:
            raise ValueError(f"max_output_tokens_cap must be > 0 or None, got {max_output_tokens_cap}")
        if keep_calls is not None and keep_calls < 1:
            raise ValueError(f"keep_calls must be >= 1 or None (keep every call), got {keep_calls}")
        self.format = fmt
        self.context_window = context_window
        self.max_output_tokens_cap = max_output_tokens_cap
        self.chars_per_token = chars_per_token
        self.prices = prices
        self.rate_limit_calls = rate_limit_calls
        self.retry_after = retry_after
        self.calls: MutableSequence[ProviderCall] = [] if keep_calls is None else deque(maxlen=keep_calls)
        self._count = 0
        self._decoder = PrefixDecoder()  # a resent conversation is decoded from where it changed
        self._usage = Usage(0, 0)
        self._cost = 0.0
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
        """Number of calls answered so far (all of them, even when ``keep_calls`` dropped the oldest)."""
        return self._count

    @property
    def last_call(self) -> ProviderCall:
        """The most recent call (``IndexError`` before the first)."""
        return self.calls[-1]

    @property
    def total_usage(self) -> Usage:
        """Usage summed over every successful call."""
        return self._usage

    @property
    def total_cost(self) -> float:
        """USD cost of every successful call, each priced by its own model."""
        return self._cost

    def cost(self, usage: Usage) -> float:
        """USD cost of ``usage`` at this provider's prices (``prices`` overrides the table)."""
        if isinstance(self.prices, Price):
            return self.prices.cost(usage)
        return price_for(usage.model, self.prices or PRICES).cost(usage)

    # -- handling ------------------------------------------------------------

    def __call__(self, request: httpx.Request) -> httpx.Response:
        raw = request.read()
        index = self._count + 1
        record = {
            "index": index,
            "request": request,
            "request_bytes": len(raw),
            "model": "",
            "message_count": 0,
            "input_tokens": 0,
            "max_tokens": None,
        }
        path = request.url.raw_path.decode("ascii", "replace").split("?", 1)[0]
        match = PATH_PATTERNS[self.format].search(path)
        if request.method != "POST" or match is None:
            message = (
                f"ctxsim MockProvider({self.format}) serves {PATH_HINTS[self.format]}; "
                f"got {request.method} {path}"
            )
            return self._record(self.wire.error(message, status=404), "not_found", record)
        try:
            body = self._decoder.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._record(self.wire.invalid_json(raw), "invalid_request", record)
        if not isinstance(body, dict):
            return self._record(self.wire.invalid_json(raw), "invalid_request", record)
        model = self.wire.model(body, match.groupdict().get("model"))
        record["model"] = model
        tally = Tally(self.chars_per_token, lambda image: image_token_cost(image, self.format, model))
        try:
            try:
                param, max_tokens = self.wire.max_tokens(body)
                record["max_tokens"] = max_tokens
                stream = self._stream_options(body, match, request.url.params)
                self.wire.analyse(body, tally)
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                # A body of the wrong shape (a string where a list belongs...) gets a 400, never a crash.
                raise Invalid(INVALID_SHAPE % (type(exc).__name__, exc)) from exc
        except Invalid as invalid:
            record["message_count"] = tally.message_count
            response = self.wire.error(invalid.message, param=invalid.param, code=invalid.code)
            return self._record(response, invalid.outcome, record)
        input_tokens = tally.tokens
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
        response = self.wire.reply(parts) if stream is None else stream_response(self.wire, parts, stream)
        return self._record(response, outcome, record, usage=parts.usage)

    def _stream_options(
        self, body: Mapping[str, Any], match: re.Match[str], params: httpx.QueryParams
    ) -> StreamOptions | None:
        """How the request asks to stream (the body's ``stream`` flag or a streaming path), or None."""
        if not (body.get("stream") is True or match.groupdict().get("stream")):
            return None
        usage = (body.get("stream_options") or {}).get("include_usage") is True
        return StreamOptions(include_usage=usage, sse=params.get("alt") == "sse")

    def _record(
        self, response: httpx.Response, outcome: str, record: dict[str, Any], usage: Usage | None = None
    ) -> httpx.Response:
        self._count += 1
        if usage is not None:
            total = self._usage
            self._usage = Usage(
                total.input_tokens + usage.input_tokens,
                total.output_tokens + usage.output_tokens,
                total.cache_read_tokens + usage.cache_read_tokens,
                total.cache_write_tokens + usage.cache_write_tokens,
            )
            self._cost += self.cost(usage)
        self.calls.append(ProviderCall(response=response, outcome=outcome, usage=usage, **record))
        return response

    def _counted(self, text: str) -> TokenCounter:
        counter = TokenCounter(self.chars_per_token)
        counter.add(text)
        return counter

    def _mint(self, prefix: str, length: int = 24) -> str:
        return prefix + "".join(self._rng.choice(ID_ALPHABET) for _ in range(length))

    def _reply_parts(self, parsed: ParsedRequest, tally: Tally, limit: int | None) -> ReplyParts:
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
        output_tokens = self._counted("".join([text, *(c.name + c.arguments for c in calls)])).tokens
        truncated = False
        if limit is not None and output_tokens > limit:
            counted = self._counted(text)  # cut to the chars of ``limit`` tokens, at the text's own density
            cut = (
                int(limit * self.chars_per_token)
                if not counted.excess
                else len(text) * limit // counted.tokens
            )
            text, calls, output_tokens, truncated = text[:cut], (), limit, True
        read, write = self._cache(tally)
        usage = Usage(parsed.input_tokens - read - write, output_tokens, read, write, parsed.model)
        response_id = self._mint(RESPONSE_ID_PREFIXES[self.format])
        return ReplyParts(parsed.model, text, calls, truncated, usage, response_id, parsed.call_index)

    def _cache(self, tally: Tally) -> tuple[int, int]:
        """Prompt-cache (read, write) tokens: the longest seen breakpoint prefix is read, the rest written."""
        eligible = [(d, t) for d, t in tally.breakpoints if t >= ANTHROPIC_MIN_CACHE_TOKENS]
        if not eligible:
            return 0, 0
        read = max((t for d, t in eligible if d in self._cached_prefixes), default=0)
        self._cached_prefixes.update(d for d, _ in eligible)
        return read, eligible[-1][1] - read
