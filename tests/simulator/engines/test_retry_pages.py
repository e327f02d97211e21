"""The real engines' own "upstream failed" pages classify as transient network failures (SPEC §12).

Each engine runs in front of an upstream that resets every request or of a closed port, and answers
with its own page (nginx's and HAProxy's 502/503, Apache's Proxy Error 502 and 503, Squid's
ERR_READ_ERROR naming whatever system error it met, Caddy's empty 502): never a block, auth, other or
a size limit, whatever the history's size.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from ctxrecover.classify import FailureKind, classify
from simulator.engines.capture import Capture, captured_pages

ENGINES = ("nginx", "haproxy", "apache", "squid", "caddy")
UPSTREAMS = ("reset", "closed")
# Over SPEC §2.4's threshold: a reset of this very request would be a suspected payload.
LARGE_HISTORY = 600_000
ATTEMPTS = 5


def _gateway_answer(engine: str, upstream: str) -> httpx.Response:
    """The engine's answer; HAProxy meets a resetting upstream with its 502 page or, racing it, a bare close
    of the client's connection (no page to classify), so a close is tried again."""
    for _ in range(ATTEMPTS):
        try:
            ((_, _, response),) = captured_pages(
                (Capture(f"{engine}-{upstream}", engine, upstream=upstream),)
            )
        except httpx.RemoteProtocolError:
            continue
        return response
    pytest.fail(f"{engine} closed without a page {ATTEMPTS} times in front of a {upstream} upstream")


@pytest.mark.slow
@pytest.mark.parametrize("upstream", UPSTREAMS)
@pytest.mark.parametrize("engine", ENGINES)
def test_the_engines_retry_page_is_transient(
    engine: str, upstream: str, require_engine: Callable[[str], None]
) -> None:
    require_engine(engine)
    response = _gateway_answer(engine, upstream)
    assert response.status_code in (502, 503, 504)
    for history_chars in (None, LARGE_HISTORY):
        failure = classify(
            status=response.status_code,
            body=response.content,
            headers=dict(response.headers),
            request_bytes=100,
            history_chars=history_chars,
        )
        assert failure.kind is FailureKind.TRANSIENT_NETWORK, f"{response.status_code}: {failure.evidence}"
