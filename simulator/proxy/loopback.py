"""A real loopback TCP server (asyncio + h11 on 127.0.0.1, in a background thread) in front of a handler.

It is the only way to really reset or close a TCP connection mid-POST. The official SDKs
(``openai`` ≥ 3, ``anthropic`` ≥ 2) are built on httpx2, so neither respx nor
``httpx.MockTransport`` intercepts them: point their ``base_url`` at a
:class:`LoopbackServer` (with ``max_retries=0``).

>>> server = LoopbackServer(lambda request: httpx.Response(200, text="hi"))
>>> with server, httpx.Client(trust_env=False) as client:
...     client.get(server.base_url + "/ping").text
'hi'
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

import h11
import httpx

from simulator.proxy.faults import (
    CloseAfterBody,
    ConnectionFault,
    Decision,
    Forward,
    IdleTimeout,
    ResetAfter,
    Respond,
)
from simulator.proxy.inprocess import Handler

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_READ_TIMEOUT_S",
    "DecidingApp",
    "ExchangeRecord",
    "LoopbackServer",
    "OUTCOMES",
    "TURN_HEADER",
]


TURN_HEADER = "x-ctxsim-turn"
LOOPBACK_NAMES: Mapping[str, str] = MappingProxyType({"localhost": "127.0.0.1"})
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_HEAD_BYTES = 256 * 1024
DEFAULT_READ_TIMEOUT_S = 30.0
DEFAULT_HANDLER_TIMEOUT_S = 120.0
DEFAULT_MAX_FAULT_DELAY_S = 30.0
DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_START_TIMEOUT_S = 5.0
DEFAULT_STOP_TIMEOUT_S = 5.0
LINGER_S = 2.0  # like nginx's lingering close: drain an unread body so the client can read our answer
READ_CHUNK_BYTES = 64 * 1024
# Heads are read in small chunks so that little body comes in with them: a reset after
# N body bytes then stops reading at N (at most this far past it when N is tiny).
HEAD_CHUNK_BYTES = 4 * 1024
HOP_BY_HOP_HEADERS = frozenset(
    {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"proxy-connection",
     b"te", b"trailer", b"transfer-encoding", b"upgrade", b"content-length"}
)
NOT_FORWARDED_HEADERS = frozenset({b"host", TURN_HEADER.encode()})
NO_BODY_STATUSES = frozenset({204, 304})
# ExchangeRecord.outcome values; connection faults record their middlebox kind instead.
OUTCOMES: Mapping[str, str] = MappingProxyType({
    "answered": "the handler (or the middlebox's upstream) answered",
    "forwarded": "relayed from the upstream URL",
    "responded": "the middlebox answered itself (413, 431, 403 page, 429)",
    "reset-after": "TCP reset (SO_LINGER 0) after n_bytes of the body (mid-POST when declared longer)",
    "close-after-body": "closed after the body without a response",
    "slow-close": "silent, then closed without a response",
    "idle-timeout": "silent until the client gave up (or the server's max fault delay)",
    "body-too-large": "413 from the server's own max_body_bytes bound",
    "bad-request": "malformed HTTP or x-ctxsim-turn header",
    "busy": "503: more than max_connections connections",
    "handler-error": "500: the handler raised",
    "handler-timeout": "504: the handler ran past handler_timeout_s",
    "upstream-error": "502: the upstream URL failed",
    "client-gone": "the client closed or stalled (read_timeout_s) before its body was complete",
})


class DecidingApp(Protocol):
    """A middlebox-like app: decides per request, forwards to ``upstream``.

    It may also have ``decide_headers(method, path, headers, content_length, turn)``
    returning a decision from the request head alone, or None to wait for the body
    (see :meth:`simulator.proxy.middlebox.Middlebox.decide_headers`).
    """

    upstream: Handler | None

    def decide(self, request: httpx.Request, turn: int | None = None) -> Decision: ...


@dataclass(frozen=True, slots=True)
class ExchangeRecord:
    """One request the loopback server received and what it did (``outcome``: see :data:`OUTCOMES`).

    ``body_bytes`` counts the body bytes the server consumed before it answered or
    dropped the connection; ``content_length`` is the size the client declared
    (None when chunked or absent). A decision taken at the head (a 413 by
    Content-Length, a reset after N bytes) leaves ``body_bytes`` below it.
    """

    turn: int
    method: str
    path: str
    body_bytes: int
    outcome: str
    status: int | None
    detail: str = ""
    content_length: int | None = None


@dataclass(frozen=True, slots=True)
class _Reply:
    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


class _UpstreamError(Exception):
    """The upstream URL failed (mapped to 502, not mirrored as a connection fault)."""


class _BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# Most specific first: what the client gets when answering failed.
HANDLER_FAILURES: tuple[tuple[type[Exception], int, str], ...] = (
    (_UpstreamError, 502, "upstream-error"),
    (TimeoutError, 504, "handler-timeout"),
    (Exception, 500, "handler-error"),
)


def _head_bytes(head: h11.Request) -> int:
    """Size of the request line and headers on the wire (as ``middlebox.header_bytes`` counts them)."""
    line = len(head.method) + len(head.target) + len(" HTTP/1.1\r\n") + 1
    return line + sum(len(name) + len(value) + 4 for name, value in head.headers) + 2


def _content_length(head: h11.Request) -> int | None:
    """The declared body size (h11 has validated it); None for a chunked body."""
    headers = dict(head.headers)
    if b"transfer-encoding" in headers:
        return None
    value = headers.get(b"content-length")
    return int(value) if value is not None else 0


def _text_reply(status: int, text: str) -> _Reply:
    return _Reply(status, ((b"content-type", b"text/plain; charset=utf-8"),), text.encode())


def _raw_body(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """The body as sent on the wire (still encoded) and whether it had to be decoded."""
    if isinstance(response.stream, httpx.ByteStream):
        return b"".join(response.stream), False
    if response.is_stream_consumed:
        return response.content, True
    chunks, size = [], 0
    for chunk in response.iter_raw():
        size += len(chunk)
        if size > limit:
            raise _UpstreamError(f"upstream response exceeds max_body_bytes ({limit})")
        chunks.append(chunk)
    return b"".join(chunks), False


def _reply_of(response: httpx.Response, limit: int) -> _Reply:
    body, decoded = _raw_body(response, limit)
    headers = tuple(
        (k, v) for k, v in response.headers.raw if not (decoded and k.lower() == b"content-encoding")
    )
    if b"close" in response.headers.get("connection", "").lower().encode():
        headers += ((b"connection", b"close"),)
    return _Reply(response.status_code, headers, body)


def _reply_of_decision(decision: Respond) -> _Reply:
    headers = tuple((k.encode("latin-1"), v.encode("latin-1")) for k, v in decision.headers)
    return _Reply(decision.status, headers, decision.body)


def _fault_of(error: httpx.TransportError, max_delay_s: float) -> ConnectionFault:
    """The wire fault matching a transport error a handler raised in-process."""
    if isinstance(error, httpx.TimeoutException):
        return IdleTimeout(delay_s=max_delay_s)
    if isinstance(error, httpx.RemoteProtocolError):
        return CloseAfterBody()
    return ResetAfter(n_bytes=0)


def _loopback_host(host: str) -> str:
    host = LOOPBACK_NAMES.get(host, host)
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(
            f"LoopbackServer binds loopback addresses only (127.0.0.0/8, ::1 or localhost), got {host!r}; "
            "it hosts fault models for local tests — use host='127.0.0.1'"
        )
    return host


def _positive(name: str, value: float) -> None:
    if value <= 0:
        raise ValueError(f"LoopbackServer {name} must be > 0, got {value}")


class LoopbackServer:
    """An HTTP/1.1 server on a loopback port (asyncio + h11, background thread) serving ``app``.

    ``app`` is a handler, called in a worker thread, or a middlebox-like object
    with ``decide(request, turn)``: the server reads the body (``decide`` looks
    at it), then answers, forwards, resets (RST via ``SO_LINGER`` 0), closes,
    closes slowly or stays silent, as decided. When the app also has
    ``decide_headers`` and it decides from the head, the server acts before the
    body is in: it answers at once (draining the body, like nginx's 413 by
    Content-Length) or reads ``n_bytes`` and resets while the client is still
    sending (a true mid-POST reset). ``turn`` is the 1-based index of
    the request on this server, or the ``x-ctxsim-turn`` header when present.
    Forwarded requests go to ``upstream`` (an ``http(s)://`` URL, relayed with
    ``trust_env=False``) when given, else to ``app.upstream``; ``app`` may be None
    for a plain forwarding proxy. Normal answers keep the connection alive;
    fault answers carry ``Connection: close``. Every wait is bounded: bodies by
    ``max_body_bytes`` (else 413), reads by ``read_timeout_s``, handlers by
    ``handler_timeout_s`` (else 504), silences by ``max_fault_delay_s``,
    connections by ``max_connections`` (else 503). ``handler_workers`` is 1 by
    default so stateful mocks see one request at a time, in arrival order.
    Point an SDK at it with ``openai.OpenAI(base_url=server.base_url + "/v1",
    api_key="x", max_retries=0)``.
    """

    def __init__(
        self,
        app: Handler | DecidingApp | None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        handler_timeout_s: float = DEFAULT_HANDLER_TIMEOUT_S,
        max_fault_delay_s: float = DEFAULT_MAX_FAULT_DELAY_S,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        handler_workers: int = 1,
        upstream: str | None = None,
    ) -> None:
        self.host = _loopback_host(host)
        if not 0 <= port <= 65535:
            raise ValueError(f"LoopbackServer port must be within 0..65535 (0 picks a free port), got {port}")
        for name, value in (("max_body_bytes", max_body_bytes), ("max_head_bytes", max_head_bytes),
                            ("read_timeout_s", read_timeout_s), ("handler_timeout_s", handler_timeout_s),
                            ("max_fault_delay_s", max_fault_delay_s), ("max_connections", max_connections),
                            ("handler_workers", handler_workers)):
            _positive(name, value)
        self._deciding = hasattr(app, "decide")
        if upstream is not None:
            url = httpx.URL(upstream)
            if url.scheme not in ("http", "https") or not url.host:
                raise ValueError(f"upstream must be an http:// or https:// URL with a host, got {upstream!r}")
            if app is not None and not self._deciding:
                raise ValueError("pass either a handler or upstream=, not both; "
                                 "put a Middlebox in front of the upstream to inject faults")
        elif app is None:
            raise ValueError("LoopbackServer needs an app (a handler or a middlebox) or upstream=URL")
        elif self._deciding and getattr(app, "upstream", None) is None:
            raise ValueError("the middlebox has no upstream to forward to; give it one or pass upstream=URL")
        elif not self._deciding and not callable(app):
            raise TypeError(f"app must be a handler(request) -> httpx.Response or have decide(), got {app!r}")
        self.app = app
        self.upstream = upstream
        self._handler: Handler | None = getattr(app, "upstream", None)
        if not self._deciding:
            self._handler = app  # type: ignore[assignment]
        self.requested_port = port
        self.port = port
        self.max_body_bytes = max_body_bytes
        self.max_head_bytes = max_head_bytes
        self.read_timeout_s = read_timeout_s
        self.handler_timeout_s = handler_timeout_s
        self.max_fault_delay_s = max_fault_delay_s
        self.max_connections = max_connections
        self.handler_workers = handler_workers
        self._records: list[ExchangeRecord] = []
        self._requests = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._executor: ThreadPoolExecutor | None = None
        self._client: httpx.Client | None = None

    # -- lifecycle -------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the running server."""
        if not self.running:
            raise RuntimeError("LoopbackServer is not running; call start() or use it as a context manager")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the server thread is up and accepting connections."""
        return self._thread is not None and self._thread.is_alive() and self._ready.is_set()

    @property
    def records(self) -> tuple[ExchangeRecord, ...]:
        """Every request received so far, in order."""
        return tuple(self._records)

    def start(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> LoopbackServer:
        """Bind and serve in a background thread; returns self once it accepts connections."""
        if self._thread is not None:
            raise RuntimeError("LoopbackServer is already started; call stop() first")
        self._ready.clear()
        self._error = None
        self._executor = ThreadPoolExecutor(self.handler_workers, thread_name_prefix="ctxsim-loopback-worker")
        if self.upstream is not None:
            self._client = httpx.Client(trust_env=False, timeout=self.handler_timeout_s)
        self._thread = threading.Thread(target=self._run, name="ctxsim-loopback", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s) or self._error is not None:
            error = self._error
            self.stop()
            if error is not None:
                raise RuntimeError(
                    f"LoopbackServer could not start on {self.host}:{self.requested_port}: {error}"
                ) from error
            raise RuntimeError(f"LoopbackServer did not start within {timeout_s} s")
        return self

    def stop(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        """Shut down inside the loop (close the listener, cancel connections) and join the thread."""
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None:
            return
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop closed between the check and the call
                pass
        thread.join(timeout_s)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if self._client is not None:
            self._client.close()
        self._thread = self._loop = self._stop = self._executor = self._client = None
        if thread.is_alive():
            raise RuntimeError(f"LoopbackServer thread did not stop within {timeout_s} s")

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # reported by start(); the thread must not die silently
            self._error = error
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._serve, self.host, self.requested_port)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            server.close()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await server.wait_closed()

    # -- one connection ------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        busy = len(self._tasks) > self.max_connections
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.max_head_bytes)
        try:
            while await self._exchange(conn, reader, writer, busy=busy):
                conn.start_next_cycle()
        except (TimeoutError, ConnectionError, h11.ProtocolError):
            pass  # idle keep-alive, stalled or vanished client: just close
        except asyncio.CancelledError:
            pass  # shutdown; ending quietly spares asyncio's stream callback a cancelled task
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _next_event(self, conn: h11.Connection, reader: asyncio.StreamReader,
                          max_read: int = READ_CHUNK_BYTES) -> Any:
        while (event := conn.next_event()) is h11.NEED_DATA:
            async with asyncio.timeout(self.read_timeout_s):
                conn.receive_data(await reader.read(max_read))
        return event

    async def _exchange(self, conn: h11.Connection, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter, *, busy: bool) -> bool:
        """Serve one request; True keeps the connection for the next one."""
        try:
            head = await self._next_event(conn, reader, HEAD_CHUNK_BYTES)
        except h11.RemoteProtocolError as error:
            status, detail = error.error_status_hint, str(error)
            if status == 431:
                detail = self._head_too_large
            self._record(0, "", "", 0, "bad-request", status, detail)
            await self._fault_reply(conn, reader, writer, _text_reply(status, f"{detail}\n"))
            return False
        if not isinstance(head, h11.Request):
            return False
        self._requests += 1
        method, target = head.method.decode("ascii"), head.target.decode("ascii", "replace")
        content_length = _content_length(head)
        record = self._recorder(method, target, content_length)
        try:
            if _head_bytes(head) > self.max_head_bytes:
                raise _BadRequest(self._head_too_large, 431)
            turn = self._turn(head)
            if busy:
                raise _BadRequest(f"server busy: more than {self.max_connections} connections", 503)
            decide_headers = getattr(self.app, "decide_headers", None) if self._deciding else None
            if decide_headers is not None:
                headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers]
                try:
                    early = await self._in_worker(decide_headers, method, target, headers, content_length,
                                                  turn)
                except Exception as error:
                    await self._handler_failed(conn, reader, writer, error, record, turn, 0)
                    return False
                if early is not None:
                    await self._act_at_head(conn, reader, writer, early, record, turn)
                    return False
            body = await self._read_body(conn, reader, writer)
        except _BadRequest as error:
            outcome = {413: "body-too-large", 503: "busy"}.get(error.status, "bad-request")
            record(self._requests, 0, outcome, error.status, str(error))
            await self._fault_reply(conn, reader, writer, _text_reply(error.status, f"{error}\n"))
            return False
        if body is None:
            record(turn, 0, "client-gone", None)
            return False
        host = dict(head.headers).get(b"host", f"{self.host}:{self.port}".encode()).decode("ascii", "replace")
        request = httpx.Request(method, f"http://{host}{target}", headers=head.headers, content=body)
        decision: Decision = Forward()
        try:
            if self._deciding:
                decision = await self._in_worker(self.app.decide, request, turn)  # type: ignore[union-attr]
            if isinstance(decision, Forward):
                reply = await self._in_worker(self._answer, request)
        except httpx.TransportError as error:  # a handler faulting in-process: do it for real
            decision = _fault_of(error, self.max_fault_delay_s)
        except Exception as error:  # any handler bug becomes an answer the client can read
            await self._handler_failed(conn, reader, writer, error, record, turn, len(body))
            return False
        if isinstance(decision, Respond):
            record(turn, len(body), "responded", decision.status)
            await self._fault_reply(conn, reader, writer, _reply_of_decision(decision))
            return False
        if isinstance(decision, ConnectionFault):
            record(turn, len(body), decision.kind, None)
            await self._drop(decision, reader, writer)
            return False
        record(turn, len(body), "forwarded" if self.upstream else "answered", reply.status)
        keep = await self._send(conn, writer, reply, close=False, head_only=method == "HEAD")
        return keep and conn.our_state is h11.DONE and conn.their_state is h11.DONE

    async def _handler_failed(self, conn: h11.Connection, reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter, error: Exception, record: Callable[..., None],
                              turn: int, body_bytes: int) -> None:
        """Answer a failing handler or middlebox with 502/504/500 (:data:`HANDLER_FAILURES`)."""
        status, outcome = next((status, outcome) for kind, status, outcome in HANDLER_FAILURES
                               if isinstance(error, kind))
        detail = str(error) or type(error).__name__
        record(turn, body_bytes, outcome, status, detail)
        await self._fault_reply(conn, reader, writer, _text_reply(status, f"{outcome}: {detail}\n"))

    async def _act_at_head(self, conn: h11.Connection, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter, decision: Respond | ConnectionFault,
                           record: Callable[..., None], turn: int) -> None:
        """Carry out a decision taken from the head alone, before the body is in."""
        if isinstance(decision, Respond):
            record(turn, 0, "responded", decision.status, "answered at the head")
            await self._fault_reply(conn, reader, writer, _reply_of_decision(decision))
            return
        n_bytes = decision.n_bytes if isinstance(decision, ResetAfter) else 0
        body = await self._read_body(conn, reader, writer, stop_at=n_bytes)
        if body is None:
            record(turn, 0, "client-gone", None)
            return
        record(turn, len(body), decision.kind, None, f"dropped after {len(body)} body bytes")
        await self._drop(decision, reader, writer)

    @property
    def _head_too_large(self) -> str:
        return f"request head exceeds max_head_bytes ({self.max_head_bytes}); raise max_head_bytes"

    def _turn(self, head: h11.Request) -> int:
        value = dict(head.headers).get(TURN_HEADER.encode())
        if value is None:
            return self._requests
        if not value.isdigit() or int(value) < 1:
            raise _BadRequest(f"{TURN_HEADER} must be a positive integer, got {value.decode('latin-1')!r}")
        return int(value)

    def _recorder(self, method: str, path: str, content_length: int | None) -> Callable[..., None]:
        def record(turn: int, body_bytes: int, outcome: str, status: int | None, detail: str = "") -> None:
            self._record(turn, method, path, body_bytes, outcome, status, detail, content_length)

        return record

    def _record(self, turn: int, method: str, path: str, body_bytes: int, outcome: str,
                status: int | None, detail: str = "", content_length: int | None = None) -> None:
        self._records.append(ExchangeRecord(turn, method, path, body_bytes, outcome, status, detail,
                                            content_length))

    async def _read_body(self, conn: h11.Connection, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter, *, stop_at: int | None = None) -> bytes | None:
        """The whole body, or its first ``stop_at`` bytes and no more from the socket.

        None if the client left or stalled first; 413 past ``max_body_bytes``.
        (Body bytes that came in with the head are already read: a ``stop_at``
        under :data:`HEAD_CHUNK_BYTES` can be passed by what that read held.)
        """
        chunks: list[bytes] = []
        size = 0
        while True:
            if stop_at is not None and size >= stop_at:
                return b"".join(chunks)
            if conn.they_are_waiting_for_100_continue:
                writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
            max_read = READ_CHUNK_BYTES if stop_at is None else min(READ_CHUNK_BYTES, stop_at - size)
            try:
                event = await self._next_event(conn, reader, max_read)
            except (h11.RemoteProtocolError, ConnectionError, TimeoutError):
                return None  # closed, reset or stalled mid-body
            if isinstance(event, h11.EndOfMessage):
                return b"".join(chunks)
            if not isinstance(event, h11.Data):
                return None
            size += len(event.data)
            if size > self.max_body_bytes:
                raise _BadRequest(f"request body exceeds the loopback server's max_body_bytes "
                                  f"({self.max_body_bytes}); raise max_body_bytes", 413)
            chunks.append(event.data)

    async def _in_worker(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self.handler_timeout_s):
            return await loop.run_in_executor(self._executor, fn, *args)

    def _answer(self, request: httpx.Request) -> _Reply:
        """Runs in a worker thread: the upstream URL, the middlebox's upstream or the handler."""
        if self._client is not None:
            return self._forward(request)
        handler = self._handler
        assert handler is not None  # validated in __init__: no upstream URL means a handler exists
        response = handler(request)
        if not isinstance(response, httpx.Response):
            raise TypeError(f"handler {handler!r} returned {type(response).__name__}, not httpx.Response")
        return _reply_of(response, self.max_body_bytes)

    def _forward(self, request: httpx.Request) -> _Reply:
        assert self._client is not None and self.upstream is not None
        base = httpx.URL(self.upstream)
        url = base.copy_with(raw_path=base.raw_path.rstrip(b"/") + request.url.raw_path)
        headers = [(k, v) for k, v in request.headers.raw
                   if k.lower() not in HOP_BY_HOP_HEADERS | NOT_FORWARDED_HEADERS]
        try:
            upstream_request = self._client.build_request(request.method, url, headers=headers,
                                                          content=request.content)
            response = self._client.send(upstream_request, stream=True)
            try:
                return _reply_of(response, self.max_body_bytes)
            finally:
                response.close()
        except httpx.HTTPError as error:
            raise _UpstreamError(f"{type(error).__name__} from {self.upstream}: {error}") from error

    # -- writing -------------------------------------------------------------------

    async def _send(self, conn: h11.Connection, writer: asyncio.StreamWriter, reply: _Reply, *,
                    close: bool, head_only: bool = False) -> bool:
        """Write ``reply`` (only its head for a HEAD request); False when the connection must close."""
        close = close or (b"connection", b"close") in reply.headers
        headers = [(k, v) for k, v in reply.headers if k.lower() not in HOP_BY_HOP_HEADERS]
        if reply.status not in NO_BODY_STATUSES:
            headers.append((b"content-length", str(len(reply.body)).encode()))
        if close:
            headers.append((b"connection", b"close"))
        reason = httpx.codes.get_reason_phrase(reply.status).encode()
        data = conn.send(h11.Response(status_code=reply.status, headers=headers, reason=reason))
        if reply.body and not head_only and reply.status not in NO_BODY_STATUSES:
            data += conn.send(h11.Data(data=reply.body))
        data += conn.send(h11.EndOfMessage())
        writer.write(data)
        async with asyncio.timeout(self.read_timeout_s):
            await writer.drain()
        return not close

    async def _fault_reply(self, conn: h11.Connection, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter, reply: _Reply) -> None:
        """Answer with ``Connection: close``; drain an unread body so the client sees the answer."""
        try:
            await self._send(conn, writer, reply, close=True)
        except h11.LocalProtocolError:
            return  # the request was too broken to answer
        if conn.their_state is not h11.DONE and writer.can_write_eof():
            writer.write_eof()
            await self._wait_for_eof(reader, LINGER_S)

    async def _drop(self, fault: ConnectionFault, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> None:
        """Carry out a connection fault for real."""
        if isinstance(fault, ResetAfter):
            sock = writer.get_extra_info("socket")
            if sock is not None:  # SO_LINGER on, timeout 0: close() sends RST instead of FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return
        delay_s = getattr(fault, "delay_s", 0.0)
        if delay_s:  # slow close / idle timeout: silent until the delay or the client gives up
            await self._wait_for_eof(reader, min(delay_s, self.max_fault_delay_s))
        writer.close()

    @staticmethod
    async def _wait_for_eof(reader: asyncio.StreamReader, timeout_s: float) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                while await reader.read(READ_CHUNK_BYTES):
                    pass
        except (TimeoutError, ConnectionError):
            pass
