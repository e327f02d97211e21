"""Resets as a client sees them: the wire observation tells a gateway that closes with the body unread
(a reset) from one that read it first — whatever the machine's TCP buffers take off the client before
that close — and the mocks of HAProxy, Squid and Caddy reset only a client still sending."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import pytest

from simulator.engines.conformance import observe
from simulator.providers.service import MockService
from simulator.proxy.faults import BodyCap
from simulator.proxy.loopback import LoopbackServer
from simulator.proxy.middlebox import Middlebox

ANSWER = (
    b"HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: text/html\r\n"
    b"Content-Length: 13\r\nConnection: close\r\n\r\n<h1>413</h1>\n"
)
MIB = 1024 * 1024


@contextmanager
def early_answering_gateway(
    *, before_close: Literal["nothing", "pending", "everything"], receive_buffer: int
) -> Iterator[str]:
    """A one-connection server that answers 413 at the request's first bytes, waits 0.5 s while the
    client sends, then reads ``nothing`` more, what is ``pending`` (without waiting) or ``everything``
    of the body, and closes (a reset when it closes with the body unread)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(ANSWER)
            time.sleep(0.5)
            try:
                if before_close == "pending":
                    while conn.recv(1 << 16, socket.MSG_DONTWAIT):
                        pass
                elif before_close == "everything":
                    conn.settimeout(0.3)
                    while conn.recv(1 << 16):
                        pass
            except (BlockingIOError, TimeoutError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        thread.join(timeout=5)
        listener.close()


def test_a_close_with_the_body_unread_is_a_reset_even_when_every_write_went_through() -> None:
    with early_answering_gateway(before_close="nothing", receive_buffer=4 * MIB) as url:
        seen = observe(url, 200_000, early_after=2_000)
    assert (seen.status, seen.early, seen.closed, seen.reset) == (413, True, True, True)


def test_a_gateway_that_reads_the_body_before_it_closes_is_no_reset() -> None:
    with early_answering_gateway(before_close="everything", receive_buffer=4 * MIB) as url:
        seen = observe(url, 200_000, early_after=2_000)
    assert (seen.status, seen.early, seen.closed, seen.reset) == (413, True, True, False)


def test_a_client_with_a_large_send_buffer_still_meets_the_reset_of_a_gateway_that_stops_reading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A machine whose kernel gives a client megabytes of send buffer: the rest of the body would sit
    in it when the gateway drops what it holds and closes, the close would read as clean, and the
    reset would come after the client stopped looking."""
    connect = socket.create_connection

    def with_large_send_buffer(*args: Any, **kwargs: Any) -> socket.socket:
        sock = connect(*args, **kwargs)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 * MIB)
        return sock

    monkeypatch.setattr(socket, "create_connection", with_large_send_buffer)
    with early_answering_gateway(before_close="pending", receive_buffer=64 * 1024) as url:
        seen = observe(url, 3 * MIB, early_after=2_000)
    assert (seen.status, seen.early, seen.closed, seen.reset) == (413, True, True, True)


@contextmanager
def closing_at_once_cap(limit: int) -> Iterator[str]:
    """HAProxy's imitation (a 413, then a close without lingering) in front of a mock provider."""
    service = MockService.for_host("openai", context_window=128_000, seed=0)
    with LoopbackServer(service, max_body_bytes=8 * MIB) as upstream:
        box = Middlebox(None, (BodyCap(limit=limit, response="haproxy"),))
        with LoopbackServer(box, upstream=upstream.base_url, max_body_bytes=8 * MIB) as server:
            yield server.base_url


def test_a_mock_that_closes_at_once_reads_what_already_came_before_it_closes() -> None:
    with closing_at_once_cap(128 * 1024) as url:
        whole = [observe(url, 128 * 1024 + 1) for _ in range(5)]
        still_sending = observe(url, 4_000_000, early_after=128 * 1024 + 4096)
    assert {(seen.status, seen.closed, seen.reset) for seen in whole} == {(413, True, False)}
    assert (still_sending.status, still_sending.early, still_sending.reset) == (413, True, True)
