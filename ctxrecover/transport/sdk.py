"""Send through an official SDK client, sync or async, streamed or not: :class:`OpenAISDKSender`,
:class:`AnthropicSDKSender`, :class:`AsyncOpenAISDKSender`, :class:`AsyncAnthropicSDKSender`.

Create those clients with ``max_retries=0``: SDK retries resend the very body a
proxy just rejected; the session's recovery does the retrying. The sync and async
senders differ only in their I/O (``create`` awaited or not, the SDK's ``Stream``
iterated with ``for`` or ``async for``): the call's arguments and size, the reading of
the answer (:class:`~ctxrecover.transport.answer.StreamReader` for a stream) and what a
failure is are decided once, in :class:`_SDKSender`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ctxrecover.errors import ConfigError
from ctxrecover.transport.answer import StreamReader, stated_status
from ctxrecover.transport.base import (
    ChatRequest,
    ChatResponse,
    DeltaCallback,
    SendFailed,
    header_bytes,
    stream_body_fields,
)
from ctxrecover.wire import WireFormat, encode_body, parse_response, render_request, request_size

__all__ = ["AnthropicSDKSender", "AsyncAnthropicSDKSender", "AsyncOpenAISDKSender", "OpenAISDKSender"]

# Keyword arguments of an SDK ``create`` call that are request options, not body fields.
SDK_REQUEST_OPTIONS: frozenset[str] = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})


# Exceptions from these packages (and OS-level errors) are provider or network failures.
SDK_ERROR_MODULES = frozenset({"openai", "anthropic", "httpx", "httpx2", "httpcore", "httpcore2"})


def _is_transport_failure(exc: BaseException) -> bool:
    """True for an SDK / HTTP-client / OS error, read by the exception's module (duck typing)."""
    return isinstance(exc, OSError) or type(exc).__module__.split(".", 1)[0] in SDK_ERROR_MODULES


def _dump(result: Any) -> dict[str, Any]:
    """An SDK model (or a dict) as its JSON document."""
    if hasattr(result, "model_dump"):
        document: dict[str, Any] = result.model_dump(mode="json", exclude_none=True)
        return document
    if isinstance(result, dict):
        return result
    raise ConfigError(f"unexpected SDK result type {type(result).__name__}: neither a model nor a dict")


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


def _body_text(body: Any) -> str:
    if isinstance(body, str):
        return body
    try:
        return encode_body(body).decode()
    except (TypeError, ValueError):  # not JSON-able: its text
        return str(body)


@dataclass(frozen=True, slots=True)
class _Call:
    """One ``create`` call: its keyword arguments and the size of the body the SDK builds from them."""

    kwargs: dict[str, Any]
    size: int


class _SDKSender:
    """What every SDK sender decides, with no I/O: the call, its size, the answer, the failure.

    ``extra_kwargs`` go to every ``create`` call: body fields (``temperature``,
    ``metadata``, …) and the SDK's request options (``extra_headers``,
    ``extra_query``, ``extra_body``, ``timeout``), merged with the request's own.
    ``request_bytes`` is the size of the body the SDK posts: the rendered body
    plus the extra body fields (both SDKs serialise compact UTF-8 JSON, as
    :func:`~ctxrecover.wire.encode_body` does), computed from the messages'
    cached sizes and the few fields that differ, never by encoding the history;
    on a failure, the Content-Length of the request the SDK error carries, when
    it has one.

    ``stream=True`` (or ``extra_kwargs={"stream": True}``) asks for a stream as the
    API does (OpenAI with ``stream_options.include_usage``); the SDK's ``Stream``
    is consumed and accumulated into the same :class:`ChatResponse` the answer
    gives unstreamed. ``on_delta`` gets each piece of text as it arrives (an
    answer that did not stream: its whole text once). An error event the SDK
    raises inside the stream carries its error document as ``body`` and the
    status it states. A failure that is not the SDK's or the network's (a bad
    keyword, a bug, ``on_delta``'s own error) propagates as itself.
    """

    wire_format: WireFormat
    # Body fields the SDK's ``create`` has no parameter for: sent through ``extra_body``.
    extra_body_fields: tuple[str, ...] = ()

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        extra_kwargs: Mapping[str, Any] | None = None,
        stream: bool = False,
        on_delta: DeltaCallback | None = None,
    ) -> None:
        self._client = client
        self.model = model
        self._extra_kwargs = dict(extra_kwargs or {})
        self.stream = stream or self._extra_kwargs.get("stream") is True
        self.on_delta = on_delta
        self._source = f"the {type(client).__module__.split('.', 1)[0]} client"

    def _create_function(self) -> Callable[..., Any]:
        """The SDK method that posts a request (``client.chat.completions.create``, …)."""
        raise NotImplementedError

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
        streaming = stream_body_fields(self.wire_format) if self.stream else {}
        kwargs = {**body, **streaming, **self._extra_kwargs}
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

    def _call(self, request: ChatRequest) -> _Call:
        body = self._body(request)
        kwargs = self._kwargs(body, request.headers)
        return _Call(kwargs, self._wire_size(request, body, kwargs))

    def _reader(self, call: _Call) -> StreamReader:
        return StreamReader(
            self.wire_format, request_bytes=call.size, source=self._source, on_delta=self.on_delta
        )

    def _is_stream(self, result: Any, iterator: str) -> bool:
        """Whether ``create`` gave a stream (an object with ``iterator``) rather than a whole answer."""
        if hasattr(result, "model_dump") or isinstance(result, dict):
            return False
        if hasattr(result, iterator):
            return True
        if inspect.iscoroutine(result):
            result.close()  # never awaited: closed, so it does not warn
        raise ConfigError(
            f"{type(self).__name__}: the client's create() returned a {type(result).__name__}, neither an "
            f"answer nor a stream; give the sync senders a sync client and the Async… senders an async one"
        )

    def _whole(self, result: Any, call: _Call, reader: StreamReader) -> ChatResponse:
        """The answer of a call that did not stream; a SendFailed when it is not an answer."""
        raw = _dump(result)
        try:
            parsed = parse_response(self.wire_format, raw)
        except ValueError as exc:
            raise SendFailed(
                f"unparseable {self.wire_format} response from {self._source}: {exc}",
                request_bytes=call.size,
                body=_body_text(raw),
            ) from exc
        reader.deliver(parsed.message.content)
        return ChatResponse.from_parsed(parsed, request_bytes=call.size, raw=raw)

    def _failure(
        self, exc: Exception, call: _Call, reader: StreamReader, streaming: bool
    ) -> SendFailed | None:
        """The SendFailed ``exc`` means; None when it is neither the SDK's nor the network's (raise it)."""
        if reader.callback_failed or not _is_transport_failure(exc):
            return None  # a programming error (a bad keyword, a wrong client) or on_delta's own
        body = getattr(exc, "body", None)
        if streaming and body is not None:  # an error event the SDK raised while reading the stream
            return reader.error(_body_text(body), status=stated_status(body))
        return SendFailed(
            f"{type(exc).__name__}: {exc}",
            request_bytes=_sent_bytes(exc) or call.size,
            header_bytes=_sent_header_bytes(exc),
        )


