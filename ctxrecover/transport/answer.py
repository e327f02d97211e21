"""What a provider's answer means — a :class:`ChatResponse` or the :class:`SendFailed` to raise — with no I/O.

Every sender, sync or async, httpx or SDK, hands its answer to these readers and only
does the I/O around them (tenacity's ``BaseRetrying.iter()`` / httpx's ``auth_flow`` split):

- :class:`AnswerReader` reads one HTTP answer: an error status, a whole JSON body, or an
  event stream (SSE; AWS event-stream for Bedrock) fed to it chunk by chunk as it arrives.
- :class:`StreamReader` reads a stream's decoded events (the SDKs yield those), calls
  ``on_delta`` with each piece of text and accumulates the answer
  (:mod:`~ctxrecover.transport.accumulate`) into the ChatResponse the same answer gives
  unstreamed.

A stream is a provider's answer too, so what goes wrong inside one becomes a
:class:`SendFailed` that classification reads as it would the non-streamed error: an
error event (Anthropic ``event: error``, an ``{"error": …}`` chunk after OpenRouter's
``finish_reason``, Gemini's error chunk, Responses ``response.failed``, a Bedrock
exception frame) carries its own document as ``body`` and the status it states
(:func:`stated_status`), never the 200 the stream began with; a stream that ends
before the event that settles the answer is an unexpected EOF. Only the ``on_delta``
callback and bugs raise anything else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ctxrecover.transport.accumulate import ACCUMULATORS
from ctxrecover.transport.base import ChatResponse, DeltaCallback, MalformedStream, SendFailed
from ctxrecover.transport.eventstream import EventStreamDecoder, EventStreamMessage
from ctxrecover.transport.sse import ServerSentEvent, SSEDecoder
from ctxrecover.wire import WireFormat, encode_body, parse_response

__all__ = ["ERROR_TYPE_STATUSES", "STREAM_CONTENT_TYPES", "AnswerReader", "StreamReader", "stated_status"]

STREAM_CONTENT_TYPES = ("text/event-stream", "application/vnd.amazon.eventstream")
STREAM_END_DATA = "[DONE]"  # OpenAI's last SSE data line
# Event names (or ``type`` fields) that end a stream with an error.
ERROR_EVENTS = frozenset({"error", "response.failed"})
# The HTTP status each typed error is answered with when it is not streamed.
ERROR_TYPE_STATUSES: Mapping[str, int] = MappingProxyType(
    {
        # Anthropic error types, https://docs.anthropic.com/en/api/errors
        "invalid_request_error": 400,
        "authentication_error": 401,
        "billing_error": 402,
        "permission_error": 403,
        "not_found_error": 404,
        "request_too_large": 413,
        "rate_limit_error": 429,
        "api_error": 500,
        "timeout_error": 504,
        "overloaded_error": 529,
        # Bedrock ConverseStream stream exceptions (``:exception-type``), with the statuses of the
        # same errors unstreamed: https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html
        "validationException": 400,
        "throttlingException": 429,
        "modelStreamErrorException": 424,
        "internalServerException": 500,
        "serviceUnavailableException": 503,
    }
)
# Formats whose stream may also come as one JSON array of chunks (Gemini without ``alt=sse``).
ARRAY_STREAM_FORMATS = frozenset({WireFormat.GEMINI})
MAX_BODY_CHARS = 20_000  # of an unreadable event kept as the failure's body


def _status(value: Any) -> int | None:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return value
    return None


def stated_status(document: Any) -> int | None:
    """The HTTP status an error document states: a numeric ``code``/``status`` (its ``error``'s first),
    else the status of its error ``type`` (:data:`ERROR_TYPE_STATUSES`); None when it states none.

    >>> stated_status({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED"}})
    429
    >>> stated_status({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    529
    """
    if not isinstance(document, Mapping):
        return None
    candidates = [document.get("error"), document]
    for doc in candidates:
        if isinstance(doc, Mapping):
            status = _status(doc.get("code")) or _status(doc.get("status"))
            if status is not None:
                return status
    for doc in candidates:
        if isinstance(doc, Mapping) and isinstance(doc.get("type"), str):
            status = ERROR_TYPE_STATUSES.get(doc["type"])
            if status is not None:
                return status
    return None


def _is_error(name: str | None, data: Any) -> bool:
    if name in ERROR_EVENTS:
        return True
    return isinstance(data, Mapping) and (
        data.get("type") in ERROR_EVENTS
        or (isinstance(data.get("error"), Mapping | str) and bool(data["error"]))
    )


class StreamReader:
    """The events of one streamed answer, in order, into its :class:`ChatResponse` (or a SendFailed).

    ``source`` names where the stream came from in failure messages (a URL without its query);
    ``headers`` are the answer's, carried by every failure.
    """

    def __init__(
        self,
        wire_format: WireFormat,
        *,
        request_bytes: int,
        source: str,
        headers: Mapping[str, str] | None = None,
        on_delta: DeltaCallback | None = None,
    ) -> None:
        self.wire_format = wire_format
        self.request_bytes = request_bytes
        self.source = source
        self.headers = dict(headers or {})
        self._on_delta = on_delta
        self._accumulator = ACCUMULATORS[wire_format]()
        self._delivered = False
        # Set while ``on_delta`` runs and left set when it raised: what propagates then is the caller's
        # own error (an httpx error of its UI included), never the provider's, and is raised as itself.
        self.callback_failed = False

    def deliver(self, text: str) -> None:
        """Hand ``text`` to ``on_delta``."""
        self._delivered = True
        if self._on_delta is not None and text:
            self.callback_failed = True
            self._on_delta(text)
            self.callback_failed = False

    def event(self, name: str | None, data: Any, *, text: str | None = None) -> None:
        """Take the next event (``text``: its data as sent, for an error's body); raise SendFailed for an
        error event or one that cannot be read."""
        if _is_error(name, data):
            body = text if text is not None else encode_body(data).decode()
            raise self.error(body, status=stated_status(data))
        if not isinstance(data, Mapping):
            raise self.unreadable(MalformedStream("an event that is not a JSON object", data=text))
        try:
            delta = self._accumulator.feed(name, data)
        except MalformedStream as exc:
            raise self.unreadable(exc) from exc
        if delta:
            self.deliver(delta)

    def end(self) -> ChatResponse:
        """The answer, once the stream has ended; a SendFailed when it ended before the answer was settled."""
        if not self._accumulator.complete:
            raise SendFailed(
                f"unexpected EOF: the {self.wire_format} stream from {self.source} ended before its last"
                " event",
                request_bytes=self.request_bytes,
                headers=self.headers,
            )
        try:
            raw = self._accumulator.raw()
            parsed = parse_response(self.wire_format, raw)
        except MalformedStream as exc:
            raise self.unreadable(exc) from exc
        except ValueError as exc:  # the accumulated document is not an answer (a field missing)
            raise self.unreadable(MalformedStream(str(exc))) from exc
        if not self._delivered:  # an answer whose text did not stream reaches on_delta whole
            self.deliver(parsed.message.content)
        return ChatResponse.from_parsed(parsed, request_bytes=self.request_bytes, raw=raw)

    def error(self, body: str, *, status: int | None) -> SendFailed:
        """The failure of an error event: its document as ``body``, the status it states."""
        return SendFailed(
            f"the {self.wire_format} stream from {self.source} reported an error",
            request_bytes=self.request_bytes,
            status=status,
            body=body,
            headers=self.headers,
        )

    def unreadable(self, exc: MalformedStream) -> SendFailed:
        """The failure of a stream that cannot be read; the offending data (bounded) as ``body``."""
        return SendFailed(
            f"unreadable {self.wire_format} stream from {self.source}: {exc}",
            request_bytes=self.request_bytes,
            body=exc.data[:MAX_BODY_CHARS] if exc.data else None,
            headers=self.headers,
        )


class AnswerReader:
    """One HTTP answer to a request: ``streamed`` when it is an event stream with a success status,
    then fed its body chunk by chunk (:meth:`feed`, :meth:`finish`); else read whole (:meth:`whole`)."""

    def __init__(
        self,
        wire_format: WireFormat,
        *,
        source: str,
        request_bytes: int,
        status: int,
        headers: Mapping[str, str],
        header_bytes: int | None = None,
        on_delta: DeltaCallback | None = None,
    ) -> None:
        self.wire_format = wire_format
        self.source = source
        self.request_bytes = request_bytes
        self.status = status
        self.headers = headers
        self.header_bytes = header_bytes
        content_type = headers.get("content-type", "").lower()
        self.streamed = status < 400 and any(kind in content_type for kind in STREAM_CONTENT_TYPES)
        self._events = StreamReader(
            wire_format, request_bytes=request_bytes, source=source, headers=headers, on_delta=on_delta
        )
        self._sse = SSEDecoder()
        self._frames = EventStreamDecoder() if "eventstream" in content_type else None
        self._ended = False  # OpenAI's [DONE] arrived: what follows is not part of the answer

    @property
    def callback_failed(self) -> bool:
        """Whether ``on_delta`` raised (see :attr:`StreamReader.callback_failed`)."""
        return self._events.callback_failed

    def feed(self, data: bytes) -> None:
        """Take the next bytes of a streamed body."""
        if self._frames is not None:
            try:
                messages = self._frames.feed(data)
            except MalformedStream as exc:
                raise self._events.unreadable(exc) from exc
            for message in messages:
                self._message(message)
        else:
            for event in self._sse.feed(data):
                self._event(event)

    def finish(self) -> ChatResponse:
        """The streamed answer, once its body has ended."""
        for event in self._sse.flush() if self._frames is None else ():
            self._event(event)
        return self._events.end()

    def _event(self, event: ServerSentEvent) -> None:
        if self._ended or not event.data.strip():
            return
        if event.data == STREAM_END_DATA:
            self._ended = True
            return
        try:
            data = json.loads(event.data)
        except ValueError:
            if event.event in ERROR_EVENTS:
                raise self._events.error(event.data, status=None) from None
            raise self._events.unreadable(
                MalformedStream("event data is not JSON", data=event.data)
            ) from None
        self._events.event(event.event, data, text=event.data)

    def _message(self, message: EventStreamMessage) -> None:
        headers = message.headers
        payload = message.payload.decode("utf-8", "replace")
        if headers.get(":message-type") == "exception":
            kind = headers.get(":exception-type")
            raise self._events.error(
                payload, status=ERROR_TYPE_STATUSES.get(kind if isinstance(kind, str) else "")
            )
        if headers.get(":message-type") == "error":
            raise self._events.error(
                f"{headers.get(':error-code')}: {headers.get(':error-message')}", status=None
            )
        try:
            data = json.loads(payload)
        except ValueError:
            raise self._events.unreadable(
                MalformedStream("event payload is not JSON", data=payload)
            ) from None
        name = headers.get(":event-type")
        self._events.event(name if isinstance(name, str) else None, data, text=payload)

    def whole(self, text: str) -> ChatResponse:
        """The answer of a body read whole (an error status, or an answer that did not stream)."""
        if self.status >= 400:
            raise SendFailed(
                f"HTTP {self.status} from {self.source}",
                request_bytes=self.request_bytes,
                status=self.status,
                body=text,
                headers=self.headers,
                header_bytes=self.header_bytes,
            )
        try:
            raw = json.loads(text)
            chunks = raw if isinstance(raw, list) and self.wire_format in ARRAY_STREAM_FORMATS else None
            parsed = parse_response(self.wire_format, raw) if chunks is None else None
        except ValueError as exc:
            # A 2xx that is not the provider's JSON (an HTML interstitial, a truncated body).
            raise SendFailed(
                f"unparseable {self.status} response from {self.source}: {exc}",
                request_bytes=self.request_bytes,
                status=self.status,
                body=text,
                headers=self.headers,
            ) from exc
        if parsed is None:  # the chunks of a stream sent as one array
            for chunk in chunks or ():
                self._events.event(None, chunk)
            return self._events.end()
        self._events.deliver(parsed.message.content)
        return ChatResponse.from_parsed(parsed, request_bytes=self.request_bytes, raw=raw)
