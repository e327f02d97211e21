"""The seam between a turn and the network: what is sent, what comes back, what a failure carries.

A :class:`Sender` (or an :class:`AsyncSender`, whose ``send`` is awaited) turns a
:class:`ChatRequest` into a :class:`ChatResponse` or raises. Whatever it raises,
:func:`ctxrecover.classify.classify` reads it; a :class:`SendFailed` wrapper adds
what classification needs most — the exact size of the rejected body — and keeps
the original error as ``__cause__``. Anything else a sender raises (a ``TypeError``,
a bug) is not the provider's answer and propagates as itself.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Protocol, runtime_checkable

from ctxrecover.errors import CtxRecoverError
from ctxrecover.messages import Message
from ctxrecover.wire import ParsedResponse, Usage, WireFormat

__all__ = [
    "AsyncSender",
    "ChatRequest",
    "ChatResponse",
    "DeltaCallback",
    "MalformedStream",
    "STREAM_BODY_FIELDS",
    "STREAM_PATHS",
    "SendFailed",
    "Sender",
    "header_bytes",
    "stream_body_fields",
]

#: Called with each piece of the answer's text as it arrives (``on_delta`` of the senders).
DeltaCallback = Callable[[str], object]

# How each wire format asks for a streamed answer: fields added to the body (OpenAI's usage chunk
# included: https://platform.openai.com/docs/api-reference/chat/create#chat-create-stream_options;
# https://docs.anthropic.com/en/api/messages-streaming), or the endpoint that replaces the plain one
# (https://ai.google.dev/api/generate-content#method:-models.streamgeneratecontent;
# https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html).
STREAM_BODY_FIELDS: Mapping[WireFormat, Mapping[str, Any]] = MappingProxyType(
    {
        WireFormat.OPENAI_CHAT: MappingProxyType({"stream": True, "stream_options": {"include_usage": True}}),
        WireFormat.OPENAI_RESPONSES: MappingProxyType({"stream": True}),
        WireFormat.ANTHROPIC: MappingProxyType({"stream": True}),
    }
)
STREAM_PATHS: Mapping[WireFormat, str] = MappingProxyType(
    {
        WireFormat.GEMINI: "/v1beta/models/{model}:streamGenerateContent?alt=sse",
        WireFormat.BEDROCK_CONVERSE: "/model/{model}/converse-stream",
    }
)


def stream_body_fields(fmt: WireFormat) -> dict[str, Any]:
    """A fresh copy of the fields ``fmt``'s body adds to ask for a stream (none where a path does)."""
    return copy.deepcopy(dict(STREAM_BODY_FIELDS.get(fmt, {})))


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One outgoing request: the (already compacted) messages and generation options.

    ``headers`` and ``extra`` carry provider features such as Anthropic context
    editing (``anthropic-beta`` header + ``context_management`` body field).
    ``purpose`` is ``"experiment"`` for a request whose answer the turn does not keep
    (SPEC §12's tests of a block), else ``"turn"``; it is not part of the body.
    """

    messages: tuple[Message, ...]
    max_tokens: int | None = None
    tools: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    purpose: Literal["turn", "experiment"] = "turn"


@dataclass(frozen=True, slots=True)
class ChatResponse:
    """A successful answer; ``raw`` is the provider's JSON (for context-editing reports)."""

    message: Message
    stop_reason: str | None
    truncated: bool
    usage: Usage
    request_bytes: int
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_parsed(
        cls, parsed: ParsedResponse, *, request_bytes: int, raw: Mapping[str, Any]
    ) -> ChatResponse:
        return cls(
            message=parsed.message,
            stop_reason=parsed.stop_reason,
            truncated=parsed.truncated,
            usage=parsed.usage,
            request_bytes=request_bytes,
            raw=raw,
        )


@runtime_checkable
class Sender(Protocol):
    """Send one request; raise on any failure (classification reads the exception)."""

    wire_format: WireFormat

    def send(self, request: ChatRequest) -> ChatResponse: ...


@runtime_checkable
class AsyncSender(Protocol):
    """Send one request without blocking the event loop; raise on any failure, as a :class:`Sender`."""

    wire_format: WireFormat

    async def send(self, request: ChatRequest) -> ChatResponse: ...


class MalformedStream(CtxRecoverError, ValueError):
    """A streamed answer that cannot be read (bad framing, a checksum, an event that is not JSON).

    Raised by the stream decoders and accumulators; the senders turn it into :class:`SendFailed`.
    ``data`` is the offending event text, when there is one.
    """

    def __init__(self, message: str, *, data: str | None = None) -> None:
        super().__init__(message)
        self.data = data


class SendFailed(CtxRecoverError):
    """A request failed; carries what the provider or middlebox answered.

    ``request_bytes`` is the exact size of the body that was rejected (the
    learned payload cap derives from it); ``header_bytes`` the size of the
    request's head (request line and headers), when the sender knows it (a 431 names it).
    ``status``/``body``/``headers`` are set when an HTTP answer came back; for a
    dropped connection the transport error is the ``__cause__``.
    """

    def __init__(
        self,
        message: str,
        *,
        request_bytes: int,
        status: int | None = None,
        body: str | None = None,
        headers: Mapping[str, str] | None = None,
        header_bytes: int | None = None,
    ) -> None:
        super().__init__(message)
        self.request_bytes = request_bytes
        self.header_bytes = header_bytes
        self.status_code = status
        self.body = body
        self.headers = dict(headers or {})


def header_bytes(request: Any) -> int | None:
    """Bytes of a request's head on the wire — request line, header lines, blank line — as a proxy
    counts them against its header limit (HTTP 431); from an httpx-like request, None when unreadable."""
    try:
        line = len(request.method) + 1 + len(request.url.raw_path) + len(" HTTP/1.1\r\n")
        return line + sum(len(name) + len(value) + 4 for name, value in request.headers.raw) + 2
    except Exception:  # no request (raised before sending) or not an httpx-like one
        return None
