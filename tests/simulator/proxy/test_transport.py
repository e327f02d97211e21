"""In-process mounts and the loopback TCP server (asyncio + h11) hosting handlers and middleboxes."""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from simulator.providers.mock import MockProvider
from simulator.proxy.faults import (
    BodyCap,
    CloseAfterBody,
    IdleTimeout,
    ResetAfter,
    Respond,
    SlowClose,
    WafBlock,
)
from simulator.proxy.inprocess import InProcessClient, mount_inprocess, respx_router
from simulator.proxy.loopback import OUTCOMES, TURN_HEADER, LoopbackServer
from simulator.proxy.middlebox import Middlebox

# The same dropped connection surfaces as any of these depending on size and timing (DESIGN.md).
DROPPED_CONNECTION = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.ConnectError)
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
)
KB = 1024


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def client() -> httpx.Client:
    with httpx.Client(trust_env=False, timeout=5.0) as client:
        yield client


def echo(request: httpx.Request) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "method": request.method,
            "path": request.url.raw_path.decode(),
            "body_bytes": len(request.content),
            "turn_header": request.headers.get(TURN_HEADER),
        },
    )


def ok_upstream(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"ok": True})


def port_is_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def raw_exchange(server: LoopbackServer, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=3.0) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


# -- in-process ------------------------------------------------------------------------


def test_mount_inprocess_serves_the_handler_under_its_base_url() -> None:
    with httpx.Client(transport=mount_inprocess(echo, base_url="http://mock.local/api")) as client:
        answer = client.post("http://mock.local/api/v1/chat/completions", content=b"abc").json()
        assert answer == {
            "method": "POST",
            "path": "/api/v1/chat/completions",
            "body_bytes": 3,
            "turn_header": None,
        }
        with pytest.raises(httpx.ConnectError, match="nothing is mounted at http://other.local/api/x"):
            client.get("http://other.local/api/x")
        with pytest.raises(httpx.ConnectError, match="this mock serves http://mock.local/api"):
            client.get("http://mock.local/apix")


def test_mount_inprocess_passes_a_middlebox_reset_through_as_read_error() -> None:
    box = Middlebox(ok_upstream, [ResetAfter(64 * KB)])
    with httpx.Client(transport=mount_inprocess(box)) as client:
        assert client.post("http://mock.local/v1/messages", content=b"x" * KB).status_code == 200
        with pytest.raises(httpx.ReadError):
            client.post("http://mock.local/v1/messages", content=b"x" * 200 * KB)
    assert [rejection.kind for rejection in box.rejections] == ["reset-after"]


def test_mount_inprocess_rejects_a_handler_that_returns_no_response() -> None:
    with httpx.Client(transport=mount_inprocess(lambda request: {"ok": True})) as client:  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="returned dict; it must return httpx.Response"):
            client.get("http://mock.local/")


def _seen_by_the_handler(client_class: type[httpx.Client], **options: object) -> list[tuple[object, ...]]:
    """What a handler sees of three requests through ``client_class``: method, URL, raw headers, body;
    the first answer sets a cookie, request hooks add a header."""
    seen: list[tuple[object, ...]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, str(request.url), request.headers.raw, request.content))
        return httpx.Response(200, headers={"set-cookie": "session=abc; Path=/"}, json={"n": len(seen)})

    def stamp(request: httpx.Request) -> None:
        request.headers[TURN_HEADER] = str(len(seen) + 1)

    answers: list[httpx.Response] = []
    hooks = {"request": [stamp], "response": [answers.append]}
    if client_class is InProcessClient:
        client: httpx.Client = InProcessClient(handler, event_hooks=hooks, **options)  # type: ignore[arg-type]
    else:
        client = httpx.Client(transport=mount_inprocess(handler), event_hooks=hooks, **options)  # type: ignore[arg-type]
    with client:
        client.post("http://mock.local/v1/chat/completions", content=b'{"a": 1}', headers={"x-key": "k"})
        with client.stream("POST", "http://mock.local/v1/messages", content=[b"chunk ", b"two"]) as streamed:
            assert streamed.read() == b'{"n":2}'
        assert client.get("http://mock.local/v1/models").json() == {"n": 3}
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    return seen


