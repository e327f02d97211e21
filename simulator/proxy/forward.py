"""Forwarding to a real upstream URL: concurrent, streamed, and sharing nothing between clients.

Each client connection gets its own :class:`UpstreamLink`: one keep-alive HTTP/1.1 connection to
the upstream (asyncio streams + h11, TLS for ``https://``). There is no cookie jar, no default
header, no auth and no connection-level state (a proxy's or an NTLM handshake, a sticky session)
that could carry one client's identity into another's request: every request goes with its own
headers only (hop-by-hop headers and ``x-ctxsim-turn`` dropped, ``Host`` set to the upstream's).
Proxy variables are ignored; the TLS context is built once and shared. The answer streams back
as it comes; the timeout counts from the upstream call, never from time spent waiting behind
other requests. (An h11 link per client costs a few hundred microseconds a request, a fraction
of a pooled general-purpose client, whose pool bookkeeping also grows with its size.)

Upstream failures map to what the client should see (:class:`UpstreamFailure`): unreachable
→ 502, no answer in time → 504, and a reset or a close without an answer is mirrored on the
client's connection, so a client behind the proxy meets the gateway's faults as if direct. An
idle keep-alive connection the upstream has closed is noticed before it is reused (never a
request sent twice).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

import h11
import httpx

from simulator.proxy.redact import redact_text, redact_url

__all__ = ["Forwarder", "UpstreamFailure", "UpstreamLink", "UpstreamResponse"]

TURN_HEADER = "x-ctxsim-turn"
NOT_FORWARDED_HEADERS = frozenset(
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
        b"host",
        b"expect",
        TURN_HEADER.encode(),
    }
)
CONNECT_TIMEOUT_S = 10.0
READ_CHUNK_BYTES = 64 * 1024
SEND_CHUNK_BYTES = 64 * 1024  # the body goes out in pieces this size, so an early answer stops it
DEFAULT_PORTS = {"http": 80, "https": 443}
CLOSED = "Server disconnected without sending a response."


class UpstreamFailure(Exception):
    """The upstream URL failed: ``outcome`` (see journal.OUTCOMES) and the ``status`` to answer, if any."""

    def __init__(self, outcome: str, status: int | None, detail: str) -> None:
        super().__init__(detail)
        self.outcome, self.status, self.detail = outcome, status, detail


@dataclass(slots=True)
class UpstreamResponse:
    """The upstream's answer: status and raw headers now, the body as it streams (:meth:`chunks`)."""

    status: int
    headers: list[tuple[bytes, bytes]]
    content_length: int | None
    link: UpstreamLink

    def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives; a break mid-body raises UpstreamFailure (``upstream-cut``)."""
        return self.link.body()


class Forwarder:
    """Sends requests to ``upstream`` (an http(s) URL; its path prefixes every request path).

    :meth:`link` opens the upstream side of one client connection; use from one event loop.
    """

    def __init__(self, upstream: str, *, timeout_s: float) -> None:
        url = httpx.URL(upstream)
        self.host = url.host
        self.port = url.port or DEFAULT_PORTS[url.scheme]
        self.tls = url.scheme == "https"
        self.base_path = url.raw_path.split(b"?")[0].rstrip(b"/")
        default = self.port == DEFAULT_PORTS[url.scheme]
        self.host_header = (url.host if default else f"{url.host}:{self.port}").encode("idna")
        self.shown = redact_url(upstream)
        self.timeout_s = timeout_s
        self._tls_context: ssl.SSLContext | None = None

    def target_for(self, raw_target: bytes) -> bytes:
        """The upstream request target of a client's target (path and query)."""
        return self.base_path + raw_target

    def path_for(self, raw_target: bytes) -> str:
        """The path the upstream sees (without the query)."""
        return self.target_for(raw_target).split(b"?")[0].decode("ascii", "replace")

    def tls_context(self) -> ssl.SSLContext | None:
        """The shared TLS context (the trust store is loaded once, not per client)."""
        if self.tls and self._tls_context is None:
            self._tls_context = httpx.create_ssl_context()
        return self._tls_context

    def link(self) -> UpstreamLink:
        """A new upstream connection for one client connection (close it with the client's)."""
        return UpstreamLink(self)

    def failure(
        self, name: str, error: BaseException | str, outcome: str, status: int | None
    ) -> UpstreamFailure:
        """An UpstreamFailure whose detail names the error and the (redacted) upstream."""
        text = error if isinstance(error, str) else str(error) or type(error).__name__
        return UpstreamFailure(outcome, status, redact_text(f"{name} from {self.shown}: {text}"))


class _SocketChannel:
    """A plain-TCP upstream connection on a raw socket.

    A refused write does not close it, so an answer the upstream sent before it stopped reading
    (a 413 by Content-Length, then a close) can still be read after the write failed.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    async def send(self, data: bytes) -> None:
        await asyncio.get_running_loop().sock_sendall(self.sock, data)

    async def recv(self) -> bytes:
        return await asyncio.get_running_loop().sock_recv(self.sock, READ_CHUNK_BYTES)

    def idle_and_open(self) -> bool:
        try:
            self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True  # nothing to read: still open, and idle
        except OSError:
            return False
        return False  # closed (EOF), or the upstream sent something unasked: not reusable

    def close(self) -> None:
        self.sock.close()


class _StreamChannel:
    """A TLS upstream connection (asyncio streams)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def recv(self) -> bytes:
        return await self.reader.read(READ_CHUNK_BYTES)

    def idle_and_open(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


async def _open_socket(host: str, port: int) -> socket.socket:
    loop = asyncio.get_running_loop()
    last: OSError | None = None
    for family, kind, proto, _, address in await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, address)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as error:
            sock.close()
            last = error
    raise last or OSError(f"no address for {host}")


