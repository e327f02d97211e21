"""The one-method seam between a Session and the network.

A :class:`Sender` turns a :class:`ChatRequest` into a :class:`ChatResponse` or
raises. Whatever it raises, :func:`ctxrecover.classify.classify` reads it; a
:class:`SendFailed` wrapper adds what classification needs most — the exact
size of the rejected body — and keeps the original error as ``__cause__``.

- :class:`HttpxSender` posts the real request body of any of the five wire
  formats to any base URL with httpx (a transport can be injected, e.g.
  ``httpx.MockTransport`` or respx).
- :class:`OpenAISDKSender` / :class:`AnthropicSDKSender` wrap an existing
  ``openai`` / ``anthropic`` client. Create those clients with
  ``max_retries=0``: SDK retries resend the very body a proxy just rejected.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ctxrecover.errors import CtxRecoverError
from ctxrecover.messages import Message
from ctxrecover.wire import (
    BodyEncoder,
    ParsedResponse,
    Usage,
    WireFormat,
    encode_body,
    encode_request,
    parse_response,
    render_request,
    request_path,
    request_size,
)

if TYPE_CHECKING:
    import httpx

__all__ = [
    "AnthropicSDKSender",
    "ChatRequest",
    "ChatResponse",
    "HttpxSender",
    "OpenAISDKSender",
    "SendFailed",
    "Sender",
]

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_TIMEOUT_S = 600.0
# Keyword arguments of an SDK ``create`` call that are request options, not body fields.
SDK_REQUEST_OPTIONS: frozenset[str] = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One outgoing request: the (already compacted) messages and generation options.

    ``headers`` and ``extra`` carry provider features such as Anthropic context
    editing (``anthropic-beta`` header + ``context_management`` body field).
    """

    messages: tuple[Message, ...]
    max_tokens: int | None = None
    tools: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)


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


def _auth_headers(fmt: WireFormat, api_key: str | None) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    if fmt is WireFormat.ANTHROPIC:
        headers["anthropic-version"] = ANTHROPIC_VERSION
        if api_key:
            headers["x-api-key"] = api_key
    elif fmt is WireFormat.GEMINI:
        if api_key:
            headers["x-goog-api-key"] = api_key
    elif api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return headers