def test_in_process_client_hands_the_handler_what_the_httpx_stack_does() -> None:
    """Same method, URL, headers (defaults, hooks, cookies, Content-Length) and body as the client stack
    in front of mount_inprocess."""
    direct = _seen_by_the_handler(InProcessClient, trust_env=False)
    assert direct == _seen_by_the_handler(httpx.Client, trust_env=False)
    second, third = ({name.lower(): value for name, value in seen[2]} for seen in direct[1:])  # type: ignore[attr-defined]
    assert second[b"cookie"] == b"session=abc" and third[TURN_HEADER.encode()] == b"3"


def test_in_process_client_raises_what_the_handler_and_its_mount_raise() -> None:
    box = Middlebox(ok_upstream, [ResetAfter(64 * KB)])
    with InProcessClient(box) as client:
        assert client.post("http://mock.local/v1/messages", content=b"x" * KB).status_code == 200
        with pytest.raises(httpx.ReadError):
            client.post("http://mock.local/v1/messages", content=b"x" * 200 * KB)
        with pytest.raises(httpx.ConnectError, match="this mock serves http://mock.local"):
            client.get("http://other.local/v1/models")
    with pytest.raises(RuntimeError, match="client has been closed"):
        client.get("http://mock.local/v1/models")
    with InProcessClient(lambda request: "no response") as client:  # type: ignore[arg-type, return-value]
        with pytest.raises(TypeError, match="it must return httpx.Response"):
            client.get("http://mock.local/v1/models")


def test_respx_router_calls_the_handler_on_every_request_without_exhausting() -> None:
    provider = MockProvider("anthropic", context_window=10_000)
    body = {"model": "claude-sonnet-4", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    with respx_router(provider, "http://mock.local") as router, httpx.Client() as client:
        replies = [client.post("http://mock.local/v1/messages", json=body) for _ in range(5)]
        assert router.calls.call_count == 5  # respx clears its call log on exit
    assert [reply.status_code for reply in replies] == [200] * 5
    assert provider.call_count == 5


def test_respx_router_also_works_as_a_mock_transport() -> None:
    router = respx_router(echo, "http://mock.local")
    with httpx.Client(transport=httpx.MockTransport(router.handler)) as client:
        assert client.get("http://mock.local/health").json()["path"] == "/health"
    assert router.calls.last.request.url == "http://mock.local/health"


# -- loopback: answering ---------------------------------------------------------------


def test_handler_served_over_loopback_answers_httpx_with_keep_alive(client: httpx.Client) -> None:
    with LoopbackServer(echo) as server:
        assert server.base_url == f"http://127.0.0.1:{server.port}"
        first = client.post(server.base_url + "/v1/chat/completions?x=1", content=b"y" * 3000)
        second = client.get(server.base_url + "/models")
    assert first.json() == {
        "method": "POST",
        "path": "/v1/chat/completions?x=1",
        "body_bytes": 3000,
        "turn_header": None,
    }
    assert second.json()["path"] == "/models"
    assert "connection" not in first.headers  # a normal answer keeps the connection
    assert [(r.turn, r.method, r.outcome, r.status, r.body_bytes) for r in server.records] == [
        (1, "POST", "answered", 200, 3000),
        (2, "GET", "answered", 200, 0),
    ]
    assert all(record.outcome in OUTCOMES for record in server.records)


def test_turn_comes_from_the_turn_header_when_present(client: httpx.Client) -> None:
    turns: list[int | None] = []

    class RecordingBox:
        upstream = staticmethod(echo)

        def decide(self, request: httpx.Request, turn: int | None = None) -> object:
            turns.append(turn)
            from simulator.proxy.faults import Forward

            return Forward()

    with LoopbackServer(RecordingBox()) as server:
        client.get(server.base_url + "/a")
        relayed = client.get(server.base_url + "/b", headers={TURN_HEADER: "7"})
        bad = client.get(server.base_url + "/c", headers={TURN_HEADER: "seven"})
    assert turns == [1, 7]
    assert relayed.json()["turn_header"] == "7"
    assert bad.status_code == 400
    assert bad.text == "x-ctxsim-turn must be a positive integer, got 'seven'\n"
    assert server.records[-1].outcome == "bad-request"


def test_concurrent_clients_are_all_answered() -> None:
    with (
        LoopbackServer(echo) as server,
        httpx.Client(trust_env=False, timeout=10.0, limits=httpx.Limits(max_connections=32)) as client,
    ):
        with ThreadPoolExecutor(32) as pool:
            replies = list(
                pool.map(lambda i: client.post(f"{server.base_url}/r/{i}", content=b"z" * i), range(32))
            )
    assert [reply.json()["path"] for reply in replies] == [f"/r/{i}" for i in range(32)]
    assert [reply.json()["body_bytes"] for reply in replies] == list(range(32))
    assert sorted(record.turn for record in server.records) == list(range(1, 33))


def test_openai_sdk_talks_to_a_mock_provider_over_loopback() -> None:
    openai = pytest.importorskip("openai")
    provider = MockProvider("openai-chat", context_window=100_000, script=["Hello over TCP"])
    with LoopbackServer(provider) as server:
        sdk = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)
        try:
            completion = sdk.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
            )
        finally:
            sdk.close()
    assert completion.choices[0].message.content == "Hello over TCP"
    assert completion.choices[0].finish_reason == "stop"
    assert provider.last_call.outcome == "ok"


