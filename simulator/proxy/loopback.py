"""A real loopback TCP server (asyncio + h11 on 127.0.0.1, in a background thread) in front of a handler.

It is the only way to really reset or close a TCP connection mid-POST. The official SDKs
(``openai`` ≥ 3, ``anthropic`` ≥ 2) are built on httpx2, so neither respx nor
``httpx.MockTransport`` intercepts them: point their ``base_url`` at a
:class:`LoopbackServer` (with ``max_retries=0``).

The server owns its connections (the table, eviction at the limit, the admin port); one
request is served by :mod:`simulator.proxy.exchange`, on the framing of
:mod:`simulator.proxy.http11`, within the bounds of :mod:`simulator.proxy.limits`.

>>> server = LoopbackServer(lambda request: httpx.Response(200, text="hi"))
>>> with server, httpx.Client(trust_env=False) as client:
...     client.get(server.base_url + "/ping").text
'hi'
"""

from __future__ import annotations

import asyncio
import ipaddress
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import Any, Protocol

import h11
import httpx

from simulator.proxy.admin import AdminApi
from simulator.proxy.exchange import TURN_HEADER, Dispatcher, head_too_large
from simulator.proxy.fault_base import Decision
from simulator.proxy.forward import Forwarder
from simulator.proxy.http11 import (
    BodyTooLarge,
    ClientGone,
    ClientTooSlow,
    HttpConnection,
    json_reply,
    text_reply,
)
from simulator.proxy.inprocess import Handler
from simulator.proxy.journal import OUTCOMES, ExchangeRecord, ExchangeTrace
from simulator.proxy.limits import ByteBudget, ServerLimits

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_READ_TIMEOUT_S",
    "OUTCOMES",
    "TURN_HEADER",
    "DecidingApp",
    "ExchangeRecord",
    "LoopbackServer",
    "ServerStartError",
    "loopback_host",
]

LOOPBACK_NAMES: Mapping[str, str] = MappingProxyType({"localhost": "127.0.0.1"})
DEFAULTS = ServerLimits()
DEFAULT_MAX_BODY_BYTES = DEFAULTS.max_body_bytes
DEFAULT_READ_TIMEOUT_S = DEFAULTS.read_timeout_s
DEFAULT_KEEP_RECORDS = 1000
DEFAULT_START_TIMEOUT_S = 5.0
DEFAULT_STOP_TIMEOUT_S = 5.0
# At the connection limit a new connection takes the place of an idle keep-alive one, or of one
# that has sent no complete head for this long (slowloris); only when every slot is serving a
# request does it get a 503.
EVICT_STALLED_AFTER_S = 1.0
ADMIN_LIMITS = ServerLimits(max_body_bytes=64 * 1024, max_connections=16)

Observer = Callable[[ExchangeRecord, ExchangeTrace], None]


class DecidingApp(Protocol):
    """A middlebox-like app: decides per request, forwards to ``upstream``.

    It may also have ``decide_headers(method, path, headers, content_length, turn)``
    returning a decision from the request head alone, or None to wait for the body
    (see :meth:`simulator.proxy.middlebox.Middlebox.decide_headers`).
    """

    upstream: Handler | None

    def decide(self, request: httpx.Request, turn: int | None = None) -> Decision: ...


class ServerStartError(RuntimeError):
    """The server could not bind its port (in use, not permitted) or did not come up.

    When a bind failed, ``listener`` says which port (``"server"`` or ``"admin"``),
    ``address`` is its HOST:PORT and ``errno`` the OS error number; all None on a timeout.
    """

    def __init__(
        self,
        message: str,
        *,
        listener: str | None = None,
        address: str | None = None,
        errno: int | None = None,
    ) -> None:
        super().__init__(message)
        self.listener, self.address, self.errno = listener, address, errno


class _BindError(Exception):
    def __init__(self, listener: str, address: str, error: OSError) -> None:
        super().__init__(f"{address}: {error}")
        self.listener, self.address, self.error = listener, address, error


def loopback_host(host: str, what: str = "LoopbackServer") -> str:
    """``host`` as bound (``localhost`` is 127.0.0.1); ValueError unless it is a loopback address."""
    host = LOOPBACK_NAMES.get(host, host)
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(
            f"{what} binds loopback addresses only (127.0.0.0/8, ::1 or localhost), got {host!r}; "
            "it hosts fault models for local tests — use host='127.0.0.1'"
        )
    return host


