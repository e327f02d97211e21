"""Forwarding to an upstream URL: concurrent, timed from the upstream call, streamed, faults mirrored."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from simulator.proxy.faults import BodyCap, CloseAfterBody, CutStream, Fault, Latency, ResetAfter, render_page
from simulator.proxy.loopback import LoopbackServer
from simulator.proxy.middlebox import Middlebox
from simulator.proxy.pages import BODY_CAP_PAGES

KB = 1024
DROPPED_CONNECTION = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"path": request.url.path})


def parallel(url: str, count: int, timeout: float = 30.0) -> list[httpx.Response]:
    client = httpx.Client(trust_env=False, timeout=timeout, limits=httpx.Limits(max_connections=count))
    with client, ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda i: client.post(f"{url}/r/{i}", content=b"x" * KB), range(count)))


def test_requests_are_forwarded_concurrently() -> None:
    barrier = threading.Barrier(10, timeout=10)

    def meets_the_others(request: httpx.Request) -> httpx.Response:
        barrier.wait()  # only passes when 10 requests are at the upstream at once
        return ok(request)

    with (
        LoopbackServer(meets_the_others, handler_workers=10) as upstream,
        LoopbackServer(None, upstream=upstream.base_url) as proxy,
    ):
        replies = parallel(proxy.base_url, 10)
    assert [reply.status_code for reply in replies] == [200] * 10
    assert sorted(reply.json()["path"] for reply in replies) == sorted(f"/r/{i}" for i in range(10))


def test_the_upstream_timeout_counts_from_the_upstream_call_not_the_queue() -> None:
    def half_a_second(request: httpx.Request) -> httpx.Response:
        time.sleep(0.5)
        return ok(request)

    # 10 parallel requests to an upstream answering in 0.5 s, 2 s to answer: serialised, 7 would time out
    with (
        LoopbackServer(half_a_second, handler_workers=10) as upstream,
        LoopbackServer(None, upstream=upstream.base_url, handler_timeout_s=2.0) as proxy,
    ):
        replies = parallel(proxy.base_url, 10)
    assert [reply.status_code for reply in replies] == [200] * 10


def test_an_upstream_slower_than_the_handler_timeout_gets_a_504() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        time.sleep(1.0)
        return ok(request)

    with (
        LoopbackServer(slow) as upstream,
        LoopbackServer(None, upstream=upstream.base_url, handler_timeout_s=0.2) as proxy,
    ):
        reply = httpx.get(proxy.base_url + "/x", trust_env=False)
    assert reply.status_code == 504 and reply.text.startswith("upstream-timeout: ")
    assert proxy.records[0].outcome == "upstream-timeout"


@pytest.mark.parametrize(
    ("fault", "outcomes"),
    [
        (ResetAfter(n_bytes=KB), {"upstream-reset", "upstream-closed"}),
        (CloseAfterBody(min_bytes=10 * KB), {"upstream-closed", "upstream-reset"}),
    ],
)
def test_an_upstream_that_drops_the_connection_drops_the_client_too(fault: Fault, outcomes: set[str]) -> None:
    gateway = Middlebox(ok, [fault])
    with LoopbackServer(gateway) as upstream, LoopbackServer(None, upstream=upstream.base_url) as proxy:
        with pytest.raises(DROPPED_CONNECTION):
            httpx.post(proxy.base_url + "/v1/messages", content=b"x" * 64 * KB, trust_env=False)
        assert httpx.get(proxy.base_url + "/after", trust_env=False).status_code == 200
    assert proxy.records[0].outcome in outcomes
    assert proxy.records[0].status is None


@pytest.mark.parametrize("page", ["haproxy", "squid", "caddy", "nginx"])
def test_an_upstream_answering_before_the_body_is_in_is_relayed_not_turned_into_a_reset(page: str) -> None:
    # The gateway answers a 4 MB body by its Content-Length and closes (HAProxy, Squid, Caddy: at once, so
    # the proxy still sending meets a reset): the client must get the gateway's page, every time.
    gateway = Middlebox(ok, [BodyCap(limit=128 * KB, response=page)])
    with LoopbackServer(gateway) as upstream, LoopbackServer(None, upstream=upstream.base_url) as proxy:
        with httpx.Client(trust_env=False, timeout=30) as client:
            answers = [
                client.post(proxy.base_url + "/v1/messages", content=b"x" * 4_000_000) for _ in range(5)
            ]
            after = client.post(proxy.base_url + "/v1/messages", content=b"x" * KB)
    expected = render_page(BODY_CAP_PAGES[page], {"host": "127.0.0.1", "path": "/v1/messages"})
    assert [a.status_code for a in answers] == [expected.status] * 5
    assert {a.content for a in answers} == {expected.body}
    assert after.status_code == 200  # a new upstream connection for the next request
    assert [r.outcome for r in proxy.records] == ["forwarded"] * 6
    if not BODY_CAP_PAGES[page].lingers:  # nginx drains the body: the proxy may finish sending first
        assert proxy.records[0].detail == "the upstream answered before the whole body was sent"


def test_a_reset_before_any_answer_is_still_a_reset() -> None:
    gateway = Middlebox(ok, [ResetAfter(n_bytes=64 * KB)])
    with LoopbackServer(gateway) as upstream, LoopbackServer(None, upstream=upstream.base_url) as proxy:
        with pytest.raises(DROPPED_CONNECTION):
            httpx.post(proxy.base_url + "/v1/messages", content=b"x" * 4_000_000, trust_env=False)
    assert proxy.records[0].outcome in {"upstream-reset", "upstream-closed"}


class SlowStreamingUpstream:
    """A raw HTTP server that sends a chunked answer in two parts, the second only once released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.released_in_time = False
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            conn.sendall(head + b"%x\r\n%s\r\n" % (len(b"data: first\n\n"), b"data: first\n\n"))
            self.released_in_time = self.release.wait(5.0)
            conn.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(b"data: second\n\n"), b"data: second\n\n"))

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def streaming_upstream() -> Iterator[SlowStreamingUpstream]:
    upstream = SlowStreamingUpstream()
    yield upstream
    upstream.close()


