"""HTTP/1.1 on one loopback connection: h11 framing over asyncio streams, with bounded waits.

:class:`HttpConnection` reads a request head (an idle keep-alive wait, then a total head
deadline), reads a body (a minimum average rate after a grace period — never a timeout that
restarts per byte), and writes answers whole or piece by piece. It also carries out what a
faulty gateway does to a connection: an answer followed by ``Connection: close`` and a
lingering drain, a TCP reset (``SO_LINGER`` 0), a silent close.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import h11
import httpx

from simulator.proxy.limits import ServerLimits

__all__ = [
    "HOP_BY_HOP_HEADERS",
    "BodyTooLarge",
    "ClientGone",
    "ClientTooSlow",
    "HttpConnection",
    "OverBudget",
    "Reply",
    "json_reply",
    "text_reply",
]

LINGER_S = 2.0  # like nginx's lingering close: drain an unread body so the client can read our answer
READ_CHUNK_BYTES = 64 * 1024
# Heads are read in small chunks so that little body comes in with them: a reset after
# N body bytes then stops reading at N (at most this far past it when N is tiny).
HEAD_CHUNK_BYTES = 4 * 1024
HOP_BY_HOP_HEADERS = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
    }
)
NO_BODY_STATUSES = frozenset({204, 304})


class ClientGone(Exception):
    """The client closed or reset the connection before its request was complete."""


class ClientTooSlow(Exception):
    """The client missed its head deadline or its body's minimum rate."""


class BodyTooLarge(Exception):
    """The body passed the server's ``max_body_bytes``."""


