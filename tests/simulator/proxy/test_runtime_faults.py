"""Latency, bandwidth, cut-stream, gateway-timeout and status-page faults; named faults changed at runtime."""

from __future__ import annotations

import re

import httpx
import pytest

from simulator.proxy.fault_specs import (
    FAULT_SPEC_EXAMPLES,
    ScenarioError,
    fault_fields,
    fault_spec,
    parse_fault_spec,
)
from simulator.proxy.faults import (
    FAULT_KINDS,
    Bandwidth,
    BodyCap,
    CutStream,
    Forward,
    GatewayTimeout,
    Latency,
    Respond,
    StatusPage,
    WafBlock,
)
from simulator.proxy.middlebox import Middlebox
from simulator.proxy.pages import TIMEOUT_PAGES

KB = 1024
URL = "http://gateway.local/v1/messages"
ANSWER = b"0123456789" * 100  # a 1,000-byte answer


def upstream(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=ANSWER, headers={"content-type": "text/event-stream"})


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def client(box: Middlebox) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(box))


def test_latency_delays_the_answer_and_still_forwards() -> None:
    sleeps = Sleeps()
    box = Middlebox(upstream, [Latency(0.25)], sleep=sleeps)
    assert client(box).post(URL, content=b"x").content == ANSWER
    assert sleeps.calls == [0.25] and box.forwarded == 1


def test_latency_jitter_is_drawn_from_the_seed_within_its_bounds() -> None:
    def delays(seed: int) -> list[float]:
        box = Middlebox(upstream, [Latency(1.0, jitter_s=0.5)], seed=seed)
        return [box.decide(httpx.Request("POST", URL, content=b"x")).latency_s for _ in range(20)]

    assert delays(3) == delays(3) != delays(4)
    assert all(0.5 <= d <= 1.5 for d in delays(3)) and len(set(delays(3))) > 1


def test_bandwidth_sleeps_the_body_at_its_rate() -> None:
    sleeps = Sleeps()
    box = Middlebox(upstream, [Bandwidth(rate=500)], sleep=sleeps)
    assert client(box).post(URL, content=b"x").content == ANSWER
    assert sleeps.calls == [pytest.approx(2.0)]  # 1,000 bytes at 500 B/s


def test_cut_stream_ends_the_answer_after_n_bytes_as_a_closed_connection() -> None:
    box = Middlebox(upstream, [CutStream(n_bytes=300)])
    with client(box) as http, http.stream("POST", URL, content=b"x") as response:
        received = bytearray()
        with pytest.raises(httpx.RemoteProtocolError, match="received 300 bytes, expected 1000"):
            for chunk in response.iter_bytes():
                received += chunk
    assert bytes(received) == ANSWER[:300]
    assert response.status_code == 200


def test_a_cut_beyond_the_answer_changes_nothing() -> None:
    box = Middlebox(upstream, [CutStream(n_bytes=5000)])
    assert client(box).post(URL, content=b"x").content == ANSWER


def test_every_shaping_fault_that_fires_applies_and_a_later_page_is_delayed_too() -> None:
    sleeps = Sleeps()
    faults = [
        Latency(0.5, min_bytes=10 * KB, probability=1.0),
        Bandwidth(rate=1000),
        CutStream(n_bytes=700),
        BodyCap(limit=50 * KB),
    ]
    box = Middlebox(upstream, faults, sleep=sleeps)
    decision = box.decide(httpx.Request("POST", URL, content=b"x" * 20 * KB))
    assert decision == Forward(
        latency_s=0.5, rate_bps=1000, cut_after=700, applied=("latency", "bandwidth", "cut-stream")
    )
    rejected = box.decide(httpx.Request("POST", URL, content=b"x" * 60 * KB))
    assert isinstance(rejected, Respond) and rejected.status == 413
    assert rejected.delay_s == 0.5 and rejected.applied == ("body-cap", "latency", "bandwidth", "cut-stream")
    small = box.decide(httpx.Request("POST", URL, content=b"x"))
    assert small.latency_s == 0.0 and small.applied == ("bandwidth", "cut-stream")  # type: ignore[union-attr]


