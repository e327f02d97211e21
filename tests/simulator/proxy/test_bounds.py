"""Bounded resources, clear errors: deadlines that never restart per byte, the in-flight budget, records."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from simulator.proxy.loopback import TURN_HEADER, LoopbackServer

KB = 1024


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"body_bytes": len(request.content)})


def connect(server: LoopbackServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=5.0)


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def trickle(sock: socket.socket, data: bytes, pause_s: float) -> int:
    """Send ``data`` one byte at a time; the number of bytes sent before the server closed."""
    for sent in range(len(data)):
        try:
            sock.sendall(data[sent : sent + 1])
        except OSError:
            return sent
        time.sleep(pause_s)
    return len(data)


def test_the_head_deadline_does_not_restart_per_byte() -> None:
    head = b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n" + b"x-pad: " + b"a" * 200 + b"\r\n\r\n"
    with LoopbackServer(ok, head_timeout_s=0.5) as server, connect(server) as sock:
        sent = trickle(sock, head, 0.02)  # one byte every 20 ms would take over 5 s
        answer = read_all(sock)
    assert sent < len(head)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"request head not complete within 0.5 s (head_timeout_s)" in answer
    assert [(r.outcome, r.status) for r in server.records] == [("client-timeout", 408)]


def test_a_body_under_the_minimum_rate_is_cut_after_its_grace() -> None:
    head = b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\n"
    with LoopbackServer(ok, body_timeout_s=0.3, min_body_rate=1000) as server, connect(server) as sock:
        sock.sendall(head)
        sent = trickle(sock, b"x" * 200, 0.02)  # ~50 bytes/s, far under 1,000 bytes/s
        answer = read_all(sock)
    assert sent < 200
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"request body too slow: under 1,000 bytes/s after 0.3 s" in answer
    assert server.records[0].outcome == "client-timeout"


def test_a_slow_but_steady_upload_outlasting_its_grace_is_served() -> None:
    server = LoopbackServer(ok, body_timeout_s=1.0, min_body_rate=1000)
    with server, httpx.Client(trust_env=False) as client:

        def pieces() -> object:
            for _ in range(12):  # 1.8 s in all, past the 1 s grace, at ~33 KB/s: far over 1,000 B/s
                time.sleep(0.15)
                yield b"x" * 5 * KB

        reply = client.post(server.base_url + "/v1/messages", content=pieces())
    assert reply.json() == {"body_bytes": 60 * KB}


def test_bodies_in_flight_beyond_the_budget_get_a_clear_503_and_the_budget_is_released() -> None:
    server = LoopbackServer(ok, max_inflight_body_bytes=100 * KB)
    with server, connect(server) as held, httpx.Client(trust_env=False) as client:
        held.sendall(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % (80 * KB) + b"x" * KB)
        deadline = time.monotonic() + 5
        while server.stats()["inflight_body_bytes"] < 80 * KB and time.monotonic() < deadline:
            time.sleep(0.01)
        refused = client.post(server.base_url + "/b", content=b"y" * 40 * KB)
        small = client.post(server.base_url + "/c", content=b"z" * 10 * KB)
        held.sendall(b"x" * 79 * KB)
        assert held.recv(65536).startswith(b"HTTP/1.1 200 ")
        after = client.post(server.base_url + "/b", content=b"y" * 40 * KB)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert refused.text.startswith(
        "server busy: request bodies in flight would pass max_inflight_body_bytes "
        "(102,400 bytes; 81,920 in use)"
    )
    assert small.status_code == 200 and after.status_code == 200
    assert server.stats()["budget_refusals"] == 1 and server.stats()["inflight_body_bytes"] == 0


def test_records_keep_the_last_n_and_the_counters_count_everything() -> None:
    with LoopbackServer(ok, keep_records=5) as server, httpx.Client(trust_env=False) as client:
        for i in range(20):
            client.post(server.base_url + f"/r/{i}", content=b"x")
    assert [r.path for r in server.records] == [f"/r/{i}" for i in range(15, 20)]
    assert server.served == 20 and server.outcomes == {"answered": 20}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1" * 5000, "x-ctxsim-turn must have at most 18 digits, got 5,000 ('" + "1" * 32 + "…')"),
        ("seven", "x-ctxsim-turn must be a positive integer, got 'seven'"),
        ("0", "x-ctxsim-turn must be a positive integer, got '0'"),
        ("-3", "x-ctxsim-turn must be a positive integer, got '-3'"),
    ],
)
def test_a_bad_turn_header_gets_a_400_line_and_the_server_keeps_serving(value: str, message: str) -> None:
    with LoopbackServer(ok) as server, httpx.Client(trust_env=False) as client:
        bad = client.post(server.base_url + "/v1/messages", content=b"x", headers={TURN_HEADER: value})
        good = client.post(server.base_url + "/v1/messages", content=b"x", headers={TURN_HEADER: "7"})
    assert (bad.status_code, bad.text) == (400, message + "\n")
    assert good.status_code == 200
    assert [(r.outcome, r.turn) for r in server.records] == [("bad-request", 1), ("answered", 7)]


def test_a_content_length_of_5000_digits_gets_a_400_not_a_crash() -> None:
    head = b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: " + b"9" * 5000 + b"\r\n\r\n"
    with LoopbackServer(ok) as server, connect(server) as sock:
        sock.sendall(head)
        answer = read_all(sock)
        assert httpx.get(server.base_url + "/after", trust_env=False).status_code == 200
    assert answer.startswith(b"HTTP/1.1 400 ")


def test_a_handler_timeout_counts_from_when_it_starts_not_from_the_queue() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        time.sleep(0.25)
        return httpx.Response(200, text="done")

    from concurrent.futures import ThreadPoolExecutor

    # one worker, 8 requests: the last waits ~1.75 s in the queue, far over the 1 s handler timeout
    with (
        LoopbackServer(slow, handler_timeout_s=1.0) as server,
        httpx.Client(trust_env=False, timeout=30, limits=httpx.Limits(max_connections=8)) as client,
        ThreadPoolExecutor(8) as pool,
    ):
        replies = list(pool.map(lambda i: client.get(f"{server.base_url}/{i}"), range(8)))
    assert [reply.status_code for reply in replies] == [200] * 8
