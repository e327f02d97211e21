"""AWS event-stream messages (Bedrock ``/converse-stream``) read incrementally from bytes, with no I/O.

Each message is framed as AWS documents it
(https://docs.aws.amazon.com/transcribe/latest/dg/streaming-setting-up.html#streaming-event-stream,
the same encoding botocore's ``eventstream.py`` reads): a 12-byte prelude (total length,
headers length, CRC32 of those 8 bytes), the headers, the payload, and a CRC32 of
everything before it. A header is a name (1-byte length), a value type (1 byte) and
the value. A bad checksum or length raises :class:`~ctxrecover.transport.base.MalformedStream`;
frames are bounded by AWS's own limits, so a hostile length costs nothing.
"""

from __future__ import annotations

import binascii
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ctxrecover.transport.base import MalformedStream

__all__ = ["EventStreamDecoder", "EventStreamMessage"]

PRELUDE_BYTES = 12
CHECKSUM_BYTES = 4
MAX_PAYLOAD_BYTES = 16 * 1024 * 1024  # botocore's _MAX_PAYLOAD_LENGTH
MAX_HEADERS_BYTES = 128 * 1024  # botocore's _MAX_HEADERS_LENGTH
# Header value types: fixed sizes, or None for the 2-byte length-prefixed ones (bytes 6, string 7).
VALUE_SIZES: Mapping[int, int | None] = MappingProxyType(
    {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 6: None, 7: None, 8: 8, 9: 16}
)
INTEGER_FORMATS: Mapping[int, str] = MappingProxyType({2: "!b", 3: "!h", 4: "!i", 5: "!q", 8: "!q"})


@dataclass(frozen=True, slots=True)
class EventStreamMessage:
    """One message: its headers (``:event-type``, ``:message-type``, …) and its payload bytes."""

    headers: Mapping[str, object]
    payload: bytes


def _headers(data: bytes) -> dict[str, object]:
    headers: dict[str, object] = {}
    at = 0
    try:
        while at < len(data):
            size = data[at]
            name = data[at + 1 : at + 1 + size].decode("utf-8")
            kind = data[at + 1 + size]
            at += 2 + size
            width = VALUE_SIZES[kind]
            value: object
            if width is None:
                (width,) = struct.unpack_from("!H", data, at)
                at += 2
                raw = data[at : at + width]
                value = raw.decode("utf-8") if kind == 7 else raw
            elif kind in INTEGER_FORMATS:
                (value,) = struct.unpack_from(INTEGER_FORMATS[kind], data, at)
            else:
                value = kind == 0 if width == 0 else data[at : at + width]  # booleans, uuid
            if at + width > len(data):
                raise MalformedStream(f"event-stream header {name!r} runs past the headers")
            at += width
            headers[name] = value
    except (IndexError, KeyError, UnicodeDecodeError, struct.error) as exc:
        raise MalformedStream(f"unreadable event-stream headers ({type(exc).__name__})") from exc
    return headers


class EventStreamDecoder:
    """Bytes of an event stream in, the whole messages they complete out."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    @property
    def pending(self) -> int:
        """Bytes of a message whose end has not arrived (non-zero at the end of a cut stream)."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[EventStreamMessage]:
        """The messages ``data`` completes, in order."""
        self._buffer += data
        messages: list[EventStreamMessage] = []
        while len(self._buffer) >= PRELUDE_BYTES:
            total, headers_size, prelude_crc = struct.unpack_from("!III", self._buffer)
            if binascii.crc32(self._buffer[:8]) != prelude_crc:
                raise MalformedStream("event-stream prelude checksum mismatch")
            payload_size = total - PRELUDE_BYTES - headers_size - CHECKSUM_BYTES
            if headers_size > MAX_HEADERS_BYTES or not 0 <= payload_size <= MAX_PAYLOAD_BYTES:
                raise MalformedStream(f"event-stream message of impossible size ({total} bytes)")
            if len(self._buffer) < total:
                break
            frame = bytes(self._buffer[:total])
            del self._buffer[:total]
            (checksum,) = struct.unpack_from("!I", frame, total - CHECKSUM_BYTES)
            if binascii.crc32(frame[: total - CHECKSUM_BYTES]) != checksum:
                raise MalformedStream("event-stream message checksum mismatch")
            start = PRELUDE_BYTES + headers_size
            headers = _headers(frame[PRELUDE_BYTES:start])
            messages.append(
                EventStreamMessage(MappingProxyType(headers), frame[start : total - CHECKSUM_BYTES])
            )
        return messages