class OverBudget(Exception):
    """Holding the body would pass the server's budget of in-flight body bytes."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A complete answer: status, raw headers and body."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


def text_reply(status: int, text: str, headers: Iterable[tuple[str, str]] = ()) -> Reply:
    """A plain-text answer (``text`` ends with a newline when it is one line)."""
    pairs = (("content-type", "text/plain; charset=utf-8"), *headers)
    return Reply(status, tuple((k.encode(), v.encode("latin-1")) for k, v in pairs), text.encode())


def json_reply(status: int, document: object | None, headers: Iterable[tuple[str, str]] = ()) -> Reply:
    """A JSON answer (no body when ``document`` is None)."""
    body = b"" if document is None else (json.dumps(document, ensure_ascii=False) + "\n").encode()
    pairs = (("content-type", "application/json"), *headers) if body else tuple(headers)
    return Reply(status, tuple((k.encode(), v.encode("latin-1")) for k, v in pairs), body)


class HttpConnection:
    """One client connection; ``phase`` and ``phase_since`` tell how it waits.

    Phases: ``new`` (accepted, no byte read yet), ``idle`` (a keep-alive connection between
    requests), ``head``, ``body``, ``busy`` (being answered).
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        limits: ServerLimits,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reader, self.writer, self.limits, self.clock = reader, writer, limits, clock
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_head_bytes)
        self.phase = "new"
        self.phase_since = clock()
        self.served = 0
        self.upstream: Any = None  # the upstream link of a forwarding server, closed with this connection
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else ""

    def enter(self, phase: str) -> None:
        """Move to ``phase`` (the connection table picks eviction victims by it)."""
        self.phase, self.phase_since = phase, self.clock()

    # -- reading -----------------------------------------------------------------------------

    async def next_request(self) -> h11.Request | None:
        """The next request head, or None when the client closed (or idled out) between requests.

        Raises ``h11.RemoteProtocolError`` for malformed HTTP (its ``error_status_hint`` is
        400 or 431) and :class:`ClientTooSlow` when the head is not complete within
        ``head_timeout_s`` of its first byte.
        """
        if self.served:
            self.enter("idle")
        deadline: float | None = None
        while (event := self.h11.next_event()) is h11.NEED_DATA:
            if deadline is None:
                try:
                    async with asyncio.timeout(self.limits.read_timeout_s):
                        data = await self.reader.read(HEAD_CHUNK_BYTES)
                except (TimeoutError, ConnectionError):
                    return None  # an idle keep-alive connection, or the client left
                deadline = self.clock() + self.limits.head_timeout_s
                self.enter("head")
            else:
                data = await self._read_before(deadline, HEAD_CHUNK_BYTES)
            self.h11.receive_data(data)
        if isinstance(event, h11.Request):
            self.enter("busy")
            self.served += 1
            return event
        return None

    async def _read_before(self, deadline: float, max_bytes: int) -> bytes:
        remaining = deadline - self.clock()
        if remaining <= 0:
            raise ClientTooSlow()
        try:
            async with asyncio.timeout(remaining):
                return await self.reader.read(max_bytes)
        except TimeoutError:
            raise ClientTooSlow() from None
        except ConnectionError as error:
            raise ClientGone(str(error)) from error

    async def read_body(
        self, *, stop_at: int | None = None, reserve: Callable[[int], bool] | None = None
    ) -> bytes:
        """The whole body, or its first ``stop_at`` bytes and no more from the socket.

        ``reserve(n)`` is asked before each chunk is kept (False: :class:`OverBudget`).
        Raises :class:`ClientGone`, :class:`ClientTooSlow` (the body's rate fell under
        ``min_body_rate`` after ``body_timeout_s``) or :class:`BodyTooLarge`. (Body bytes
        that came in with the head are already read: a ``stop_at`` under the head chunk
        size can be passed by what that read held.)
        """
        self.enter("body")
        started = self.clock()
        chunks: list[bytes] = []
        size = 0
        while True:
            if stop_at is not None and size >= stop_at:
                return b"".join(chunks)
            if self.h11.they_are_waiting_for_100_continue:
                self.writer.write(self.h11.send(h11.InformationalResponse(status_code=100, headers=[])))
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as error:
                raise ClientGone(str(error)) from error
            if event is h11.NEED_DATA:
                max_read = READ_CHUNK_BYTES if stop_at is None else min(READ_CHUNK_BYTES, stop_at - size)
                deadline = self.limits.body_deadline(started, size)
                self.h11.receive_data(await self._read_before(deadline, max_read))
                continue
            if isinstance(event, h11.EndOfMessage):
                self.enter("busy")
                return b"".join(chunks)
            if not isinstance(event, h11.Data):
                raise ClientGone("the connection closed mid-body")
            size += len(event.data)
            if size > self.limits.max_body_bytes:
                raise BodyTooLarge()
            if reserve is not None and not reserve(len(event.data)):
                raise OverBudget()
            chunks.append(event.data)

    # -- writing -----------------------------------------------------------------------------

    def _head(
        self, status: int, headers: Iterable[tuple[bytes, bytes]], close: bool, content_length: int | None
    ) -> bytes:
        kept = [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP_HEADERS]
        if content_length is not None and status not in NO_BODY_STATUSES:
            kept.append((b"content-length", str(content_length).encode()))
        if close:
            kept.append((b"connection", b"close"))
        reason = httpx.codes.get_reason_phrase(status).encode()
        return self.h11.send(h11.Response(status_code=status, headers=kept, reason=reason)) or b""

    async def send_head(
        self, status: int, headers: Iterable[tuple[bytes, bytes]], *, close: bool, content_length: int | None
    ) -> None:
        """Write a response head; without ``content_length`` the body goes chunked (or close-delimited)."""
        self.writer.write(self._head(status, headers, close, content_length))
        await self.drain()

    async def send_data(self, data: bytes) -> None:
        """Write a piece of the body."""
        if data:
            self.writer.write(self.h11.send(h11.Data(data=data)))
            await self.drain()

    async def send_end(self) -> None:
        """End the body."""
        self.writer.write(self.h11.send(h11.EndOfMessage()))
        await self.drain()

    async def drain(self) -> None:
        async with asyncio.timeout(self.limits.read_timeout_s):
            await self.writer.drain()

    async def send(self, reply: Reply, *, close: bool, head_only: bool = False) -> bool:
        """Write ``reply`` (only its head for a HEAD request); False when the connection must close."""
        close = close or (b"connection", b"close") in reply.headers
        data = self._head(reply.status, reply.headers, close, len(reply.body))
        if reply.body and not head_only and reply.status not in NO_BODY_STATUSES:
            data += self.h11.send(h11.Data(data=reply.body)) or b""
        self.writer.write(data + (self.h11.send(h11.EndOfMessage()) or b""))
        await self.drain()
        return not close

    @property
    def reusable(self) -> bool:
        """Whether both sides finished the exchange cleanly (the connection can serve another)."""
        return self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE

    # -- what a faulty gateway does -------------------------------------------------------

    async def fault_reply(self, reply: Reply, *, linger: bool = True) -> None:
        """Answer with ``Connection: close``; drain an unread body so the client sees the answer
        (``linger``), or close at once as HAProxy and Squid do, dropping only what already came (a
        client still sending is reset)."""
        try:
            await self.send(reply, close=True)
        except h11.LocalProtocolError:
            return  # the request was too broken to answer
        if not linger:
            self._drop_pending()
            self.writer.close()
            return
        if self.h11.their_state is not h11.DONE and self.writer.can_write_eof():
            self.writer.write_eof()
            await self.wait_for_eof(LINGER_S)

    def _drop_pending(self) -> None:
        """Read and drop what the kernel already holds of the body, without waiting. Closing with it
        unread would reset a client that has sent its whole body; the real HAProxy, Squid and Caddy
        answer one such body without a reset (the engines' conformance test), and reset only a client
        still sending after the close."""
        transport_socket = self.writer.get_extra_info("socket")
        if transport_socket is None:
            return
        with transport_socket.dup() as sock:
            budget = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
            try:
                while budget > 0 and (data := sock.recv(READ_CHUNK_BYTES, socket.MSG_DONTWAIT)):
                    budget -= len(data)
            except OSError:  # nothing more pending, or the client reset first
                pass

    def reset(self) -> None:
        """Close with a TCP RST (SO_LINGER on, timeout 0) instead of a FIN."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    async def silent_close(self, delay_s: float) -> None:
        """Stay silent for ``delay_s`` (or until the client gives up), then close."""
        if delay_s > 0:
            await self.wait_for_eof(delay_s)
        self.writer.close()

    async def wait_for_eof(self, timeout_s: float) -> None:
        """Read and drop whatever the client sends until it closes or ``timeout_s`` passes."""
        try:
            async with asyncio.timeout(timeout_s):
                while await self.reader.read(READ_CHUNK_BYTES):
                    pass
        except (TimeoutError, ConnectionError):
            pass


def content_length(head: h11.Request) -> int | None:
    """The declared body size (h11 has validated it); None for a chunked body."""
    headers: dict[bytes, Any] = dict(head.headers)
    if b"transfer-encoding" in headers:
        return None
    value = headers.get(b"content-length")
    return int(value) if value is not None else 0


def head_bytes(head: h11.Request) -> int:
    """Size of the request line and headers on the wire (as ``faults.header_bytes`` counts them)."""
    line = len(head.method) + len(head.target) + len(" HTTP/1.1\r\n") + 1
    return line + sum(len(name) + len(value) + 4 for name, value in head.headers) + 2