def test_openai_sdk_sees_the_waf_page_behind_a_middlebox() -> None:
    openai = pytest.importorskip("openai")
    provider = MockProvider("openai-chat", context_window=1_000_000)
    box = Middlebox(provider, [WafBlock(min_bytes=100 * KB, page="cloudflare")], seed=3)
    with LoopbackServer(box) as server:
        sdk = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)
        try:
            with pytest.raises(openai.PermissionDeniedError) as caught:
                sdk.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": "q" * 120 * KB}]
                )
        finally:
            sdk.close()
    assert caught.value.status_code == 403
    assert "Attention Required! | Cloudflare" in caught.value.response.text
    assert provider.call_count == 0


# -- loopback: faults --------------------------------------------------------------------


def test_reset_after_n_body_bytes_surfaces_as_a_dropped_connection(client: httpx.Client) -> None:
    box = Middlebox(ok_upstream, [ResetAfter(64 * KB)])
    with LoopbackServer(box) as server:
        assert client.post(server.base_url + "/v1/messages", content=b"x" * 10 * KB).status_code == 200
        with pytest.raises(DROPPED_CONNECTION):
            client.post(server.base_url + "/v1/messages", content=b"x" * 200 * KB)
        assert client.get(server.base_url + "/after").status_code == 200  # the server survives
    assert [(r.turn, r.outcome, r.status, r.body_bytes, r.content_length) for r in server.records] == [
        (1, "answered", 200, 10 * KB, 10 * KB),
        (2, "reset-after", None, 64 * KB, 200 * KB),
        (3, "answered", 200, 0, 0),
    ]
    assert [(rejection.kind, rejection.request_bytes) for rejection in box.rejections] == [
        ("reset-after", 200 * KB)
    ]


def test_reset_after_n_bytes_resets_mid_post_while_the_client_is_still_sending() -> None:
    declared, sent_first = 1024 * KB, 128 * KB
    head = f"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: {declared}\r\n\r\n".encode()
    with LoopbackServer(Middlebox(ok_upstream, [ResetAfter(64 * KB)])) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=3.0) as sock:
            sock.sendall(head + b"x" * sent_first)  # an eighth of the body; the rest is never sent
            with pytest.raises(ConnectionResetError):
                sock.recv(65536)  # the RST arrives while the body is still incomplete
            with pytest.raises(OSError):  # EPIPE or ECONNRESET: the connection is gone
                sock.sendall(b"x" * (declared - sent_first))
    (record,) = server.records
    assert (record.outcome, record.status, record.body_bytes, record.content_length) == (
        "reset-after",
        None,
        64 * KB,
        declared,
    )
    assert record.detail == f"dropped after {64 * KB} body bytes"


