"""One request through the loopback server: read it, let the middlebox decide, act, answer, record it.

:class:`Dispatcher` serves one request on an :class:`~simulator.proxy.http11.HttpConnection`.
A middlebox decides in the event loop (it is fast, and so sees requests in arrival order);
a handler (a mock provider) runs in a worker thread, its timeout counted from when it
starts, not from time spent queued; an upstream URL is forwarded concurrently, on an
upstream link of the client's own connection (:mod:`simulator.proxy.forward`). Answers stream
back shaped as the decision says (latency, bandwidth, a cut). Every request ends as one
:class:`~simulator.proxy.journal.ExchangeRecord`, handed to ``on_record``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import h11
import httpx

from simulator.proxy.fault_base import FORWARD, ConnectionFault, Decision, Forward, Respond
from simulator.proxy.faults import CloseAfterBody, IdleTimeout, ResetAfter
from simulator.proxy.forward import Forwarder, UpstreamFailure
from simulator.proxy.http11 import (
    BodyTooLarge,
    ClientGone,
    ClientTooSlow,
    HttpConnection,
    OverBudget,
    Reply,
    content_length,
    head_bytes,
    text_reply,
)
from simulator.proxy.journal import ExchangeRecord, ExchangeTrace, PendingExchange
from simulator.proxy.limits import ByteBudget, ServerLimits
from simulator.proxy.redact import redact_headers, redact_target, redact_text
from simulator.proxy.relay import relay, text_pairs

__all__ = ["TURN_HEADER", "Dispatcher", "Refusal"]

TURN_HEADER = "x-ctxsim-turn"
MAX_TURN_DIGITS = 18
# Most specific first: what the client gets when a handler or middlebox failed.
HANDLER_FAILURES: tuple[tuple[type[Exception], int, str], ...] = (
    (TimeoutError, 504, "handler-timeout"),
    (Exception, 500, "handler-error"),
)


class Refusal(Exception):
    """The server refuses the request itself: ``status`` and ``outcome`` (see journal.OUTCOMES)."""

    def __init__(
        self, message: str, status: int, outcome: str, headers: Iterable[tuple[str, str]] = ()
    ) -> None:
        super().__init__(message)
        self.status, self.outcome, self.headers = status, outcome, tuple(headers)


def _fault_of(error: httpx.TransportError, max_delay_s: float) -> ConnectionFault:
    """The wire fault matching a transport error a handler raised in-process."""
    if isinstance(error, httpx.TimeoutException):
        return IdleTimeout(delay_s=max_delay_s)
    if isinstance(error, httpx.RemoteProtocolError):
        return CloseAfterBody()
    return ResetAfter(n_bytes=0)


def _raw_reply(response: httpx.Response, limit: int) -> Reply:
    """A handler's answer as sent on the wire (still encoded; decoded only if it was already read)."""
    decoded = False
    if isinstance(response.stream, httpx.ByteStream):
        body = b"".join(response.stream)
    elif response.is_stream_consumed:
        body, decoded = response.content, True
    else:
        chunks, size = [], 0
        for chunk in response.iter_raw():
            size += len(chunk)
            if size > limit:
                raise ValueError(f"the handler's answer exceeds max_body_bytes ({limit})")
            chunks.append(chunk)
        body = b"".join(chunks)
    headers = tuple(
        (k, v) for k, v in response.headers.raw if not (decoded and k.lower() == b"content-encoding")
    )
    if b"close" in response.headers.get("connection", "").lower().encode():
        headers += ((b"connection", b"close"),)
    return Reply(response.status_code, headers, body)


