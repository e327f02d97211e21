"""A long-running ``ctxsim proxy`` keeps bounded state: thousands of requests, the same few structures.

The proxy is wired exactly as the command line wires it (``simulator.cli.proxy.build_app``):
a mock host whose providers keep their last calls only, a middlebox that keeps its last
rejections, a server that keeps its last records — while every counter counts everything.
(The resident memory of the real process over 10,000 requests is measured in bench/bench_proxy.py.)
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from simulator.cli.app import build_parser
from simulator.cli.proxy import KEEP_CALLS, KEEP_REJECTIONS, build_app
from simulator.proxy.loopback import DEFAULT_KEEP_RECORDS, LoopbackServer

REQUESTS = 3000
CLIENTS = 8
KB = 1024


@pytest.mark.slow
def test_thousands_of_requests_leave_every_log_bounded_and_every_counter_exact() -> None:
    args = build_parser().parse_args(["proxy", "--upstream", "mock:openai", "--fault", "body-cap:16KB"])
    box, _, _, _ = build_app(args)
    service = box.upstream
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 10 * KB}]}
    big = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 20 * KB}]}

    def send(i: int) -> int:
        body = big if i % 3 == 0 else chat
        return client.post(server.base_url + "/v1/chat/completions", json=body).status_code

    with (
        LoopbackServer(box) as server,
        httpx.Client(trust_env=False, timeout=30, limits=httpx.Limits(max_connections=CLIENTS)) as client,
    ):
        with ThreadPoolExecutor(CLIENTS) as pool:
            statuses = list(pool.map(send, range(REQUESTS)))
        stats = server.stats()
    assert statuses.count(413) == REQUESTS // 3 and statuses.count(200) == REQUESTS - REQUESTS // 3
    assert server.served == REQUESTS and len(server.records) == DEFAULT_KEEP_RECORDS
    assert service.call_count == REQUESTS - REQUESTS // 3
    assert all(
        len(provider.calls) == KEEP_CALLS
        for provider in service.providers.values()
        if provider.call_count >= KEEP_CALLS
    )
    assert box.rejected == {"body-cap": REQUESTS // 3} and len(box.rejections) == KEEP_REJECTIONS
    assert stats["inflight_body_bytes"] == 0 and stats["connections"] <= CLIENTS