def test_a_mid_post_reset_reaches_httpx_as_a_dropped_connection(client: httpx.Client) -> None:
    body = b"x" * 4 * 1024 * KB  # larger than the loopback socket buffers: httpx is mid-write
    with LoopbackServer(Middlebox(ok_upstream, [ResetAfter(64 * KB)])) as server:
        with pytest.raises(DROPPED_CONNECTION):
            client.post(server.base_url + "/v1/messages", content=body)
    (record,) = server.records
    assert record.outcome == "reset-after"
    assert record.body_bytes == 64 * KB < record.content_length == len(body)


def test_a_body_cap_answers_from_the_content_length_before_any_body_arrives() -> None:
    head = f"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: {512 * KB}\r\n\r\n".encode()
    with LoopbackServer(Middlebox(ok_upstream, [BodyCap(limit=32 * KB)])) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=3.0) as sock:
            sock.sendall(head)  # no body byte sent: the answer still comes
            answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"connection: close" in answer.lower()
    (record,) = server.records
    assert (record.outcome, record.status, record.body_bytes, record.content_length) == (
        "responded",
        413,
        0,
        512 * KB,
    )


def test_faults_that_need_the_body_keep_reading_it_whole(client: httpx.Client) -> None:
    box = Middlebox(ok_upstream, [CloseAfterBody(from_turn=2, until_turn=2), ResetAfter(8 * KB)])
    with LoopbackServer(box) as server:
        for _ in range(2):
            with pytest.raises(DROPPED_CONNECTION):
                client.post(server.base_url + "/v1/messages", content=b"x" * 256 * KB)
        with pytest.raises(DROPPED_CONNECTION):  # chunked: no declared size, decided on the full body
            client.post(server.base_url + "/v1/messages", content=iter([b"x" * 100 * KB] * 2))
    assert [(r.outcome, r.body_bytes, r.content_length) for r in server.records] == [
        ("reset-after", 8 * KB, 256 * KB),
        ("close-after-body", 256 * KB, 256 * KB),
        ("reset-after", 200 * KB, None),
    ]


def test_close_after_body_surfaces_as_remote_protocol_error_family(client: httpx.Client) -> None:
    with LoopbackServer(Middlebox(ok_upstream, [CloseAfterBody()])) as server:
        with pytest.raises(DROPPED_CONNECTION):
            client.post(server.base_url + "/v1/messages", content=b"x" * 5 * KB)
    assert [record.outcome for record in server.records] == ["close-after-body"]


def test_slow_close_closes_after_its_delay(client: httpx.Client) -> None:
    with LoopbackServer(Middlebox(ok_upstream, [SlowClose(delay_s=0.3)])) as server:
        started = time.monotonic()
        with pytest.raises(DROPPED_CONNECTION):
            client.post(server.base_url + "/v1/messages", content=b"x")
        assert time.monotonic() - started >= 0.25
    assert server.records[0].outcome == "slow-close"


def test_idle_timeout_runs_until_the_client_gives_up() -> None:
    with (
        LoopbackServer(Middlebox(ok_upstream, [IdleTimeout(delay_s=60)])) as server,
        httpx.Client(trust_env=False, timeout=0.3) as client,
    ):
        with pytest.raises(httpx.ReadTimeout):
            client.post(server.base_url + "/v1/messages", content=b"x")
    assert server.records[0].outcome == "idle-timeout"