class UpstreamLink:
    """The upstream side of one client connection: one keep-alive HTTP/1.1 connection, nothing shared.

    The request body goes out in pieces while the answer is read: an upstream that answers before
    the body is in (a body cap by Content-Length) stops the sending, and its answer is relayed; a
    reset is reported only when no answer came.
    """

    def __init__(self, forwarder: Forwarder) -> None:
        self.forwarder = forwarder
        self._channel: _SocketChannel | _StreamChannel | None = None
        self._h11: h11.Connection | None = None
        self.answered_early = False

    async def send(
        self, method: str, raw_target: bytes, headers: Iterable[tuple[bytes, bytes]], body: bytes
    ) -> UpstreamResponse:
        """Send a request and read the answer's head; raises UpstreamFailure."""
        kept = [(k, v) for k, v in headers if k.lower() not in NOT_FORWARDED_HEADERS]
        head = h11.Request(
            method=method,
            target=self.forwarder.target_for(raw_target),
            headers=[
                (b"host", self.forwarder.host_header),
                *kept,
                (b"content-length", str(len(body)).encode()),
            ],
        )
        if self._reusable():
            assert self._h11 is not None
            self._h11.start_next_cycle()
        else:
            await self.aclose()
            await self._connect()
        return await self._exchange(head, body)

    def _reusable(self) -> bool:
        """Whether the last exchange ended cleanly and the upstream has not closed the idle connection."""
        return (
            self._h11 is not None
            and self._channel is not None
            and self._h11.our_state is h11.DONE
            and self._h11.their_state is h11.DONE
            and self._channel.idle_and_open()
        )

    async def _connect(self) -> None:
        forwarder = self.forwarder
        context = forwarder.tls_context()
        try:
            async with asyncio.timeout(min(CONNECT_TIMEOUT_S, forwarder.timeout_s)):
                if context is None:
                    self._channel = _SocketChannel(await _open_socket(forwarder.host, forwarder.port))
                else:
                    reader, writer = await asyncio.open_connection(
                        forwarder.host, forwarder.port, ssl=context, server_hostname=forwarder.host
                    )
                    self._channel = _StreamChannel(reader, writer)
        except TimeoutError:
            raise forwarder.failure("ConnectTimeout", "timed out", "upstream-error", 502) from None
        except (OSError, ssl.SSLError) as error:
            raise forwarder.failure("ConnectError", error, "upstream-error", 502) from None
        self._h11 = h11.Connection(h11.CLIENT)

    async def _send_request(self, head: h11.Request, body: bytes) -> None:
        assert self._h11 is not None and self._channel is not None
        await self._channel.send(self._h11.send(head) or b"")
        for offset in range(0, len(body), SEND_CHUNK_BYTES):
            await self._channel.send(
                self._h11.send(h11.Data(data=body[offset : offset + SEND_CHUNK_BYTES])) or b""
            )
        await self._channel.send(self._h11.send(h11.EndOfMessage()) or b"")

    async def _exchange(self, head: h11.Request, body: bytes) -> UpstreamResponse:
        self.answered_early = False
        sending = asyncio.create_task(self._send_request(head, body))
        answer = asyncio.create_task(self._answer())
        try:
            await asyncio.wait({sending, answer}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            sending.cancel()
            answer.cancel()
            raise
        if not sending.done():  # the upstream answered (or failed) before the body was in: stop sending
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
            response = answer.result()
            self.answered_early = True
            return response
        error = sending.exception()
        if error is None:
            return await answer
        if not isinstance(error, ConnectionError):
            answer.cancel()
            raise error
        try:  # the upstream may have answered before it stopped reading
            response = await answer
        except UpstreamFailure:
            raise self.forwarder.failure("WriteError", error, "upstream-reset", None) from None
        self.answered_early = True
        return response

    async def _answer(self) -> UpstreamResponse:
        """Read up to the answer's head (skipping 1xx answers)."""
        while True:
            event = await self._next_event()
            if isinstance(event, h11.Response):
                headers = [(k, v) for k, v in event.headers]
                declared = dict(headers).get(b"content-length")
                length = (
                    int(declared)
                    if declared is not None and b"chunked" not in dict(headers).get(b"transfer-encoding", b"")
                    else None
                )
                return UpstreamResponse(event.status_code, headers, length, self)

    async def _next_event(self) -> object:
        assert self._h11 is not None and self._channel is not None
        forwarder = self.forwarder
        while (event := self._next()) is h11.NEED_DATA:
            try:
                async with asyncio.timeout(forwarder.timeout_s):
                    data = await self._channel.recv()
            except TimeoutError:
                raise forwarder.failure("ReadTimeout", "timed out", "upstream-timeout", 504) from None
            except ConnectionError as error:
                raise forwarder.failure("ReadError", error, "upstream-reset", None) from None
            self._h11.receive_data(data)
        return event

    def _next(self) -> object:
        assert self._h11 is not None
        try:
            return self._h11.next_event()
        except h11.RemoteProtocolError as error:
            text = CLOSED if "peer unexpectedly closed" in str(error) else str(error)
            raise self.forwarder.failure("RemoteProtocolError", text, "upstream-closed", None) from None

    async def body(self) -> AsyncIterator[bytes]:
        """The answer's body as it arrives; a break mid-body raises UpstreamFailure (``upstream-cut``)."""
        while True:
            try:
                event = await self._next_event()
            except UpstreamFailure as failure:
                raise UpstreamFailure("upstream-cut", None, failure.detail) from None
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return

    async def aclose(self) -> None:
        """Close the connection (a later request opens a new one)."""
        channel, self._channel, self._h11 = self._channel, None, None
        if channel is not None:
            channel.close()
