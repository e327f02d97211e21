"""Writing an answer back to the client as the middlebox's decision shapes it: late, slow or cut.

:func:`relay` writes a handler's whole answer at once, or an upstream's answer piece by piece as
it streams in, after a latency, at a bandwidth, or up to a cut (:class:`~simulator.proxy.fault_base.
Forward`). The exchange is recorded before the client can have the whole answer (tests and logs
read records as soon as the answer is in), never by holding a stream back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable

import h11

from simulator.proxy.fault_base import Forward
from simulator.proxy.forward import UpstreamFailure
from simulator.proxy.http11 import HttpConnection, Reply
from simulator.proxy.journal import PendingExchange
from simulator.proxy.redact import redact_headers

__all__ = ["THROTTLE_SLICES_PER_S", "relay", "text_pairs"]

THROTTLE_SLICES_PER_S = 20  # a throttled answer is written in this many pieces per second of its rate
Record = Callable[[str, int | None, str], None]


def text_pairs(pairs: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """Raw header pairs as text."""
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in pairs]


async def relay(
    conn: HttpConnection,
    status: int,
    headers: Iterable[tuple[bytes, bytes]],
    length: int | None,
    body: AsyncIterator[bytes] | bytes,
    forward: Forward,
    ex: PendingExchange,
    *,
    outcome: str,
    max_delay_s: float,
    record: Record,
) -> bool:
    """Write an answer as ``forward`` shapes it; True when the connection can serve another request.

    ``body`` is the whole body (written at once unless shaped) or its pieces as they come.
    """
    raw = tuple(headers)
    ex.trace.response_headers = redact_headers(text_pairs(raw))
    close = (b"connection", b"close") in [(k.lower(), v.lower()) for k, v in raw]
    head_only = ex.method == "HEAD"
    if forward.latency_s > 0:
        await asyncio.sleep(min(forward.latency_s, max_delay_s))
    ex.trace.ttfb_ms = (time.monotonic() - ex.started) * 1000
    try:
        if isinstance(body, bytes) and not forward.shaped:
            if not head_only:
                ex.trace.answer(body)
                ex.response_bytes = len(body)
            record(outcome, status, "")  # before the client can have the answer: tests read records
            close = not await conn.send(Reply(status, raw, body), close=close, head_only=head_only)
            return not close and conn.reusable
        await conn.send_head(status, raw, close=close, content_length=length)
        if head_only:
            record(outcome, status, "")
            await conn.send_end()
            return not close and conn.reusable
        complete = await _write_body(
            conn, _pieces(body), forward, ex, length, lambda: record(outcome, status, "")
        )
    except UpstreamFailure as failure:  # the upstream broke off mid-answer
        record("upstream-cut", status, failure.detail)
        conn.writer.close()
        return False
    except (ConnectionError, TimeoutError, h11.LocalProtocolError) as error:
        record("client-gone", status, f"{type(error).__name__} while answering")
        conn.writer.close()
        return False
    if not complete:
        record("cut-stream", status, f"cut after {ex.response_bytes} answer bytes")
        conn.writer.close()
        return False
    await conn.send_end()
    return not close and conn.reusable


async def _write_body(
    conn: HttpConnection,
    body: AsyncIterator[bytes],
    forward: Forward,
    ex: PendingExchange,
    length: int | None,
    before_last: Callable[[], None],
) -> bool:
    """Write the body through the shaping; False when it was cut (the connection must then close).

    ``before_last`` runs once, when the whole answer is accounted for but before the client
    can have it (before the piece that completes a declared length, else before the end of
    a chunked body): the exchange is recorded complete by then. Pieces go out as they come.
    """
    started = time.monotonic()
    recorded = False
    async for chunk in body:
        completes = length is not None and ex.response_bytes + len(chunk) >= length and not recorded
        if forward.cut_after is not None and ex.response_bytes + len(chunk) > forward.cut_after:
            await _write(
                conn, chunk[: forward.cut_after - ex.response_bytes], ex, forward.rate_bps, started, None
            )
            return False
        await _write(conn, chunk, ex, forward.rate_bps, started, before_last if completes else None)
        recorded = recorded or completes
    if not recorded:
        before_last()
    return True


async def _write(
    conn: HttpConnection,
    chunk: bytes,
    ex: PendingExchange,
    rate: int | None,
    started: float,
    before_final: Callable[[], None] | None,
) -> None:
    """Write ``chunk`` (in slices when throttled); ``before_final`` runs before its last slice goes."""
    step = len(chunk) if rate is None else max(1, rate // THROTTLE_SLICES_PER_S)
    for offset in range(0, len(chunk), step or 1):
        piece = chunk[offset : offset + step]
        ex.trace.answer(piece)
        ex.response_bytes += len(piece)
        if before_final is not None and offset + step >= len(chunk):
            before_final()
        await conn.send_data(piece)
        if rate is not None:
            due = started + ex.response_bytes / rate - time.monotonic()
            if due > 0:
                await asyncio.sleep(due)
    if not chunk and before_final is not None:
        before_final()


async def _pieces(body: AsyncIterator[bytes] | bytes) -> AsyncIterator[bytes]:
    if isinstance(body, bytes):
        yield body
    else:
        async for piece in body:
            yield piece
