"""The stream decoders: SSE and AWS event-stream, read incrementally wherever the bytes are cut."""

from __future__ import annotations

import binascii
import struct
import uuid

import pytest

from ctxrecover.transport.base import MalformedStream
from ctxrecover.transport.eventstream import EventStreamDecoder
from ctxrecover.transport.sse import ServerSentEvent, SSEDecoder
from simulator.providers.streaming import eventstream_frame, eventstream_message

# Every rule of the event-stream format at once: a BOM, a comment, a named event, data split over
# lines, CRLF / CR / LF line ends, a field with no space and one with no colon, unknown fields,
# an empty data line, multi-byte UTF-8, and OpenAI's end marker.
SSE_SAMPLE = (
    "\ufeff: OPENROUTER PROCESSING\r\n\r\n"
    "event: message_start\n"
    'data: {"a":\n'
    "data:  1}\n"
    "\n"
    "id: 7\rretry: 10\rdata:é日本\r\r"
    "event: ping\r\n"
    "data\r\n"
    "\r\n"
    "event: nothing\n\n"
    "data: [DONE]\n\n"
).encode()
SSE_EVENTS = [
    ServerSentEvent("message_start", '{"a":\n 1}'),
    ServerSentEvent(None, "é日本"),
    ServerSentEvent("ping", ""),
    ServerSentEvent(None, "[DONE]"),
]


def decode(chunks: list[bytes]) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    return events + decoder.flush()


@pytest.mark.parametrize("cut", range(len(SSE_SAMPLE) + 1))
def test_sse_events_are_the_same_wherever_the_bytes_are_cut(cut: int) -> None:
    assert decode([SSE_SAMPLE[:cut], SSE_SAMPLE[cut:]]) == SSE_EVENTS


def test_sse_events_read_one_byte_at_a_time_are_the_same() -> None:
    assert decode([SSE_SAMPLE[i : i + 1] for i in range(len(SSE_SAMPLE))]) == SSE_EVENTS


def test_a_cr_line_end_followed_by_an_lf_in_the_next_chunks_is_one_line_end() -> None:
    # CR | LF | LF: the first LF completes the CR's line end, the second is the blank line.
    assert decode([b"data: x\r", b"\n", b"\n", b"data: y\n\n"]) == [
        ServerSentEvent(None, "x"),
        ServerSentEvent(None, "y"),
    ]


def test_the_last_event_is_dispatched_without_its_blank_line_but_a_cut_line_is_dropped() -> None:
    assert decode([b'data: {"done": true}\n']) == [ServerSentEvent(None, '{"done": true}')]
    assert decode([b'data: {"done": true}\ndata: {"cut']) == [ServerSentEvent(None, '{"done": true}')]
    assert decode([b'data: {"cut']) == []


# -- AWS event-stream ------------------------------------------------------------------------


def header(name: str, kind: int, value: bytes) -> bytes:
    return struct.pack("!B", len(name)) + name.encode() + struct.pack("!B", kind) + value


def frame(headers: bytes, payload: bytes) -> bytes:
    """An event-stream message with raw ``headers`` (any value type) around ``payload``."""
    total = 12 + len(headers) + len(payload) + 4
    prelude = struct.pack("!II", total, len(headers))
    message = prelude + struct.pack("!I", binascii.crc32(prelude)) + headers + payload
    return message + struct.pack("!I", binascii.crc32(message))


EVERY_HEADER_TYPE = frame(
    header("yes", 0, b"")
    + header("no", 1, b"")
    + header("byte", 2, struct.pack("!b", -3))
    + header("short", 3, struct.pack("!h", -300))
    + header("int", 4, struct.pack("!i", 70_000))
    + header("long", 5, struct.pack("!q", -(2**40)))
    + header("bytes", 6, struct.pack("!H", 3) + b"\x00\x01\x02")
    + header("string", 7, struct.pack("!H", 6) + "héllo".encode())
    + header("time", 8, struct.pack("!q", 1_700_000_000_000))
    + header("uuid", 9, uuid.UUID(int=42).bytes),
    b"payload",
)
STREAM = b"".join(
    [
        eventstream_frame("messageStart", {"role": "assistant"}),
        eventstream_frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "é" * 40}}),
        eventstream_message(
            ((":exception-type", "throttlingException"), (":message-type", "exception")),
            {"message": "Too many tokens, please wait before trying again."},
        ),
        EVERY_HEADER_TYPE,
    ]
)


def botocore_messages(data: bytes) -> list[tuple[dict[str, object], bytes]]:
    """The messages botocore's own event-stream parser reads from ``data`` (the reference reading)."""
    eventstream = pytest.importorskip("botocore.eventstream")
    buffer = eventstream.EventStreamBuffer()
    buffer.add_data(data)
    return [(dict(message.headers), message.payload) for message in buffer]


@pytest.mark.parametrize("cut", [0, 1, 11, 12, 13, 40, 100, 200, len(STREAM) - 1, len(STREAM)])
def test_eventstream_messages_read_wherever_the_bytes_are_cut_are_botocores(cut: int) -> None:
    decoder = EventStreamDecoder()
    messages = decoder.feed(STREAM[:cut]) + decoder.feed(STREAM[cut:])
    assert [(dict(m.headers), m.payload) for m in messages] == botocore_messages(STREAM)
    assert decoder.pending == 0


def test_eventstream_header_values_of_every_type() -> None:
    (message,) = EventStreamDecoder().feed(EVERY_HEADER_TYPE)
    assert dict(message.headers) == {
        "yes": True,
        "no": False,
        "byte": -3,
        "short": -300,
        "int": 70_000,
        "long": -(2**40),
        "bytes": b"\x00\x01\x02",
        "string": "héllo",
        "time": 1_700_000_000_000,
        "uuid": uuid.UUID(int=42).bytes,
    }
    assert message.payload == b"payload"


def test_a_partial_eventstream_message_waits_and_counts_as_pending() -> None:
    decoder = EventStreamDecoder()
    first = eventstream_frame("messageStop", {"stopReason": "end_turn"})
    assert decoder.feed(first[:-5]) == []
    assert decoder.pending == len(first) - 5
    assert [m.headers[":event-type"] for m in decoder.feed(first[-5:])] == ["messageStop"]


def corrupt(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def prelude_only(total: int, headers: int) -> bytes:
    """A valid prelude (lengths and their checksum) announcing ``total`` bytes with ``headers`` of headers."""
    prelude = struct.pack("!II", total, headers)
    return prelude + struct.pack("!I", binascii.crc32(prelude))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (corrupt(STREAM, 2), "event-stream prelude checksum mismatch"),
        (corrupt(STREAM, 20), "event-stream message checksum mismatch"),
        (prelude_only(30, 1_000_000), "event-stream message of impossible size (30 bytes)"),
        (prelude_only(2**31, 0), f"event-stream message of impossible size ({2**31} bytes)"),
        (frame(header("s", 7, struct.pack("!H", 60) + b"short"), b"{}"), "event-stream header 's' runs past"),
        (frame(header("s", 11, b""), b"{}"), "unreadable event-stream headers (KeyError)"),
    ],
    ids=[
        "prelude-crc",
        "message-crc",
        "headers-past-message",
        "over-16MiB",
        "header-past-end",
        "unknown-type",
    ],
)
def test_a_damaged_eventstream_raises_malformed_stream(data: bytes, message: str) -> None:
    with pytest.raises(MalformedStream) as info:
        EventStreamDecoder().feed(data)
    assert str(info.value).startswith(message)