def test_head_decisions_carry_the_latency_of_shaping_faults_before_them() -> None:
    box = Middlebox(upstream, [Latency(2.0), BodyCap(limit=KB)])
    early = box.decide_headers("POST", "/v1/messages", [("host", "gateway.local")], 2 * KB)
    assert isinstance(early, Respond) and (early.status, early.delay_s) == (413, 2.0)
    assert box.decide_headers("POST", "/v1/messages", [("host", "gateway.local")], 10) is None


@pytest.mark.parametrize("page", list(TIMEOUT_PAGES))
def test_gateway_timeout_waits_then_answers_its_page_without_forwarding(page: str) -> None:
    sleeps, calls = Sleeps(), []

    def counted(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return upstream(request)

    box = Middlebox(counted, [GatewayTimeout(delay_s=30, page=page)], sleep=sleeps)
    response = client(box).post(URL, content=b"x")
    assert sleeps.calls == [30]
    assert response.status_code == TIMEOUT_PAGES[page].status
    assert not calls
    expected = {
        "nginx": "504 Gateway Time-out",
        "aws-alb": "504 Gateway Time-out",
        "cloudflare": "524: A timeout occurred",
    }[page]
    assert expected in response.text


def test_status_page_answers_any_status_body_and_content_type() -> None:
    box = Middlebox(
        upstream,
        [
            StatusPage(
                status=502, body='{"error": "bad gateway"}', content_type="application/json", min_bytes=KB
            )
        ],
    )
    assert client(box).post(URL, content=b"x").status_code == 200
    blocked = client(box).post(URL, content=b"x" * KB)
    assert (blocked.status_code, blocked.json()) == (502, {"error": "bad gateway"})
    assert blocked.headers["content-type"] == "application/json"


def test_faults_are_named_and_change_while_serving() -> None:
    box = Middlebox(upstream, [BodyCap(limit=KB), BodyCap(limit=2 * KB)])
    assert [name for name, _ in box.named_faults] == ["body-cap", "body-cap-2"]
    assert box.add_fault(WafBlock(min_bytes=10), name="waf") == "waf"
    with pytest.raises(KeyError, match="a fault named 'waf' exists"):
        box.add_fault(WafBlock(), name="waf")
    box.replace_fault("body-cap", BodyCap(limit=100 * KB))
    assert box.faults[0] == BodyCap(limit=100 * KB) and box.name_of(BodyCap(limit=100 * KB)) == "body-cap"
    assert box.remove_fault("body-cap-2") == BodyCap(limit=2 * KB)
    with pytest.raises(KeyError, match="no fault named 'nope'; faults: body-cap, waf"):
        box.remove_fault("nope")
    answer = client(box).post(URL, content=b"x" * 20)
    assert answer.status_code == 403 and box.rejections[-1].name == "waf"
    box.clear_faults()
    assert box.faults == () and client(box).post(URL, content=b"x" * 20).status_code == 200


def test_keep_rejections_bounds_the_log_and_the_counter_counts_them_all() -> None:
    box = Middlebox(upstream, [BodyCap(limit=1)], keep_rejections=2)
    for _ in range(5):
        client(box).post(URL, content=b"xx")
    assert len(box.rejections) == 2 and box.rejected == {"body-cap": 5}


@pytest.mark.parametrize("kind", sorted(FAULT_KINDS))
def test_every_kind_has_an_example_spec_that_round_trips_through_fault_spec(kind: str) -> None:
    example = FAULT_SPEC_EXAMPLES[kind].split(" or ")[0]
    fault = parse_fault_spec(example)
    assert parse_fault_spec(fault_spec(fault)) == fault
    assert fault_fields(fault)["kind"] == fault.kind


def test_a_page_body_with_a_colon_has_no_compact_spec() -> None:
    with pytest.raises(ValueError, match="use JSON fields"):
        fault_spec(StatusPage(status=500, body="error: boom"))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("latency:inf", "delay_s must be a finite number, got inf"),
        ("latency:nan", "delay_s must be a finite number, got nan"),
        ("latency:1:jitter_s=2", "jitter_s must be within [0, delay_s (1.0)], got 2.0"),
        ("bandwidth:0B", "rate must be > 0, got 0"),
        ("cut-stream:-1", "n_bytes must be a size in bytes"),
        ("timeout:5:iis", "page must be one of aws-alb, cloudflare, nginx, got 'iis'"),
        ("status-page:99", "status must be an HTTP status within 100..599, got 99"),
    ],
)
def test_new_fault_specs_are_validated(spec: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=re.escape(message)):
        parse_fault_spec(spec)
