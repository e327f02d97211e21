"""Send through an official SDK client: :class:`OpenAISDKSender`, :class:`AnthropicSDKSender`.

Create those clients with ``max_retries=0``: SDK retries resend the very body a
proxy just rejected; the session's recovery does the retrying.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxrecover.transport.base import ChatRequest, ChatResponse, SendFailed, header_bytes
from ctxrecover.wire import WireFormat, encode_body, parse_response, render_request, request_size

__all__ = ["AnthropicSDKSender", "OpenAISDKSender"]

# Keyword arguments of an SDK ``create`` call that are request options, not body fields.
SDK_REQUEST_OPTIONS: frozenset[str] = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})


# Exceptions from these packages (and OS-level errors) are provider or network failures.
SDK_ERROR_MODULES = frozenset({"openai", "anthropic", "httpx", "httpx2", "httpcore", "httpcore2"})


def _is_transport_failure(exc: BaseException) -> bool:
    """True for an SDK / HTTP-client / OS error, read by the exception's module (duck typing)."""
    return isinstance(exc, OSError) or type(exc).__module__.split(".", 1)[0] in SDK_ERROR_MODULES


def _dump(result: Any) -> dict[str, Any]:
    if hasattr(result, "model_dump"):
        dumped: dict[str, Any] = result.model_dump(mode="json", exclude_none=True)
        return dumped
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