class Dispatcher:
    """Serves requests for a LoopbackServer (one instance per running server, used in its loop)."""

    def __init__(
        self,
        *,
        app: Any,
        deciding: bool,
        handler: Callable[[httpx.Request], httpx.Response] | None,
        forwarder: Forwarder | None,
        limits: ServerLimits,
        budget: ByteBudget,
        executor: ThreadPoolExecutor,
        on_record: Callable[[ExchangeRecord, ExchangeTrace], None],
        keep_bodies: bool,
    ) -> None:
        self.app, self.deciding, self.handler, self.forwarder = app, deciding, handler, forwarder
        self.limits, self.budget, self.executor = limits, budget, executor
        self.host_header = b"127.0.0.1"  # for a request without a Host header; the server sets its address
        self.on_record, self.keep_bodies = on_record, keep_bodies
        self.requests = 0

    # -- one request -------------------------------------------------------------------------

    async def serve(self, conn: HttpConnection, head: h11.Request, *, busy: str | None = None) -> bool:
        """Serve the request whose ``head`` was read; True keeps the connection for another."""
        self.requests += 1
        target = head.target.decode("ascii", "replace")
        trace = ExchangeTrace(keep_bodies=self.keep_bodies)
        trace.request_headers = redact_headers(text_pairs(head.headers))
        trace.page_host, trace.page_path = self._seen_by_gateway(head, target)
        ex = PendingExchange(
            head.method.decode("ascii", "replace"),
            redact_target(target),
            content_length(head),
            head_bytes(head),
            time.monotonic(),
            time.time(),
            trace,
            turn=self.requests,
        )
        try:
            return await self._serve(conn, head, ex, busy)
        except (ConnectionError, TimeoutError, asyncio.CancelledError):
            raise
        except Exception as error:  # a bug here still gets the client an answer, never an empty reply
            return await self._refuse(
                conn, ex, Refusal(f"handler-error: internal error: {error!r}", 500, "handler-error")
            )
        finally:
            if ex.reserved:
                self.budget.release(ex.reserved)

    async def _serve(
        self, conn: HttpConnection, head: h11.Request, ex: PendingExchange, busy: str | None
    ) -> bool:
        try:
            if ex.head_bytes > self.limits.max_head_bytes:
                raise Refusal(head_too_large(self.limits), 431, "bad-request")
            ex.turn = self._turn(head)
            if busy is not None:
                raise Refusal(busy, 503, "busy", (("retry-after", "1"),))
            early = self._decide_head(head, ex) if self.deciding else None
            if early is not None:
                return await self._act_at_head(conn, early, ex)
            reserve = self._reserve_for(ex)
            body = await conn.read_body(reserve=reserve)
        except Refusal as refusal:
            return await self._refuse(conn, ex, refusal)
        except BodyTooLarge:
            return await self._refuse(
                conn,
                ex,
                Refusal(
                    f"request body exceeds the loopback server's max_body_bytes "
                    f"({self.limits.max_body_bytes}); "
                    "raise max_body_bytes",
                    413,
                    "body-too-large",
                ),
            )
        except OverBudget:
            return await self._refuse(conn, ex, over_budget(self.budget))
        except ClientTooSlow:
            return await self._refuse(conn, ex, Refusal(self._too_slow(conn), 408, "client-timeout"))
        except ClientGone:
            self._record(ex, "client-gone", None)
            return False
        ex.body_bytes = len(body)
        if self.keep_bodies:
            ex.trace.request_body = body
        host = dict(head.headers).get(b"host", self.host_header).decode("ascii", "replace")
        url = f"http://{host}{head.target.decode('ascii', 'replace')}"
        request = httpx.Request(ex.method, url, headers=head.headers, content=body)
        return await self._decided(conn, request, ex)

    def _seen_by_gateway(self, head: h11.Request, target: str) -> tuple[str, str]:
        """The host and path the answering gateway sees (a page may name them)."""
        if self.forwarder is not None:
            return self.forwarder.host, self.forwarder.path_for(head.target)
        host = dict(head.headers).get(b"host", self.host_header).decode("ascii", "replace")
        name, _, port = host.rpartition(":")
        return (name if port.isdigit() else host), target.partition("?")[0]

    def _reserve_for(self, ex: PendingExchange) -> Callable[[int], bool] | None:
        """Reserve the declared body up front (503 before reading it), or chunk by chunk when chunked."""
        if ex.content_length is None:

            def reserve(n_bytes: int) -> bool:
                if not self.budget.try_reserve(n_bytes):
                    return False
                ex.reserved += n_bytes
                return True

            return reserve
        if ex.content_length > self.limits.max_body_bytes:
            raise BodyTooLarge()
        if ex.content_length:
            if not self.budget.try_reserve(ex.content_length):
                raise over_budget(self.budget)
            ex.reserved = ex.content_length
        return None

    def _turn(self, head: h11.Request) -> int:
        value = dict(head.headers).get(TURN_HEADER.encode())
        if value is None:
            return self.requests
        shown = value[:32].decode("latin-1") + ("…" if len(value) > 32 else "")
        if value.isdigit() and len(value) > MAX_TURN_DIGITS:  # int() of 5,000 digits would raise
            raise Refusal(
                f"{TURN_HEADER} must have at most {MAX_TURN_DIGITS} digits, got {len(value):,} ({shown!r})",
                400,
                "bad-request",
            )
        if not value.isdigit() or int(value) < 1:
            raise Refusal(f"{TURN_HEADER} must be a positive integer, got {shown!r}", 400, "bad-request")
        return int(value)

    def _too_slow(self, conn: HttpConnection) -> str:
        limits = self.limits
        if conn.phase == "body":
            return (
                f"request body too slow: under {limits.min_body_rate:,} bytes/s after "
                f"{limits.body_timeout_s:g} s (min_body_rate, body_timeout_s)"
            )
        return f"request head not complete within {limits.head_timeout_s:g} s (head_timeout_s)"

    # -- deciding and acting -------------------------------------------------------------------

    def _decide_head(self, head: h11.Request, ex: PendingExchange) -> Respond | ConnectionFault | None:
        decide_headers = getattr(self.app, "decide_headers", None)
        if decide_headers is None:
            return None
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers]
        try:
            decision: Respond | ConnectionFault | None = decide_headers(
                ex.method, head.target.decode("ascii", "replace"), headers, ex.content_length, ex.turn
            )
            return decision
        except Exception as error:
            raise self._handler_refusal(error) from error

    async def _act_at_head(
        self, conn: HttpConnection, decision: Respond | ConnectionFault, ex: PendingExchange
    ) -> bool:
        """Carry out a decision taken from the head alone, before the body is in."""
        if isinstance(decision, Respond):
            ex.detail = "answered at the head"
            return await self._respond(conn, decision, ex)
        n_bytes = decision.n_bytes if isinstance(decision, ResetAfter) else 0
        try:
            body = await conn.read_body(stop_at=n_bytes)
        except (ClientGone, ClientTooSlow, BodyTooLarge, OverBudget):
            self._record(ex, "client-gone", None)
            return False
        ex.body_bytes = len(body)
        ex.detail = f"dropped after {len(body)} body bytes"
        return await self._drop(conn, decision, ex)

    async def _decided(self, conn: HttpConnection, request: httpx.Request, ex: PendingExchange) -> bool:
        decision: Decision = FORWARD
        try:
            if self.deciding:
                decision = self.app.decide(request, ex.turn)
        except Exception as error:
            return await self._refuse(conn, ex, self._handler_refusal(error))
        if isinstance(decision, Respond):
            return await self._respond(conn, decision, ex)
        if isinstance(decision, ConnectionFault):
            return await self._drop(conn, decision, ex)
        assert isinstance(decision, Forward)
        ex.fault, ex.fault_name = self._named(decision.applied)
        if self.forwarder is not None:
            return await self._forward(conn, request, decision, ex)
        return await self._answer(conn, request, decision, ex)

    def _named(self, applied: tuple[str, ...]) -> tuple[str, str]:
        """(kinds, names) of the faults that decided, each comma-joined."""
        named = dict(getattr(self.app, "named_faults", ()))
        kinds = [named[name].kind if name in named else name for name in applied]
        return ",".join(kinds), ",".join(applied)

    async def _respond(self, conn: HttpConnection, decision: Respond, ex: PendingExchange) -> bool:
        ex.fault, ex.fault_name = self._named(decision.applied)
        if decision.delay_s > 0:  # silent (a gateway waiting on its upstream), unless the client leaves
            await conn.wait_for_eof(min(decision.delay_s, self.limits.max_fault_delay_s))
        reply = Reply(
            decision.status,
            tuple((k.encode("latin-1"), v.encode("latin-1")) for k, v in decision.headers),
            decision.body,
        )
        ex.trace.response_headers = redact_headers(decision.headers)
        ex.trace.answer(decision.body)
        ex.response_bytes = len(decision.body)
        self._record(ex, "responded", decision.status, ex.detail)
        keeps = (b"connection", b"close") not in [(k.lower(), v.lower()) for k, v in reply.headers]
        if keeps and conn.h11.their_state is h11.DONE:  # a page after the whole body: keep-alive, as nginx
            return await conn.send(reply, close=False) and conn.reusable
        await conn.fault_reply(reply, linger=decision.lingers)
        return False

    async def _drop(self, conn: HttpConnection, fault: ConnectionFault, ex: PendingExchange) -> bool:
        """Carry out a connection fault for real."""
        ex.fault = fault.kind
        ex.fault_name = getattr(self.app, "name_of", lambda f: f.kind)(fault)
        self._record(ex, fault.kind, None, ex.detail)
        if isinstance(fault, ResetAfter):
            conn.reset()
        else:
            await conn.silent_close(min(getattr(fault, "delay_s", 0.0), self.limits.max_fault_delay_s))
        return False

    async def _refuse(self, conn: HttpConnection, ex: PendingExchange, refusal: Refusal) -> bool:
        self._record(ex, refusal.outcome, refusal.status, str(refusal))
        reply = text_reply(refusal.status, f"{refusal}\n", refusal.headers)
        ex.trace.response_headers = [(k.decode(), v.decode("latin-1")) for k, v in reply.headers]
        await conn.fault_reply(reply)
        return False

    def _handler_refusal(self, error: Exception) -> Refusal:
        status, outcome = next((s, o) for kind, s, o in HANDLER_FAILURES if isinstance(error, kind))
        detail = redact_text(str(error) or type(error).__name__)
        return Refusal(f"{outcome}: {detail}", status, outcome)

    # -- answering: a handler in a worker thread, or the upstream URL -------------------------

    async def _answer(
        self, conn: HttpConnection, request: httpx.Request, forward: Forward, ex: PendingExchange
    ) -> bool:
        assert self.handler is not None
        started = time.monotonic()
        try:
            reply = await self._in_worker(self._call_handler, request)
        except Refusal as refusal:
            return await self._refuse(conn, ex, refusal)
        except httpx.TransportError as error:  # a handler faulting in-process: do it for real
            return await self._drop(conn, _fault_of(error, self.limits.max_fault_delay_s), ex)
        except Exception as error:
            return await self._refuse(conn, ex, self._handler_refusal(error))
        ex.upstream_ms = (time.monotonic() - started) * 1000
        return await relay(
            conn,
            reply.status,
            reply.headers,
            len(reply.body),
            reply.body,
            forward,
            ex,
            outcome="answered",
            max_delay_s=self.limits.max_fault_delay_s,
            record=self._recorder(ex),
        )

    def _call_handler(self, request: httpx.Request) -> Reply:
        """Runs in a worker thread: the handler's answer as raw bytes."""
        assert self.handler is not None
        response = self.handler(request)
        if not isinstance(response, httpx.Response):
            kind = type(response).__name__
            raise TypeError(f"handler {self.handler!r} returned {kind}, not httpx.Response")
        return _raw_reply(response, self.limits.max_body_bytes)

    async def _in_worker(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn`` in the worker pool; its timeout starts when it starts, not while it waits its turn."""
        loop = asyncio.get_running_loop()
        started = asyncio.Event()

        def run() -> Any:
            loop.call_soon_threadsafe(started.set)
            return fn(*args)

        future = loop.run_in_executor(self.executor, run)
        try:
            async with asyncio.timeout(self.limits.queue_timeout_s):
                await started.wait()
        except TimeoutError:
            future.cancel()
            raise Refusal(
                f"server busy: no handler worker was free within {self.limits.queue_timeout_s:g} s "
                "(queue_timeout_s)",
                503,
                "busy",
                (("retry-after", "1"),),
            ) from None
        async with asyncio.timeout(self.limits.handler_timeout_s):
            return await future

    async def _forward(
        self, conn: HttpConnection, request: httpx.Request, forward: Forward, ex: PendingExchange
    ) -> bool:
        assert self.forwarder is not None
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.limits.handler_timeout_s):
                if conn.upstream is None:
                    conn.upstream = self.forwarder.link()
                response = await conn.upstream.send(
                    request.method, request.url.raw_path, request.headers.raw, request.content
                )
        except TimeoutError:
            within = f"no answer from {self.forwarder.shown} within {self.limits.handler_timeout_s:g} s"
            failure = UpstreamFailure("upstream-timeout", 504, within)
            return await self._upstream_failed(conn, failure, ex)
        except UpstreamFailure as failure:
            return await self._upstream_failed(conn, failure, ex)
        ex.upstream_ms = (time.monotonic() - started) * 1000
        if conn.upstream.answered_early:
            ex.detail = "the upstream answered before the whole body was sent"
        return await relay(
            conn,
            response.status,
            response.headers,
            response.content_length,
            response.chunks(),
            forward,
            ex,
            outcome="forwarded",
            max_delay_s=self.limits.max_fault_delay_s,
            record=self._recorder(ex),
        )

    async def _upstream_failed(
        self, conn: HttpConnection, failure: UpstreamFailure, ex: PendingExchange
    ) -> bool:
        if failure.status is not None:
            refusal = Refusal(f"{failure.outcome}: {failure.detail}", failure.status, failure.outcome)
            return await self._refuse(conn, ex, refusal)
        self._record(ex, failure.outcome, None, failure.detail)
        if failure.outcome == "upstream-reset":
            conn.reset()
        else:
            conn.writer.close()
        return False

    # -- recording ------------------------------------------------------------------------------

    def _recorder(self, ex: PendingExchange) -> Callable[[str, int | None, str], None]:
        def record(outcome: str, status: int | None, detail: str = "") -> None:
            self._record(ex, outcome, status, detail or ex.detail)

        return record

    def _record(self, ex: PendingExchange, outcome: str, status: int | None, detail: str = "") -> None:
        self.on_record(ex.record(outcome, status, detail), ex.trace)


def head_too_large(limits: ServerLimits) -> str:
    return f"request head exceeds max_head_bytes ({limits.max_head_bytes}); raise max_head_bytes"


def over_budget(budget: ByteBudget) -> Refusal:
    """The 503 a request gets when its body would pass the in-flight budget."""
    return Refusal(
        f"server busy: request bodies in flight would pass max_inflight_body_bytes "
        f"({budget.limit:,} bytes; {budget.used:,} in use); retry later or raise "
        "max_inflight_body_bytes",
        503,
        "busy",
        (("retry-after", "1"),),
    )
