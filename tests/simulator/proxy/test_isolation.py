"""Forwarding shares nothing between clients, and no secret reaches a record, a log line or a trace."""

from __future__ import annotations

import json

import httpx
import pytest

from simulator.proxy.journal import ExchangeRecord, ExchangeTrace, log_entry, record_entry
from simulator.proxy.loopback import LoopbackServer
from simulator.proxy.middlebox import Middlebox
from simulator.proxy.redact import (
    REDACTED,
    is_credential,
    redact_headers,
    redact_target,
    redact_text,
    redact_url,
)

SECRET = "AIzaSyTOP-SECRET-KEY"
CREDENTIALS = {
    "authorization": "Bearer sk-live-123",
    "x-api-key": "sk-ant-456",
    "api-key": "azure-789",
    "x-goog-api-key": SECRET,
    "cookie": "session=abc",
    "proxy-authorization": "Basic dXNlcjpw",
}


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def cookie_upstream(request: httpx.Request) -> httpx.Response:
    """Sets a cookie named after the client on /login; echoes the Cookie header it got elsewhere."""
    client = request.headers.get("x-client", "?")
    if request.url.path == "/login":
        cookie = f"session={client}-secret; Path=/"
        return httpx.Response(200, json={"ok": True}, headers={"set-cookie": cookie})
    return httpx.Response(
        200,
        json={"cookie": request.headers.get("cookie"), "authorization": request.headers.get("authorization")},
    )


def test_a_cookie_the_upstream_sets_for_one_client_never_reaches_another() -> None:
    with LoopbackServer(cookie_upstream) as up, LoopbackServer(None, upstream=up.base_url) as proxy:
        whoami = proxy.base_url + "/whoami"
        with httpx.Client(trust_env=False) as a, httpx.Client(trust_env=False) as b:
            login = a.get(proxy.base_url + "/login", headers={"x-client": "A", "authorization": "Bearer A"})
            seen_by_a = a.get(whoami, headers={"x-client": "A"}).json()
            seen_by_b = b.get(whoami, headers={"x-client": "B"}).json()
            anonymous = httpx.get(whoami, trust_env=False).json()
    assert login.headers["set-cookie"] == "session=A-secret; Path=/"  # relayed to its own client
    assert seen_by_a == {"cookie": "session=A-secret", "authorization": None}  # A's own jar, no stale auth
    assert seen_by_b == {"cookie": None, "authorization": None}
    assert anonymous == {"cookie": None, "authorization": None}


def test_a_query_key_and_credential_headers_never_reach_records_or_traces() -> None:
    traces: list[tuple[ExchangeRecord, ExchangeTrace]] = []
    box = Middlebox(lambda request: httpx.Response(200, json={"ok": True}), [])
    with LoopbackServer(box, on_exchange=lambda r, t: traces.append((r, t)), record_bodies=False) as server:
        with httpx.Client(trust_env=False) as client:
            path = f"/v1beta/models/gemini-2.5-pro:generateContent?key={SECRET}&alt=sse"
            client.post(server.base_url + path, content=b"{}", headers=CREDENTIALS)
    ((record, trace),) = traces
    assert record.path == f"/v1beta/models/gemini-2.5-pro:generateContent?key={REDACTED}&alt={REDACTED}"
    written = json.dumps(log_entry(record)) + json.dumps(record_entry(record, trace)) + repr(server.records)
    for secret in (SECRET, *CREDENTIALS.values()):
        assert secret not in written
    headers = dict(trace.request_headers)
    assert all(headers[name] == REDACTED for name in CREDENTIALS)


def test_upstream_error_details_do_not_leak_the_upstream_query() -> None:
    with LoopbackServer(lambda request: httpx.Response(200)) as dead:
        dead_url = dead.base_url
    with LoopbackServer(None, upstream=f"{dead_url}/v1?key={SECRET}") as proxy:
        reply = httpx.get(proxy.base_url + "/x", trust_env=False)
    assert reply.status_code == 502
    assert SECRET not in reply.text and SECRET not in repr(proxy.records)
    assert f"key={REDACTED}" in proxy.records[0].detail


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("Authorization", True),
        ("x-api-key", True),
        ("X-Goog-Api-Key", True),
        ("api-key", True),
        ("Cookie", True),
        ("set-cookie", True),
        ("proxy-authorization", True),
        ("x-amz-security-token", True),
        ("x-vendor-api-key", True),
        ("x-auth-token", True),
        ("x-session-id", True),
        ("content-type", False),
        ("x-ratelimit-remaining-tokens", False),
        ("retry-after", False),
        ("x-ctxsim-turn", False),
        ("cf-ray", False),
        ("anthropic-ratelimit-input-tokens-remaining", False),
    ],
)
def test_credential_headers_are_recognised_by_name_and_pattern(name: str, secret: bool) -> None:
    assert is_credential(name) is secret


def test_redaction_of_targets_urls_and_free_text() -> None:
    assert redact_target("/v1/messages") == "/v1/messages"
    assert redact_target("/x?key=1&flag&b=2#frag") == f"/x?key={REDACTED}&flag&b={REDACTED}#frag"
    assert redact_url("https://user:pw@host/p?key=s") == f"https://{REDACTED}@host/p?key={REDACTED}"
    text = redact_text(f"ConnectError from https://h/v1?key={SECRET}: Bearer sk-live-123 refused")
    assert SECRET not in text and "sk-live-123" not in text
    pairs = [("x-api-key", "k"), ("accept", "*/*")]
    assert redact_headers(pairs) == [("x-api-key", REDACTED), ("accept", "*/*")]