def test_idle_timeout_is_bounded_by_the_server_max_fault_delay(client: httpx.Client) -> None:
    box = Middlebox(ok_upstream, [IdleTimeout(delay_s=60)])
    with LoopbackServer(box, max_fault_delay_s=0.2) as server:
        started = time.monotonic()
        with pytest.raises(DROPPED_CONNECTION):
            client.post(server.base_url + "/v1/messages", content=b"x")
    assert time.monotonic() - started < 3.0


def test_waf_page_is_relayed_with_its_headers_and_connection_close(client: httpx.Client) -> None:
    box = Middlebox(ok_upstream, [WafBlock(min_bytes=129 * KB, page="cloudflare")], seed=7)
    with LoopbackServer(box) as server:
        small = client.post(server.base_url + "/v1/messages", content=b"x" * 101 * KB)
        blocked = client.post(server.base_url + "/v1/messages", content=b"x" * 129 * KB)
    decision = box.rejections[0].decision
    assert isinstance(decision, Respond)
    assert small.status_code == 200
    assert blocked.status_code == 403
    assert blocked.content == decision.body
    assert blocked.headers["content-type"] == "text/html; charset=UTF-8"
    assert blocked.headers["server"] == "cloudflare"
    assert blocked.headers["cf-ray"] == dict(decision.headers)["cf-ray"]
    assert blocked.headers["connection"] == "close"
    assert server.records[-1].outcome == "responded"


def test_middlebox_body_cap_answers_413_by_size(client: httpx.Client) -> None:
    with LoopbackServer(Middlebox(ok_upstream, [BodyCap(limit=32 * KB, response="nginx")])) as server:
        under = client.post(server.base_url + "/v1/messages", content=b"x" * 32 * KB)
        over = client.post(server.base_url + "/v1/messages", content=b"x" * (32 * KB + 1))
    assert (under.status_code, over.status_code) == (200, 413)
    assert "413 Request Entity Too Large" in over.text
    assert over.headers["server"] == "nginx"


def test_server_body_bound_answers_413_without_calling_the_handler(client: httpx.Client) -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200)

    with LoopbackServer(handler, max_body_bytes=1000) as server:
        over = client.post(server.base_url + "/v1/messages", content=b"x" * 300 * KB)
        under = client.post(server.base_url + "/v1/messages", content=b"x" * 1000)
    assert over.status_code == 413
    assert over.headers["connection"] == "close"
    assert "max_body_bytes (1000)" in over.text
    assert under.status_code == 200
    assert len(calls) == 1
    assert [record.outcome for record in server.records] == ["body-too-large", "answered"]


def test_handler_transport_errors_become_real_connection_faults(client: httpx.Client) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/reset":
            raise httpx.ReadError("[Errno 104] Connection reset by peer", request=request)
        if request.url.path == "/close":
            raise httpx.RemoteProtocolError("Server disconnected", request=request)
        raise ValueError("script exhausted")

    with LoopbackServer(handler) as server:
        for path in ("/reset", "/close"):
            with pytest.raises(DROPPED_CONNECTION):
                client.post(server.base_url + path, content=b"x")
        crashed = client.post(server.base_url + "/bug", content=b"x")
    assert crashed.status_code == 500
    assert crashed.text == "handler-error: script exhausted\n"
    outcomes = [record.outcome for record in server.records]
    assert outcomes == ["reset-after", "close-after-body", "handler-error"]


def test_slow_handler_is_bounded_by_the_handler_timeout(client: httpx.Client) -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        time.sleep(0.5)
        return httpx.Response(200)

    with LoopbackServer(slow, handler_timeout_s=0.1) as server:
        reply = client.get(server.base_url + "/slow")
    assert reply.status_code == 504
    assert server.records[0].outcome == "handler-timeout"


def test_at_the_connection_limit_an_idle_keep_alive_connection_makes_room(client: httpx.Client) -> None:
    with LoopbackServer(echo, max_connections=1) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=3.0) as held:
            held.sendall(b"GET /first HTTP/1.1\r\nhost: x\r\n\r\n")
            assert held.recv(65536).startswith(b"HTTP/1.1 200 ")  # answered and kept alive
            served = client.get(server.base_url + "/x")
            assert held.recv(65536) == b""  # the idle connection was closed to make room
        assert served.status_code == 200
        assert server.evicted == 1


