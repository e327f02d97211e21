"""Answers that fail after they began streaming: each provider's in-stream form of an error answer.

Once a provider has sent its 200 and some events it can no longer change the status; when
the answer then fails (an overload, a rate limit, a server fault) it sends the error as one
more event and ends the stream. :func:`error_event` turns a non-streamed error answer (a
:class:`~simulator.providers.wire.Wire` error: status, headers, JSON body) into that event;
:func:`failing_stream` ends a streamed answer with it after its first events.

=================  ==========================================================================
format             the error, inside the stream
=================  ==========================================================================
anthropic          ``event: error`` + the error body (``{"type": "error", "error": …}``)
openai-chat        ``data:`` + the error body (``{"error": …}``)
openai-responses   ``event: error`` + ``{"type": "error", code, message, param, sequence_number}``
gemini             ``data:`` + the error body (``{"error": {code, message, status}}``)
bedrock-converse   an event-stream *exception* message: ``:message-type`` ``exception``,
                   ``:exception-type`` the error type in lower camel case, the ``{"message"}`` body
=================  ==========================================================================

Sources: https://docs.anthropic.com/en/docs/build-with-claude/streaming#error-events;
openai-python ``src/openai/_streaming.py`` (a chunk with ``error`` raises ``APIError``);
https://platform.openai.com/docs/api-reference/responses-streaming/error; the Gemini REST
errors (``google.rpc.Status`` JSON); the Bedrock ``ConverseStream`` API reference (its stream
exceptions: ``throttlingException``, ``validationException``, …) and botocore's
``EventStreamError``.
"""

from __future__ import annotations

import json
import re
import struct

import httpx

from simulator.providers.streaming import eventstream_message, sse_event

__all__ = ["error_event", "failing_stream", "split_events"]

SSE_EVENT = re.compile(rb".*?(?:\r\n\r\n|\n\n)", re.DOTALL)


def _exception_type(error: httpx.Response) -> str:
    """Bedrock's error type (``x-amzn-errortype: ThrottlingException:http://…``) as a stream names it."""
    name = error.headers.get("x-amzn-errortype", "InternalServerException").split(":", 1)[0]
    return name[:1].lower() + name[1:]


def error_event(fmt: str, error: httpx.Response, *, sequence_number: int = 0) -> bytes:
    """The bytes that carry the non-streamed error answer ``error`` of ``fmt`` inside a stream
    (``sequence_number`` numbers the Responses event)."""
    body = json.loads(error.content)
    if fmt == "anthropic":
        return sse_event(body, "error")
    if fmt == "openai-responses":
        inner = body["error"]
        event = {
            "type": "error",
            "code": inner.get("code"),
            "message": inner["message"],
            "param": inner.get("param"),
            "sequence_number": sequence_number,
        }
        return sse_event(event, "error")
    if fmt == "gemini":
        return sse_event(body, separator="\r\n")
    if fmt == "bedrock-converse":
        headers = (
            (":exception-type", _exception_type(error)),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        )
        return eventstream_message(headers, body)
    return sse_event(body)


def split_events(fmt: str, body: bytes) -> list[bytes]:
    """A streamed body cut into its events, each as its bytes (SSE events; event-stream messages)."""
    if fmt != "bedrock-converse":
        return SSE_EVENT.findall(body)
    events, at = [], 0
    while at < len(body):
        (total,) = struct.unpack_from("!I", body, at)
        events.append(body[at : at + total])
        at += total
    return events


def failing_stream(
    fmt: str, streamed: httpx.Response, error: httpx.Response, *, after: int
) -> httpx.Response:
    """``streamed`` (a 200 event stream of ``fmt``) keeping its first ``after`` events, then ending with
    ``error`` as the provider streams it: an answer that failed after it began."""
    events = split_events(fmt, streamed.read())[:after]
    tail = error_event(fmt, error, sequence_number=len(events))
    headers = [(k, v) for k, v in streamed.headers.multi_items() if k.lower() != "content-length"]
    return httpx.Response(200, headers=headers, content=b"".join(events) + tail)
