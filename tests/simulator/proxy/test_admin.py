"""The admin API (toxiproxy-style) over HTTP: faults added, replaced and removed on a running proxy."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpx
import pytest

from simulator.providers.mock import MockProvider
from simulator.proxy.admin import AdminApi
from simulator.proxy.faults import BodyCap
from simulator.proxy.loopback import LoopbackServer
from simulator.proxy.middlebox import Middlebox

KB = 1024
BODY = {"model": "claude-sonnet-4", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def proxy() -> Iterator[LoopbackServer]:
    box = Middlebox(MockProvider("anthropic", context_window=1_000_000), [BodyCap(limit=10 * 1024 * KB)])
    with LoopbackServer(box, admin_port=0) as server:
        yield server


@pytest.fixture
def admin(proxy: LoopbackServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=proxy.admin_url, trust_env=False) as client:
        yield client


def send(proxy: LoopbackServer, padding: int = 0) -> httpx.Response:
    body = {**BODY, "messages": [{"role": "user", "content": "hi" + "x" * padding}]}
    return httpx.post(proxy.base_url + "/v1/messages", json=body, trust_env=False)


def test_faults_are_listed_added_replaced_and_removed_while_the_proxy_serves(
    proxy: LoopbackServer, admin: httpx.Client
) -> None:
    assert admin.get("/faults").json() == {
        "faults": [
            {
                "name": "body-cap",
                "kind": "body-cap",
                "toxicity": 1.0,
                "spec": "body-cap:10485760B",
                "fields": {"kind": "body-cap", "limit": 10485760},
            }
        ]
    }
    assert send(proxy, 200 * KB).status_code == 200
    added = admin.post("/faults", json={"name": "waf", "spec": "body-cap:128KB:waf-403-html"})
    assert added.status_code == 201
    assert added.json() == {
        "name": "waf",
        "kind": "waf-403-html",
        "toxicity": 1.0,
        "spec": "waf-403-html:min_bytes=131073B",
        "fields": {"kind": "waf-403-html", "min_bytes": 131073},
    }
    blocked = send(proxy, 200 * KB)
    assert blocked.status_code == 403 and "Cloudflare" in blocked.text
    assert send(proxy).status_code == 200
    assert proxy.records[-2].fault_name == "waf"
    replaced = admin.post("/faults/waf", json={"kind": "waf-403-html", "min_bytes": "1MB", "page": "akamai"})
    assert replaced.status_code == 200 and replaced.json()["fields"]["page"] == "akamai"
    assert send(proxy, 200 * KB).status_code == 200
    assert admin.delete("/faults/waf").status_code == 204
    assert [f["name"] for f in admin.get("/faults").json()["faults"]] == ["body-cap"]
    assert admin.post("/reset").status_code == 204
    assert admin.get("/faults").json() == {"faults": []}


def test_toxicity_sets_the_probability_a_fault_fires(proxy: LoopbackServer, admin: httpx.Client) -> None:
    admin.post("/reset")
    never = admin.post("/faults", json={"name": "cap", "spec": "body-cap:1KB:nginx", "toxicity": 0})
    assert never.json()["toxicity"] == 0.0
    assert send(proxy, 4 * KB).status_code == 200
    admin.post("/faults/cap", json={"spec": "body-cap:1KB:nginx", "toxicity": 1})
    assert send(proxy, 4 * KB).status_code == 413


def test_latency_given_as_json_fields_is_applied(proxy: LoopbackServer, admin: httpx.Client) -> None:
    answer = admin.post("/faults", json={"name": "slow", "kind": "latency", "delay_s": 0.05})
    assert answer.status_code == 201 and answer.json()["spec"] == "latency:0.05"
    assert send(proxy).status_code == 200
    assert proxy.records[-1].fault_name == "slow"


def test_stats_count_requests_and_outcomes(proxy: LoopbackServer, admin: httpx.Client) -> None:
    send(proxy)
    send(proxy, 11 * 1024 * KB)
    stats = admin.get("/stats").json()
    assert stats["requests"] == 2 and stats["outcomes"] == {"answered": 1, "responded": 1}
    assert stats["rejected_by_fault"] == {"body-cap": 1}


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "error"),
    [
        ("POST", "/faults", b"{not json", 400, "the body is not JSON (JSONDecodeError: "),
        ("POST", "/faults", b"[1, 2]", 400, "the body must be a JSON object, e.g. "),
        ("POST", "/faults", b'{"name": "x"}', 400, "give the fault as spec or as kind and fields"),
        (
            "POST",
            "/faults",
            b'{"spec": "teapot:418"}',
            400,
            "fault spec 'teapot:418': unknown fault kind 'teapot'",
        ),
        (
            "POST",
            "/faults",
            b'{"spec": 5}',
            400,
            "spec must be a string such as 'body-cap:128KB:nginx', got 5",
        ),
        (
            "POST",
            "/faults",
            b'{"spec": "latency:1", "delay_s": 2}',
            400,
            "give either spec or kind and fields",
        ),
        (
            "POST",
            "/faults",
            b'{"kind": "latency"}',
            400,
            "fault (latency): delay_s is missing, e.g. latency:0.5",
        ),
        (
            "POST",
            "/faults",
            b'{"spec": "latency:1", "toxicity": 2}',
            400,
            "toxicity (the probability the fault fires) must be within [0, 1], got 2",
        ),
        ("POST", "/faults", b'{"name": "a b", "spec": "latency:1"}', 400, "name must be 1-64 letters"),
        (
            "POST",
            "/faults",
            b'{"name": "body-cap", "spec": "latency:1"}',
            409,
            "a fault named 'body-cap' exists; remove it first or replace it (POST /faults/body-cap "
            "replaces it)",
        ),
        ("DELETE", "/faults/nope", b"", 404, "no fault named 'nope'; faults: body-cap"),
        ("GET", "/faults/nope", b"", 404, "no fault named 'nope'; faults: body-cap"),
        ("POST", "/faults/nope", b'{"spec": "latency:1"}', 404, "no fault named 'nope'"),
        (
            "POST",
            "/faults/body-cap",
            b'{"name": "other", "spec": "latency:1"}',
            400,
            "the body names 'other' but the path names 'body-cap'",
        ),
        ("GET", "/toxics", b"", 404, "no endpoint GET /toxics; endpoints: GET /faults, POST /faults"),
        ("PUT", "/faults", b"{}", 405, "/faults takes GET, POST, not PUT"),
    ],
)
def test_bad_admin_requests_get_a_4xx_json_error(
    admin: httpx.Client, method: str, path: str, body: bytes, status: int, error: str
) -> None:
    answer = admin.request(method, path, content=body)
    assert answer.status_code == status
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()["error"].startswith(error)
    if status == 405:
        assert answer.headers["allow"] == "GET, POST"


def test_malformed_http_and_oversized_bodies_get_json_errors(proxy: LoopbackServer) -> None:
    port = int(proxy.admin_url.rsplit(":", 1)[1])
    for request, status in (
        (b"GARBAGE\r\n\r\n", b"400"),
        (b"POST /faults HTTP/1.1\r\nhost: x\r\ncontent-length: 70000\r\n\r\n" + b"x" * 70000, b"413"),
    ):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(request)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 " + status)
        assert "error" in json.loads(answer.partition(b"\r\n\r\n")[2])


def test_the_admin_api_needs_a_middlebox_and_a_port_in_range() -> None:
    with pytest.raises(ValueError, match="admin_port needs a Middlebox app"):
        LoopbackServer(lambda request: httpx.Response(200), admin_port=0)
    with pytest.raises(ValueError, match="admin_port must be within 0..65535"):
        LoopbackServer(Middlebox(lambda request: httpx.Response(200)), admin_port=70000)


def test_the_api_answers_without_a_transport() -> None:
    api = AdminApi(Middlebox(None))
    assert api.handle("GET", "/", b"").document == {
        "endpoints": [
            "GET /faults",
            "POST /faults",
            "GET /faults/{name}",
            "POST /faults/{name}",
            "DELETE /faults/{name}",
            "POST /reset",
            "GET /stats",
        ]
    }
    created = api.handle("POST", "/faults", b'{"spec": "cut-stream:2KB"}')
    assert (created.status, created.document["name"]) == (201, "cut-stream")