def test_connections_over_the_limit_get_503_when_every_slot_is_serving_a_request() -> None:
    entered, release = threading.Event(), threading.Event()

    def blocking(request: httpx.Request) -> httpx.Response:
        entered.set()
        release.wait(5.0)
        return httpx.Response(200, text="done")

    with (
        LoopbackServer(blocking, max_connections=1) as server,
        ThreadPoolExecutor(1) as pool,
        httpx.Client(trust_env=False, timeout=5.0) as client,
    ):
        first = pool.submit(client.get, server.base_url + "/first")
        assert entered.wait(5.0)
        with httpx.Client(trust_env=False, timeout=5.0) as other:
            busy = other.get(server.base_url + "/x")
        release.set()
        assert first.result(timeout=5.0).text == "done"
    assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
    assert busy.text == (
        "server busy: all 1 connections (max_connections) are serving requests; retry shortly\n"
    )


def test_at_the_connection_limit_a_connection_stalled_in_its_head_makes_room(client: httpx.Client) -> None:
    with LoopbackServer(echo, max_connections=2) as server:
        stalled = [socket.create_connection(("127.0.0.1", server.port), timeout=3.0) for _ in range(2)]
        for sock in stalled:
            sock.sendall(b"GET /slow HT")  # never finished
        time.sleep(2.5)  # well past EVICT_STALLED_AFTER_S (1 s): they now count as stalled
        served = client.get(server.base_url + "/x")
        closed = sum(sock.recv(65536) == b"" for sock in stalled[:1])
        for sock in stalled:
            sock.close()
    assert served.status_code == 200
    assert closed == 1 and server.evicted == 1


def test_head_requests_get_headers_without_a_body(client: httpx.Client) -> None:
    with LoopbackServer(lambda request: httpx.Response(200, text="hello body")) as server:
        head = client.head(server.base_url + "/x")
        get = client.get(server.base_url + "/x")
    assert (head.status_code, head.headers["content-length"], head.content) == (200, "10", b"")
    assert get.text == "hello body"


def test_oversized_request_head_gets_431(client: httpx.Client) -> None:
    with LoopbackServer(echo, max_head_bytes=4 * KB) as server:
        reply = client.get(server.base_url + "/x", headers={"x-big": "a" * 8 * KB})
    assert reply.status_code == 431
    assert reply.text == "request head exceeds max_head_bytes (4096); raise max_head_bytes\n"
    assert reply.headers["connection"] == "close"


def test_a_client_leaving_mid_body_is_recorded() -> None:
    with LoopbackServer(echo) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=3.0) as sock:
            sock.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n" + b"x" * 10)
        deadline = time.monotonic() + 3.0
        while not server.records and time.monotonic() < deadline:
            time.sleep(0.01)
    assert [(record.outcome, record.path, record.status) for record in server.records] == [
        ("client-gone", "/v1/messages", None)
    ]