class _SyncSDKSender(_SDKSender):
    def send(self, request: ChatRequest) -> ChatResponse:
        """Post ``request`` through the client; its answer, or :class:`SendFailed`."""
        call = self._call(request)
        reader = self._reader(call)
        streaming = False
        try:
            result = self._create_function()(**call.kwargs)
            if not self._is_stream(result, "__iter__"):
                return self._whole(result, call, reader)
            streaming = True
            try:
                for event in result:
                    reader.event(None, _dump(event))
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        except Exception as exc:
            failure = self._failure(exc, call, reader, streaming)
            if failure is None:
                raise
            raise failure from exc
        return reader.end()


class _AsyncSDKSender(_SDKSender):
    async def send(self, request: ChatRequest) -> ChatResponse:
        """Post ``request`` through the async client; its answer, or :class:`SendFailed`."""
        call = self._call(request)
        reader = self._reader(call)
        streaming = False
        try:
            result = await self._create_function()(**call.kwargs)
            if not self._is_stream(result, "__aiter__"):
                return self._whole(result, call, reader)
            streaming = True
            try:
                async for event in result:
                    reader.event(None, _dump(event))
            finally:
                close = getattr(result, "close", None)
                closing = close() if close is not None else None
                if inspect.isawaitable(closing):  # the SDKs' AsyncStream.close is a coroutine
                    await closing
        except Exception as exc:
            failure = self._failure(exc, call, reader, streaming)
            if failure is None:
                raise
            raise failure from exc
        return reader.end()


class _OpenAIChat(_SDKSender):
    wire_format = WireFormat.OPENAI_CHAT

    def _create_function(self) -> Callable[..., Any]:
        create: Callable[..., Any] = self._client.chat.completions.create
        return create


class _AnthropicMessages(_SDKSender):
    wire_format = WireFormat.ANTHROPIC
    extra_body_fields = ("context_management",)

    def _create_function(self) -> Callable[..., Any]:
        create: Callable[..., Any] = self._client.messages.create
        return create


class OpenAISDKSender(_OpenAIChat, _SyncSDKSender):
    """Send through an existing ``openai.OpenAI`` client (Chat Completions).

    Build the client with ``max_retries=0`` so the SDK does not resend a body a
    proxy has just rejected; the Session's recovery does the retrying.
    """


class AnthropicSDKSender(_AnthropicMessages, _SyncSDKSender):
    """Send through an existing ``anthropic.Anthropic`` client (Messages API).

    Build the client with ``max_retries=0`` so the SDK does not resend a body a
    proxy has just rejected; the Session's recovery does the retrying.
    """


class AsyncOpenAISDKSender(_OpenAIChat, _AsyncSDKSender):
    """Send through an existing ``openai.AsyncOpenAI`` client: ``await sender.send(request)``
    (build the client with ``max_retries=0``)."""


class AsyncAnthropicSDKSender(_AnthropicMessages, _AsyncSDKSender):
    """Send through an existing ``anthropic.AsyncAnthropic`` client: ``await sender.send(request)``
    (build the client with ``max_retries=0``)."""