def _without_framing(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` without Content-Length or Transfer-Encoding: the sender frames the body it posts."""
    return {k: v for k, v in headers.items() if k.lower() not in ("content-length", "transfer-encoding")}


class HttpxSender:
    """Post the real request body of ``wire_format`` to ``base_url`` with httpx.

    Bodies are assembled from each message's encoded JSON, cached on the
    message (:func:`~ctxrecover.wire.encode_request`), so a request encodes
    only the messages not sent before, and posted as the chunks of a
    :class:`~ctxrecover.wire.chunks.BodyEncoder` with their ``Content-Length``:
    a request that appends to the history joins only its last block of
    messages instead of copying the whole body (an injected ``client`` with
    request event hooks gets the body joined, so the hooks can read
    ``request.content``). That costs about two more
    copies of the history in memory; with ``cache_fragments=False`` nothing is
    stored and each request encodes its messages again into one buffer (the
    same bytes).

    >>> import httpx
    >>> def provider(request):
    ...     return httpx.Response(200, json={"choices": [{"message": {"role": "assistant",
    ...         "content": "hi"}, "finish_reason": "stop"}], "usage": {}})
    >>> sender = HttpxSender("openai-chat", base_url="http://mock", model="m",
    ...                      transport=httpx.MockTransport(provider))
    >>> sender.send(ChatRequest((Message.user("hello"),))).message.content
    'hi'
    """

    def __init__(
        self,
        wire_format: WireFormat | str,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        client: httpx.Client | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        cache_fragments: bool = True,
    ) -> None:
        import httpx

        self.wire_format = WireFormat(wire_format)
        self.model = model
        self.cache_fragments = cache_fragments
        self.url = base_url.rstrip("/") + request_path(self.wire_format, model)
        self._headers = {**_auth_headers(self.wire_format, api_key), **(headers or {})}
        self._client = client or httpx.Client(transport=transport, timeout=timeout, trust_env=False)
        self._owns_client = client is None
        self._encoder = BodyEncoder(self.wire_format) if cache_fragments else None

    def render(self, request: ChatRequest) -> bytes:
        """The exact bytes :meth:`send` posts for ``request``."""
        return b"".join(self.render_chunks(request))

    def render_chunks(self, request: ChatRequest) -> list[bytes]:
        """The body :meth:`send` posts for ``request``, as the chunks it hands to httpx in order."""
        options: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "tools": request.tools,
            "extra": request.extra or None,
        }
        if self._encoder is None:
            return [encode_request(request.messages, self.wire_format, cache=False, **options)]
        return self._encoder.encode(request.messages, **options)

    def send(self, request: ChatRequest) -> ChatResponse:
        import httpx

        chunks = self.render_chunks(request)
        size = sum(map(len, chunks))
        headers = {**_without_framing({**self._headers, **request.headers}), "content-length": str(size)}
        # A client's request hooks may read ``request.content``, which httpx offers only for a body
        # given as bytes: they get the body joined.
        content = b"".join(chunks) if self._client.event_hooks["request"] else chunks
        try:
            response = self._client.post(self.url, content=content, headers=headers)
            text = response.text
        except httpx.HTTPError as exc:
            raise SendFailed(f"{type(exc).__name__}: {exc}", request_bytes=size) from exc
        if response.status_code >= 400:
            raise SendFailed(
                f"HTTP {response.status_code} from {self.url}",
                request_bytes=size,
                status=response.status_code,
                body=text,
                headers=response.headers,
                header_bytes=header_bytes(response.request),
            )
        try:
            raw = json.loads(text)
            parsed = parse_response(self.wire_format, raw)
        except ValueError as exc:
            # A 2xx that is not the provider's JSON (an HTML interstitial, a truncated body).
            raise SendFailed(
                f"unparseable {response.status_code} response from {self.url}: {exc}",
                request_bytes=size,
                status=response.status_code,
                body=text,
                headers=response.headers,
            ) from exc
        return ChatResponse.from_parsed(parsed, request_bytes=size, raw=raw)

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> HttpxSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Exceptions from these packages (and OS-level errors) are provider or network failures.
SDK_ERROR_MODULES = frozenset({"openai", "anthropic", "httpx", "httpx2", "httpcore", "httpcore2"})


def _is_transport_failure(exc: BaseException) -> bool:
    """True for an SDK / HTTP-client / OS error, read by the exception's module (duck typing)."""
    return isinstance(exc, OSError) or type(exc).__module__.split(".", 1)[0] in SDK_ERROR_MODULES


def _dump(result: Any) -> dict[str, Any]:
    if hasattr(result, "model_dump"):
        return result.model_dump(mode="json", exclude_none=True)
    if isinstance(result, dict):
        return result
    raise TypeError(f"unexpected SDK result type {type(result).__name__}")


def _entries_size(fields: Mapping[str, Any]) -> int:
    """Bytes ``fields`` add to a non-empty JSON object: each ``"key":value`` and its comma."""
    return sum(len(encode_body({key: value})) - 1 for key, value in fields.items())


def _sent_bytes(exc: BaseException) -> int | None:
    """The Content-Length of the request an SDK error carries (what the SDK really sent)."""
    try:
        value = exc.request.headers.get("content-length")  # type: ignore[attr-defined]
        return int(value) if value is not None else None
    except Exception:  # no request (raised before sending) or not an httpx-like one
        return None


def _sent_header_bytes(exc: BaseException) -> int | None:
    """Bytes of the head of the request an SDK error carries, when it has one."""
    try:
        return header_bytes(exc.request)  # type: ignore[attr-defined]
    except Exception:  # the SDK raises when an error has no request
        return None


class _SDKSender:
    """Shared body of the SDK adapters: render, call, parse, wrap failures.

    ``extra_kwargs`` go to every ``create`` call: body fields (``temperature``,
    ``metadata``, …) and the SDK's request options (``extra_headers``,
    ``extra_query``, ``extra_body``, ``timeout``), merged with the request's own.
    ``request_bytes`` is the size of the body the SDK posts: the rendered body
    plus the extra body fields (both SDKs serialise compact UTF-8 JSON, as
    :func:`~ctxrecover.wire.encode_body` does), computed from the messages'
    cached sizes and the few fields that differ, never by encoding the history;
    on a failure, the Content-Length of the request the SDK error carries, when
    it has one.
    """

    wire_format: WireFormat
    # Body fields the SDK's ``create`` has no parameter for: sent through ``extra_body``.
    extra_body_fields: tuple[str, ...] = ()

    def __init__(self, client: Any, *, model: str, extra_kwargs: Mapping[str, Any] | None = None) -> None:
        self._client = client
        self.model = model
        self._extra_kwargs = dict(extra_kwargs or {})

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        return render_request(
            request.messages,
            self.wire_format,
            model=self.model,
            max_tokens=request.max_tokens,
            tools=request.tools,
            extra=request.extra or None,
        )

    def _kwargs(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
        """The ``create`` keyword arguments: body fields, then the merged request options."""
        kwargs = {**body, **self._extra_kwargs}
        extra_body = {
            **(self._extra_kwargs.get("extra_body") or {}),
            **{name: kwargs.pop(name) for name in self.extra_body_fields if name in kwargs},
        }
        extra_headers = {**(self._extra_kwargs.get("extra_headers") or {}), **headers}
        kwargs.pop("extra_body", None)
        kwargs.pop("extra_headers", None)
        if extra_body:
            kwargs["extra_body"] = extra_body
        if extra_headers:
            kwargs["extra_headers"] = extra_headers
        return kwargs

    def _wire_size(self, request: ChatRequest, body: Mapping[str, Any], kwargs: Mapping[str, Any]) -> int:
        """Bytes of the JSON body the SDK builds from ``kwargs`` (``extra_body`` merged last).

        ``body``'s exact size comes from cached per-message sizes; the fields
        the SDK body adds, drops or replaces are encoded on their own (a JSON
        object's size is the sum of its ``"key":value`` entries plus framing).
        """
        size = request_size(
            request.messages,
            self.wire_format,
            model=self.model,
            max_tokens=request.max_tokens,
            tools=request.tools,
            extra=request.extra or None,
        )
        wire = {k: v for k, v in kwargs.items() if k not in SDK_REQUEST_OPTIONS}
        try:
            wire.update(kwargs.get("extra_body") or {})
            added = {k: v for k, v in wire.items() if k not in body or body[k] is not v}
            removed = {k: v for k, v in body.items() if k not in wire or wire[k] is not v}
            return size + _entries_size(added) - _entries_size(removed)
        except (TypeError, ValueError):  # an extra value only the SDK can serialise
            return size

    def _create(self, kwargs: dict[str, Any]) -> Any:
        raise NotImplementedError

    def send(self, request: ChatRequest) -> ChatResponse:
        body = self._body(request)
        kwargs = self._kwargs(body, request.headers)
        size = self._wire_size(request, body, kwargs)
        try:
            result = self._create(kwargs)
        except Exception as exc:
            if not _is_transport_failure(exc):
                raise  # a programming error (a bad keyword, a wrong client): not a provider failure
            size = _sent_bytes(exc) or size
            raise SendFailed(
                f"{type(exc).__name__}: {exc}", request_bytes=size, header_bytes=_sent_header_bytes(exc)
            ) from exc
        raw = _dump(result)
        return ChatResponse.from_parsed(parse_response(self.wire_format, raw), request_bytes=size, raw=raw)


class OpenAISDKSender(_SDKSender):
    """Send through an existing ``openai.OpenAI`` client (Chat Completions).

    Build the client with ``max_retries=0`` so the SDK does not resend a body a
    proxy has just rejected; the Session's recovery does the retrying.
    """

    wire_format = WireFormat.OPENAI_CHAT

    def _create(self, kwargs: dict[str, Any]) -> Any:
        return self._client.chat.completions.create(**kwargs)


class AnthropicSDKSender(_SDKSender):
    """Send through an existing ``anthropic.Anthropic`` client (Messages API).

    Build the client with ``max_retries=0`` so the SDK does not resend a body a
    proxy has just rejected; the Session's recovery does the retrying.
    """

    wire_format = WireFormat.ANTHROPIC
    extra_body_fields = ("context_management",)

    def _create(self, kwargs: dict[str, Any]) -> Any:
        return self._client.messages.create(**kwargs)