def test_malformed_http_gets_400_and_a_close() -> None:
    with LoopbackServer(echo) as server:
        answer = raw_exchange(server, b"NOT HTTP AT ALL\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"connection: close" in answer.lower()


# -- loopback: forwarding ------------------------------------------------------------------


def test_forwarding_to_an_upstream_loopback_server_behind_a_waf(client: httpx.Client) -> None:
    with (
        LoopbackServer(echo) as upstream,
        LoopbackServer(
            Middlebox(None, [WafBlock(min_bytes=50 * KB)]), upstream=upstream.base_url + "/base"
        ) as proxy,
    ):
        relayed = client.post(
            proxy.base_url + "/v1/messages?beta=1", content=b"x" * 10 * KB, headers={TURN_HEADER: "3"}
        )
        blocked = client.post(proxy.base_url + "/v1/messages", content=b"x" * 60 * KB)
    assert relayed.json() == {
        "method": "POST",
        "path": "/base/v1/messages?beta=1",
        "body_bytes": 10 * KB,
        "turn_header": None,
    }
    assert blocked.status_code == 403
    assert [record.outcome for record in proxy.records] == ["forwarded", "responded"]
    assert len(upstream.records) == 1


def test_plain_forwarding_ignores_proxy_environment(
    monkeypatch: pytest.MonkeyPatch, client: httpx.Client
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # a dead proxy: trust_env=False must skip it
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    with LoopbackServer(echo) as upstream, LoopbackServer(None, upstream=upstream.base_url) as proxy:
        relayed = client.get(proxy.base_url + "/ping")
    assert relayed.json()["path"] == "/ping"


def test_unreachable_upstream_gives_502(client: httpx.Client) -> None:
    with LoopbackServer(echo) as dead:
        dead_url = dead.base_url
    with LoopbackServer(None, upstream=dead_url) as proxy:
        reply = client.get(proxy.base_url + "/x")
    assert reply.status_code == 502
    assert reply.text.startswith("upstream-error: ConnectError from http://127.0.0.1:")


def test_a_gzip_upstream_body_is_relayed_still_encoded(client: httpx.Client) -> None:
    import gzip

    payload = json.dumps({"greeting": "hello"}).encode()

    def gzipped(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            headers={"content-encoding": "gzip", "content-type": "application/json"},
            content=gzip.compress(payload),
        )

    with LoopbackServer(gzipped) as upstream, LoopbackServer(None, upstream=upstream.base_url) as proxy:
        reply = client.get(proxy.base_url + "/g")
    assert reply.json() == {"greeting": "hello"}


# -- lifecycle and validation --------------------------------------------------------------


def test_stop_shuts_down_inside_the_loop_even_with_a_silent_connection_open() -> None:
    server = LoopbackServer(Middlebox(ok_upstream, [IdleTimeout(delay_s=60)])).start()
    port = server.port
    thread = server._thread
    assert thread is not None and port_is_open(port)
    with httpx.Client(trust_env=False, timeout=5.0) as client, ThreadPoolExecutor(1) as pool:
        pending = pool.submit(client.post, server.base_url + "/hang", content=b"x")
        time.sleep(0.1)
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 2.0
        with pytest.raises(DROPPED_CONNECTION):
            pending.result(timeout=5)
    assert not thread.is_alive()
    assert not server.running
    assert not port_is_open(port)
    server.stop()  # idempotent
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.com", "10.0.0.1"])
def test_refuses_to_bind_a_non_loopback_host(host: str) -> None:
    with pytest.raises(ValueError, match="binds loopback addresses only"):
        LoopbackServer(echo, host=host)


def test_localhost_binds_the_ipv4_loopback(client: httpx.Client) -> None:
    with LoopbackServer(echo, host="localhost") as server:
        assert server.base_url.startswith("http://127.0.0.1:")
        assert client.get(server.base_url + "/").status_code == 200


@pytest.mark.parametrize(
    ("app", "kwargs", "message"),
    [
        (None, {}, "needs an app"),
        (Middlebox(None, []), {}, "middlebox has no upstream"),
        (echo, {"upstream": "http://127.0.0.1:1"}, "either a handler or upstream="),
        (None, {"upstream": "ftp://example.com"}, "http:// or https:// URL"),
        (echo, {"max_body_bytes": 0}, "max_body_bytes must be > 0"),
        (echo, {"port": 70000}, "port must be within 0..65535"),
    ],
)
def test_invalid_configuration_is_rejected_up_front(
    app: object, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        LoopbackServer(app, **kwargs)  # type: ignore[arg-type]


def test_start_reports_a_port_already_in_use() -> None:
    with LoopbackServer(echo) as first:
        second = LoopbackServer(echo, port=first.port)
        with pytest.raises(RuntimeError, match=f"could not start on 127.0.0.1:{first.port}"):
            second.start()
        assert not second.running
