"""Probing a gateway's body cap by bisection: the bound on requests, and a known cap found within 2 %."""

from __future__ import annotations

import json

import httpx
import pytest

from simulator.providers.mock import FORMATS, MockProvider
from simulator.proxy.faults import BodyCap, Fault, ResetAfter, WafBlock
from simulator.proxy.loopback import LoopbackServer
from simulator.proxy.middlebox import Middlebox
from simulator.proxy.probe import (
    HttpProbe,
    ProbeError,
    ProbeStep,
    max_requests,
    probe_body_cap,
    synthetic_body,
)

KB = 1024
PATHS = {
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/ctxsim-probe:generateContent",
    "bedrock-converse": "/model/ctxsim-probe/converse",
}


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("cap", [1, 1000, 131_072, 999_999, 5_000_000, 16 * 1024 * KB - 1])
@pytest.mark.parametrize(("low", "high", "resolution"), [(1024, 16 * 1024 * KB, 1024), (1, 10**8, 777)])
def test_bisection_brackets_any_cap_within_its_bound(cap: int, low: int, high: int, resolution: int) -> None:
    sent: list[int] = []

    def send(size: int) -> ProbeStep:
        sent.append(size)
        return ProbeStep(size, size > cap, 413 if size > cap else 200, "")

    result = probe_body_cap(send, low=low, high=high, resolution=resolution)
    assert len(sent) <= max_requests(low, high, resolution)
    assert result.refused - result.passed <= resolution
    if low <= cap < high:
        assert result.passed <= cap < result.refused


def test_the_bound_is_ceil_log2_of_range_over_resolution() -> None:
    assert max_requests(1024, 16 * 1024 * KB, 1024) == 14
    assert max_requests(0 + 1, 1 + 1000, 1000) == 0
    assert max_requests(1, 1 + 1024, 1) == 10


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("size", [512, 4096, 131_073])
def test_synthetic_bodies_have_the_exact_size_and_a_mock_provider_accepts_them(fmt: str, size: int) -> None:
    content = synthetic_body(fmt, size)
    assert len(content) == size
    provider = MockProvider(fmt, context_window=10_000_000)
    with httpx.Client(transport=httpx.MockTransport(provider)) as client:
        response = client.post("http://mock" + PATHS[fmt], content=content)
    assert response.status_code == 200, response.text
    assert json.loads(content)  # valid JSON


def test_a_synthetic_body_cannot_be_smaller_than_its_template() -> None:
    with pytest.raises(ProbeError, match="a openai-chat probe body has at least"):
        synthetic_body("openai-chat", 10)


@pytest.mark.parametrize(
    "fault",
    [BodyCap(limit=128_000, response="nginx"), WafBlock(min_bytes=300_001), ResetAfter(n_bytes=777_000)],
    ids=["nginx-413", "waf-403", "reset"],
)
def test_probing_a_loopback_gateway_finds_its_known_cap_within_two_percent(fault: Fault) -> None:
    cap = {"body-cap": 128_000, "waf-403-html": 300_000, "reset-after": 777_000}[fault.kind]
    gateway = Middlebox(MockProvider("openai-chat", context_window=10_000_000), [fault])
    with LoopbackServer(gateway) as server:
        probe = HttpProbe(server.base_url + "/v1/chat/completions", fmt="openai-chat", timeout_s=10)
        try:
            result = probe_body_cap(probe, low=KB, high=16 * 1024 * KB, resolution=KB)
        finally:
            probe.close()
    assert result.found
    assert abs(result.estimate - cap) <= 0.02 * cap
    assert result.passed <= cap < result.refused
    assert len(result.steps) <= max_requests(KB, 16 * 1024 * KB, KB) == 14
    assert all(step.what for step in result.steps)


def test_a_rate_limited_probe_stops_with_a_clear_error() -> None:
    def limited(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, json={"error": "slow down"})

    with LoopbackServer(limited) as server:
        probe = HttpProbe(server.base_url + "/v1/chat/completions", fmt="openai-chat")
        with pytest.raises(ProbeError, match="rate limited"):
            probe_body_cap(probe, low=KB, high=64 * KB, resolution=KB)
        probe.close()
