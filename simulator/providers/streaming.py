"""Streamed answers: each provider's real event sequence for one reply, as the bytes on the wire.

With ``stream=true`` (OpenAI, Anthropic), ``:streamGenerateContent`` (Gemini) or
``/converse-stream`` (Bedrock) the mock answers with the same reply as
:meth:`~simulator.providers.wire.Wire.reply_payload` cut into the provider's own events:

=================  ===========================================================================
format             events (sources: the official SDKs' stream parsers and recorded fixtures)
=================  ===========================================================================
openai-chat        ``data: {chat.completion.chunk}`` … a ``finish_reason`` chunk, a usage chunk
                   (``choices: []``) when ``stream_options.include_usage`` (the chunks before
                   it then carry ``"usage": null``), then ``data: [DONE]``
openai-responses   ``response.created``, ``response.in_progress``, per output item
                   ``output_item.added`` … ``output_item.done``, then ``response.completed``
                   (``response.incomplete`` when cut at ``max_output_tokens``); no ``[DONE]``
anthropic          ``message_start``, ``content_block_start``, ``ping``, ``content_block_delta``
                   (``text_delta`` / ``input_json_delta``), ``content_block_stop``,
                   ``message_delta`` (stop reason, usage), ``message_stop``
gemini             ``data: {GenerateContentResponse}`` chunks (``alt=sse``; a JSON array
                   otherwise), the last with ``finishReason`` and the full ``usageMetadata``
bedrock-converse   AWS event-stream frames: ``messageStart``, ``contentBlockStart`` (tool use),
                   ``contentBlockDelta``, ``contentBlockStop``, ``messageStop``, ``metadata``
=================  ===========================================================================

Sources: openai-python ``src/openai/_streaming.py`` and ``.inline-snapshot/external/*.bin``
(recorded chat chunks), ``src/openai/lib/streaming/responses/_responses.py`` (event order
the Responses accumulator requires); anthropic-sdk-python ``tests/lib/streaming/fixtures/
basic_response.txt`` and ``tool_use_response.txt``; Gemini REST docs for
``streamGenerateContent?alt=sse``; AWS event-stream encoding (prelude, CRC32) for Bedrock.
"""

from __future__ import annotations

import binascii
import json
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import httpx

from simulator.providers.openai import SYSTEM_FINGERPRINT
from simulator.providers.wire import ReplyParts, Wire

__all__ = [
    "DELTA_CHARS",
    "STREAM_CONTENT_TYPES",
    "StreamOptions",
    "eventstream_frame",
    "eventstream_message",
    "sse_event",
    "stream_response",
]

DELTA_CHARS = 24  # characters per text delta: real APIs send a few tokens per event
SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
EVENTSTREAM_CONTENT_TYPE = "application/vnd.amazon.eventstream"
STREAM_CONTENT_TYPES: Mapping[str, str] = MappingProxyType(
    {
        "openai-chat": SSE_CONTENT_TYPE,
        "openai-responses": SSE_CONTENT_TYPE,
        "anthropic": SSE_CONTENT_TYPE,
        "gemini": SSE_CONTENT_TYPE,
        "bedrock-converse": EVENTSTREAM_CONTENT_TYPE,
    }
)
GEMINI_ARRAY_CONTENT_TYPE = "application/json; charset=UTF-8"
EVENTSTREAM_STRING = 7  # header value type of a string in the AWS event-stream encoding
Payload = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """What the request asked of the stream: OpenAI's usage chunk, Gemini's SSE (vs a JSON array)."""

    include_usage: bool = False
    sse: bool = True