def test_an_upstream_stream_reaches_the_client_as_it_comes(streaming_upstream: SlowStreamingUpstream) -> None:
    received = []
    proxy = LoopbackServer(None, upstream=f"http://127.0.0.1:{streaming_upstream.port}")
    with (
        proxy,
        httpx.Client(trust_env=False, timeout=10) as client,
        client.stream("POST", proxy.base_url + "/v1/chat/completions", content=b"{}") as response,
    ):
        for chunk in response.iter_raw():
            received.append(chunk)
            streaming_upstream.release.set()  # the first event arrived before the upstream sent the second
    assert streaming_upstream.released_in_time
    assert b"".join(received) == b"data: first\n\ndata: second\n\n"
    assert proxy.records[0].outcome == "forwarded" and proxy.records[0].response_bytes == 27


def test_a_cut_stream_fault_in_front_of_an_upstream_url_cuts_its_answer_after_n_bytes() -> None:
    def big(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"e" * 10 * KB, headers={"content-type": "text/event-stream"})

    cut = Middlebox(None, [CutStream(n_bytes=3 * KB)])
    with LoopbackServer(big) as upstream, LoopbackServer(cut, upstream=upstream.base_url) as proxy:
        with httpx.Client(trust_env=False) as client, client.stream("GET", proxy.base_url + "/s") as response:
            received = bytearray()
            with pytest.raises(httpx.RemoteProtocolError):
                for chunk in response.iter_raw():
                    received += chunk
    assert len(received) == 3 * KB
    record = proxy.records[0]
    assert (record.outcome, record.fault, record.fault_name, record.response_bytes) == (
        "cut-stream",
        "cut-stream",
        "cut-stream",
        3 * KB,
    )


def test_latency_delays_the_answer_over_tcp_and_is_named_in_the_record() -> None:
    with LoopbackServer(Middlebox(ok, [Latency(0.3)])) as server:
        started = time.monotonic()
        reply = httpx.get(server.base_url + "/x", trust_env=False)
        waited = time.monotonic() - started
    assert reply.status_code == 200 and waited >= 0.3
    assert (server.records[0].fault, server.records[0].fault_name) == ("latency", "latency")