class LoopbackServer:
    """An HTTP/1.1 server on a loopback port (asyncio + h11, background thread) serving ``app``.

    ``app`` is a handler, called in a worker thread, or a middlebox-like object
    with ``decide(request, turn)``: the server reads the body (``decide`` looks
    at it), then answers, forwards, resets (RST via ``SO_LINGER`` 0), closes,
    closes slowly or stays silent, as decided, and shapes forwarded answers
    (latency, bandwidth, a cut stream). When the app also has ``decide_headers``
    and it decides from the head, the server acts before the body is in: it
    answers at once (draining the body, like nginx's 413 by Content-Length) or
    reads ``n_bytes`` and resets while the client is still sending (a true
    mid-POST reset). ``turn`` is the 1-based index of the request on this server
    (across all clients), or the ``x-ctxsim-turn`` header when present.

    Forwarded requests go to ``upstream`` (an ``http(s)://`` URL: concurrent, on a
    pooled transport with no cookie jar, see :mod:`simulator.proxy.forward`) when
    given, else to ``app.upstream``; ``app`` may be None for a plain forwarding
    proxy. Normal answers keep the connection alive; fault answers carry
    ``Connection: close``. Every wait and size is bounded (:class:`ServerLimits`:
    bodies, heads, in-flight body bytes, head and body deadlines that do not
    restart per byte, handlers, silences, connections). ``handler_workers`` is 1
    by default so stateful mocks see one request at a time, in arrival order.

    The last ``keep_records`` exchanges stay in :attr:`records`; ``on_exchange``
    sees every one (with its :class:`ExchangeTrace`; bodies kept when
    ``record_bodies``). ``admin_port`` serves :class:`~simulator.proxy.admin.AdminApi`
    over the app's faults on the same host. Point an SDK at it with
    ``openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)``.
    """

    def __init__(
        self,
        app: Handler | DecidingApp | None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body_bytes: int = DEFAULTS.max_body_bytes,
        max_head_bytes: int = DEFAULTS.max_head_bytes,
        read_timeout_s: float = DEFAULTS.read_timeout_s,
        handler_timeout_s: float = DEFAULTS.handler_timeout_s,
        max_fault_delay_s: float = DEFAULTS.max_fault_delay_s,
        max_connections: int = DEFAULTS.max_connections,
        handler_workers: int = 1,
        upstream: str | None = None,
        head_timeout_s: float = DEFAULTS.head_timeout_s,
        body_timeout_s: float = DEFAULTS.body_timeout_s,
        min_body_rate: int = DEFAULTS.min_body_rate,
        max_inflight_body_bytes: int = DEFAULTS.max_inflight_body_bytes,
        queue_timeout_s: float = DEFAULTS.queue_timeout_s,
        keep_records: int = DEFAULT_KEEP_RECORDS,
        on_exchange: Observer | None = None,
        record_bodies: bool = False,
        admin_port: int | None = None,
    ) -> None:
        self.host = loopback_host(host)
        for name, number in (("port", port), ("admin_port", admin_port)):
            if number is not None and not 0 <= number <= 65535:
                raise ValueError(
                    f"LoopbackServer {name} must be within 0..65535 (0 picks a free port), got {number}"
                )
        self.limits = ServerLimits(
            max_body_bytes,
            max_head_bytes,
            max_inflight_body_bytes,
            max_connections,
            read_timeout_s,
            head_timeout_s,
            body_timeout_s,
            min_body_rate,
            handler_timeout_s,
            max_fault_delay_s,
            queue_timeout_s,
        )
        for name, count in (("handler_workers", handler_workers), ("keep_records", keep_records)):
            if count < 1:
                raise ValueError(f"LoopbackServer {name} must be > 0, got {count}")
        self._deciding = hasattr(app, "decide")
        if upstream is not None:
            url = httpx.URL(upstream)
            if url.scheme not in ("http", "https") or not url.host:
                raise ValueError(f"upstream must be an http:// or https:// URL with a host, got {upstream!r}")
            if app is not None and not self._deciding:
                raise ValueError(
                    "pass either a handler or upstream=, not both; "
                    "put a Middlebox in front of the upstream to inject faults"
                )
        elif app is None:
            raise ValueError("LoopbackServer needs an app (a handler or a middlebox) or upstream=URL")
        elif self._deciding and getattr(app, "upstream", None) is None:
            raise ValueError("the middlebox has no upstream to forward to; give it one or pass upstream=URL")
        elif not self._deciding and not callable(app):
            raise TypeError(f"app must be a handler(request) -> httpx.Response or have decide(), got {app!r}")
        if admin_port is not None and not hasattr(app, "add_fault"):
            raise ValueError("admin_port needs a Middlebox app: the admin API changes its faults")
        self.app = app
        self.upstream = upstream
        self._handler: Handler | None = app if not self._deciding else getattr(app, "upstream", None)  # type: ignore[assignment]
        self.requested_port = port
        self.port = port
        self.requested_admin_port = admin_port
        self.admin_port: int | None = admin_port
        self.handler_workers = handler_workers
        self.record_bodies = record_bodies
        self._records: deque[ExchangeRecord] = deque(maxlen=keep_records)
        self.outcomes: Counter[str] = Counter()
        self.served = 0
        self.observer_errors: list[str] = []
        self._observer = on_exchange
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._conns: dict[asyncio.Task[Any], HttpConnection] = {}
        self._admin_conns: set[asyncio.Task[Any]] = set()
        self.peak_connections = 0
        self.evicted = 0
        self._executor: ThreadPoolExecutor | None = None
        self._dispatcher: Dispatcher | None = None
        self._budget = ByteBudget(self.limits.max_inflight_body_bytes)

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the running server."""
        return self._url(self.port)

    @property
    def admin_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the running admin API."""
        if self.requested_admin_port is None:
            raise RuntimeError("this LoopbackServer has no admin API; pass admin_port=")
        return self._url(self.admin_port or 0)

    def _url(self, port: int) -> str:
        if not self.running:
            raise RuntimeError("LoopbackServer is not running; call start() or use it as a context manager")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{port}"

    @property
    def running(self) -> bool:
        """Whether the server thread is up and accepting connections."""
        return self._thread is not None and self._thread.is_alive() and self._ready.is_set()

    @property
    def records(self) -> tuple[ExchangeRecord, ...]:
        """The last ``keep_records`` requests received, in order (``served`` counts them all)."""
        return tuple(self._records)

    def stats(self) -> dict[str, Any]:
        """Counters of the server (served at the admin API's ``GET /stats``)."""
        return {
            "requests": self.served,
            "outcomes": dict(self.outcomes),
            "connections": len(self._conns),
            "peak_connections": self.peak_connections,
            "evicted_connections": self.evicted,
            "inflight_body_bytes": self._budget.used,
            "peak_inflight_body_bytes": self._budget.peak,
            "budget_refusals": self._budget.refused,
            "rejected_by_fault": dict(getattr(self.app, "rejected", {})),
        }

    def start(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> LoopbackServer:
        """Bind and serve in a background thread; returns self once it accepts connections.

        Raises :class:`ServerStartError` (a RuntimeError) naming the address when a port
        cannot be bound (already in use, not permitted).
        """
        if self._thread is not None:
            raise RuntimeError("LoopbackServer is already started; call stop() first")
        self._ready.clear()
        self._error = None
        self._executor = ThreadPoolExecutor(self.handler_workers, thread_name_prefix="ctxsim-loopback-worker")
        forwarder = None
        if self.upstream is not None:
            forwarder = Forwarder(self.upstream, timeout_s=self.limits.handler_timeout_s)
        self._dispatcher = Dispatcher(
            app=self.app,
            deciding=self._deciding,
            handler=self._handler,
            forwarder=forwarder,
            limits=self.limits,
            budget=self._budget,
            executor=self._executor,
            on_record=self._on_record,
            keep_bodies=self.record_bodies,
        )
        self._thread = threading.Thread(target=self._run, name="ctxsim-loopback", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s) or self._error is not None:
            error = self._error
            self.stop()
            if isinstance(error, _BindError):
                raise ServerStartError(
                    f"LoopbackServer could not start on {error.address}: {error.error}",
                    listener=error.listener,
                    address=error.address,
                    errno=error.error.errno,
                ) from error
            if error is not None:
                where = f"{self.host}:{self.requested_port}"
                raise ServerStartError(f"LoopbackServer could not start on {where}: {error}") from error
            raise ServerStartError(f"LoopbackServer did not start within {timeout_s} s")
        return self

    def stop(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        """Shut down inside the loop (close the listeners, cancel connections) and join the thread."""
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
        self._thread = self._loop = self._stop = self._executor = None
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

    async def _bind(self, serve: Callable[..., Any], port: int, listener: str) -> asyncio.Server:
        try:
            return await asyncio.start_server(serve, self.host, port)
        except OSError as error:
            raise _BindError(listener, f"{self.host}:{port}", error) from error

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        servers = [await self._bind(self._serve, self.requested_port, "server")]
        self.port = servers[0].sockets[0].getsockname()[1]
        if self._dispatcher is not None:
            self._dispatcher.host_header = f"{self.host}:{self.port}".encode()
        admin = None
        if self.requested_admin_port is not None:
            admin = AdminApi(self.app, stats=self.stats)  # type: ignore[arg-type]
            try:
                servers.append(
                    await self._bind(
                        lambda r, w: self._serve_admin(r, w, admin), self.requested_admin_port, "admin"
                    )
                )
            except _BindError:
                servers[0].close()
                raise
            self.admin_port = servers[1].sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            for server in servers:
                server.close()
            tasks = [*self._conns, *self._admin_conns]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for server in servers:
                await server.wait_closed()

    # -- records ---------------------------------------------------------------------------------

    def _on_record(self, record: ExchangeRecord, trace: ExchangeTrace) -> None:
        self._records.append(record)
        self.outcomes[record.outcome] += 1
        self.served += 1
        if self._observer is not None:
            try:
                self._observer(record, trace)
            except Exception as error:  # a broken log file must not break the server
                self.observer_errors.append(f"{type(error).__name__}: {error}")

    def _record_early(self, outcome: str, status: int, detail: str) -> None:
        """A request that failed before its head was read (malformed, too slow)."""
        self._on_record(
            ExchangeRecord(0, "", "", 0, outcome, status, detail, started_at=time.time()), ExchangeTrace()
        )

    # -- connections -----------------------------------------------------------------------------

    def _make_room(self, newcomer: asyncio.Task[Any]) -> bool:
        """Close an idle keep-alive connection, else one stalled before its head; False if none."""
        now = time.monotonic()
        idle = [
            (conn.phase_since, task)
            for task, conn in self._conns.items()
            if task is not newcomer and conn.phase == "idle"
        ]
        stalled = [
            (conn.phase_since, task)
            for task, conn in self._conns.items()
            if task is not newcomer
            and conn.phase in ("new", "head")
            and now - conn.phase_since > EVICT_STALLED_AFTER_S
        ]
        victims = sorted(idle) or sorted(stalled)
        if not victims:
            return False
        task = victims[0][1]
        self._conns[task].enter("evicted")
        task.cancel()
        self.evicted += 1
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None and self._dispatcher is not None
        conn = HttpConnection(reader, writer, self.limits)
        self._conns[task] = conn
        self.peak_connections = max(self.peak_connections, len(self._conns))
        busy = None
        if len(self._conns) > self.limits.max_connections and not self._make_room(task):
            busy = (
                f"server busy: all {self.limits.max_connections} connections (max_connections) are "
                "serving requests; retry shortly"
            )
        try:
            while True:
                try:
                    head = await conn.next_request()
                except h11.RemoteProtocolError as error:
                    status = error.error_status_hint
                    detail = head_too_large(self.limits) if status == 431 else str(error)
                    self._record_early("bad-request", status, detail)
                    await conn.fault_reply(text_reply(status, f"{detail}\n"))
                    return
                except ClientTooSlow:
                    detail = (
                        f"request head not complete within {self.limits.head_timeout_s:g} s (head_timeout_s)"
                    )
                    self._record_early("client-timeout", 408, detail)
                    await conn.fault_reply(text_reply(408, f"{detail}\n"))
                    return
                if head is None or not await self._dispatcher.serve(conn, head, busy=busy):
                    return
                conn.h11.start_next_cycle()
        except (TimeoutError, ConnectionError, ClientGone, h11.ProtocolError):
            pass  # a stalled or vanished client: just close
        except asyncio.CancelledError:
            pass  # shutdown or eviction; ending quietly spares asyncio's stream callback a cancelled task
        finally:
            self._conns.pop(task, None)
            writer.close()
            if conn.upstream is not None:
                await conn.upstream.aclose()

    async def _serve_admin(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, admin: AdminApi
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        conn = HttpConnection(reader, writer, ADMIN_LIMITS)
        self._admin_conns.add(task)
        try:
            while (head := await conn.next_request()) is not None:
                try:
                    body = await conn.read_body()
                except BodyTooLarge:
                    limit = ADMIN_LIMITS.max_body_bytes
                    await conn.fault_reply(json_reply(413, {"error": f"the body is over {limit:,} bytes"}))
                    return
                answer = admin.handle(
                    head.method.decode("ascii", "replace"), head.target.decode("ascii", "replace"), body
                )
                reply = json_reply(answer.status, answer.document, answer.headers)
                if not await conn.send(reply, close=False) or not conn.reusable:
                    return
                conn.h11.start_next_cycle()
        except h11.RemoteProtocolError as error:
            await conn.fault_reply(json_reply(error.error_status_hint, {"error": f"malformed HTTP: {error}"}))
        except (
            TimeoutError,
            ConnectionError,
            ClientGone,
            ClientTooSlow,
            h11.ProtocolError,
            asyncio.CancelledError,
        ):
            pass
        finally:
            self._admin_conns.discard(task)
            writer.close()