def sse_event(data: object, event: str | None = None, *, separator: str = "\n") -> bytes:
    """One server-sent event: an optional ``event:`` line, a ``data:`` line (JSON unless a str)."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}{separator}" if event else ""
    return f"{head}data: {text}{separator}{separator}".encode()


def _pieces(text: str) -> list[str]:
    return [text[i : i + DELTA_CHARS] for i in range(0, len(text), DELTA_CHARS)]


# -- OpenAI Chat Completions -----------------------------------------------------------


def _chat_events(parts: ReplyParts, payload: Payload, options: StreamOptions) -> Iterator[bytes]:
    base: dict[str, Any] = {
        "id": payload["id"],
        "object": "chat.completion.chunk",
        "created": payload["created"],
        "model": payload["model"],
        "system_fingerprint": SYSTEM_FINGERPRINT,
    }
    if options.include_usage:  # every chunk then has a usage field, null but in the last one
        base["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse_event({**base, "choices": [choice]})

    yield chunk({"role": "assistant", "content": "" if parts.text else None, "refusal": None})
    for piece in _pieces(parts.text):
        yield chunk({"content": piece})
    for index, call in enumerate(parts.tool_calls):
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
        )
        for piece in _pieces(call.arguments):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, payload["choices"][0]["finish_reason"])
    if options.include_usage:
        yield sse_event({**base, "choices": [], "usage": payload["usage"]})
    yield sse_event("[DONE]")


# -- OpenAI Responses ------------------------------------------------------------------


def _responses_events(parts: ReplyParts, payload: Payload, options: StreamOptions) -> Iterator[bytes]:
    sequence = iter(range(1_000_000))

    def event(kind: str, **fields: Any) -> bytes:
        return sse_event({"type": kind, "sequence_number": next(sequence), **fields}, kind)

    pending = {**payload, "status": "in_progress", "incomplete_details": None, "output": [], "usage": None}
    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    for index, item in enumerate(payload["output"]):
        if item["type"] == "message":
            yield from _responses_message(event, index, item)
        else:
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            for piece in _pieces(item["arguments"]):
                yield event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=index,
                    delta=piece,
                )
            yield event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                name=item["name"],
                arguments=item["arguments"],
            )
            yield event("response.output_item.done", output_index=index, item=item)
    final = "response.incomplete" if payload["status"] == "incomplete" else "response.completed"
    yield event(final, response=payload)


def _responses_message(event: Callable[..., bytes], index: int, item: Mapping[str, Any]) -> Iterator[bytes]:
    part = item["content"][0]
    where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    yield event(
        "response.output_item.added",
        output_index=index,
        item={**item, "status": "in_progress", "content": []},
    )
    yield event("response.content_part.added", **where, part={**part, "text": ""})
    for piece in _pieces(part["text"]):
        yield event("response.output_text.delta", **where, delta=piece, logprobs=[])
    yield event("response.output_text.done", **where, text=part["text"], logprobs=[])
    yield event("response.content_part.done", **where, part=part)
    yield event("response.output_item.done", output_index=index, item=item)


# -- Anthropic Messages ----------------------------------------------------------------


def _anthropic_events(parts: ReplyParts, payload: Payload, options: StreamOptions) -> Iterator[bytes]:
    usage = payload["usage"]
    start = {
        **payload,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    yield sse_event({"type": "message_start", "message": start}, "message_start")
    for index, block in enumerate(payload["content"]):
        opening: dict[str, Any]
        if block["type"] == "text":
            opening, deltas = (
                {"type": "text", "text": ""},
                [{"type": "text_delta", "text": piece} for piece in _pieces(block["text"])],
            )
        else:
            arguments = json.dumps(block["input"], ensure_ascii=False)
            opening, deltas = (
                {**block, "input": {}},
                [{"type": "input_json_delta", "partial_json": piece} for piece in ["", *_pieces(arguments)]],
            )
        yield sse_event(
            {"type": "content_block_start", "index": index, "content_block": opening}, "content_block_start"
        )
        if index == 0:
            yield sse_event({"type": "ping"}, "ping")
        for delta in deltas:
            yield sse_event(
                {"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"
            )
        yield sse_event({"type": "content_block_stop", "index": index}, "content_block_stop")
    yield sse_event(
        {
            "type": "message_delta",
            "delta": {"stop_reason": payload["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
        "message_delta",
    )
    yield sse_event({"type": "message_stop"}, "message_stop")


# -- Gemini ----------------------------------------------------------------------------


def _gemini_chunks(payload: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    candidate = payload["candidates"][0]
    usage = payload["usageMetadata"]
    texts = [p["text"] for p in candidate["content"]["parts"] if "text" in p]
    calls = [p for p in candidate["content"]["parts"] if "text" not in p]
    pieces = [{"text": piece} for text in texts for piece in _pieces(text)]
    groups: list[list[dict[str, Any]]] = [[piece] for piece in pieces[:-1]]
    groups.append(pieces[-1:] + calls)  # the last chunk carries the function calls and the finish reason
    for number, group in enumerate(groups, start=1):
        last = number == len(groups)
        chunk: dict[str, Any] = {"content": {"parts": group, "role": "model"}, "index": 0}
        if last:
            chunk["finishReason"] = candidate["finishReason"]
        yield {
            "candidates": [chunk],
            "usageMetadata": usage
            if last
            else {
                "promptTokenCount": usage["promptTokenCount"],
                "totalTokenCount": usage["promptTokenCount"],
            },
            "modelVersion": payload["modelVersion"],
            "responseId": payload["responseId"],
        }


def _gemini_events(parts: ReplyParts, payload: Payload, options: StreamOptions) -> Iterator[bytes]:
    chunks = list(_gemini_chunks(payload))
    if options.sse:
        for chunk in chunks:
            yield sse_event(chunk, separator="\r\n")
        return
    texts = [json.dumps(chunk, ensure_ascii=False, indent=2) for chunk in chunks]
    yield ("[" + ",\r\n".join(texts) + "]").encode()


# -- Bedrock ConverseStream (AWS event-stream framing) ---------------------------------


def eventstream_message(headers: Sequence[tuple[str, str]], payload: Mapping[str, Any]) -> bytes:
    """One AWS event-stream message: prelude (lengths + CRC32), string headers, JSON payload, CRC32."""
    head = b""
    for name, value in headers:
        encoded = value.encode()
        head += (
            struct.pack("!B", len(name))
            + name.encode()
            + struct.pack("!BH", EVENTSTREAM_STRING, len(encoded))
            + encoded
        )
    body = json.dumps(payload, separators=(",", ":")).encode()
    total = 12 + len(head) + len(body) + 4
    prelude = struct.pack("!II", total, len(head))
    message = prelude + struct.pack("!I", binascii.crc32(prelude)) + head + body
    return message + struct.pack("!I", binascii.crc32(message))


def eventstream_frame(event_type: str, payload: Mapping[str, Any]) -> bytes:
    """One event of a ConverseStream answer (``:message-type`` ``event``) as an event-stream message."""
    return eventstream_message(
        ((":event-type", event_type), (":content-type", "application/json"), (":message-type", "event")),
        payload,
    )


def _bedrock_events(parts: ReplyParts, payload: Payload, options: StreamOptions) -> Iterator[bytes]:
    yield eventstream_frame("messageStart", {"role": "assistant"})
    for index, block in enumerate(payload["output"]["message"]["content"]):
        if "text" in block:
            for piece in _pieces(block["text"]):
                yield eventstream_frame(
                    "contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": piece}}
                )
        else:
            use = block["toolUse"]
            yield eventstream_frame(
                "contentBlockStart",
                {
                    "contentBlockIndex": index,
                    "start": {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}},
                },
            )
            for piece in _pieces(json.dumps(use["input"], ensure_ascii=False)):
                yield eventstream_frame(
                    "contentBlockDelta", {"contentBlockIndex": index, "delta": {"toolUse": {"input": piece}}}
                )
        yield eventstream_frame("contentBlockStop", {"contentBlockIndex": index})
    yield eventstream_frame("messageStop", {"stopReason": payload["stopReason"]})
    yield eventstream_frame("metadata", {"usage": payload["usage"], "metrics": payload["metrics"]})


Streamer = Callable[[ReplyParts, Payload, StreamOptions], Iterator[bytes]]
STREAMERS: Mapping[str, Streamer] = MappingProxyType(
    {
        "openai-chat": _chat_events,
        "openai-responses": _responses_events,
        "anthropic": _anthropic_events,
        "gemini": _gemini_events,
        "bedrock-converse": _bedrock_events,
    }
)


def stream_events(wire: Wire, parts: ReplyParts, options: StreamOptions = StreamOptions()) -> list[bytes]:
    """The events of ``parts`` as ``wire``'s provider streams them, each as its bytes on the wire."""
    return list(STREAMERS[wire.fmt](parts, wire.reply_payload(parts), options))


def stream_response(
    wire: Wire, parts: ReplyParts, options: StreamOptions = StreamOptions()
) -> httpx.Response:
    """A 200 streamed answer: the events of :func:`stream_events` with the provider's content type."""
    content_type = STREAM_CONTENT_TYPES[wire.fmt]
    if wire.fmt == "gemini" and not options.sse:
        content_type = GEMINI_ARRAY_CONTENT_TYPE
    headers = {"content-type": content_type, "cache-control": "no-cache", **wire.reply_headers(parts)}
    return httpx.Response(200, headers=headers, content=b"".join(stream_events(wire, parts, options)))
