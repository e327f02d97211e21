"""Forwarding to a real upstream URL: concurrent, pooled, and sharing nothing between clients.

:class:`Forwarder` sends each request on a pooled ``httpx.AsyncHTTPTransport`` — a transport,
not a client, so there is no cookie jar, no default headers and no auth to carry one client's
identity into another's request: every request goes with its own headers only (hop-by-hop
headers, ``Host`` and ``x-ctxsim-turn`` dropped). Proxy variables are ignored (a transport
never reads the environment). The answer streams back as it comes; the timeout counts from
the upstream call, never from time spent waiting behind other requests.

Upstream failures map to what the client should see (:class:`UpstreamFailure`): unreachable
→ 502, no answer in time → 504, and a reset or a close without an answer is mirrored on the
client's connection, so a client behind the proxy meets the gateway's faults as if direct.
"""

from __future__ import annotations

from collections.abc import Iterable

import httpx

from simulator.proxy.redact import redact_text, redact_url

__all__ = ["Forwarder", "UpstreamFailure"]

TURN_HEADER = "x-ctxsim-turn"
NOT_FORWARDED_HEADERS = frozenset({
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"proxy-connection",
    b"te", b"trailer", b"transfer-encoding", b"upgrade", b"content-length", b"host", b"expect",
    TURN_HEADER.encode(),
})
CONNECT_TIMEOUT_S = 10.0
# Most specific first: (httpx error, outcome, status answered or None when mirrored on the connection).
UPSTREAM_FAILURES: tuple[tuple[type[Exception], str, int | None], ...] = (
    (httpx.ConnectTimeout, "upstream-error", 502),
    (httpx.TimeoutException, "upstream-timeout", 504),
    (httpx.ConnectError, "upstream-error", 502),
    (httpx.UnsupportedProtocol, "upstream-error", 502),
    (httpx.RemoteProtocolError, "upstream-closed", None),
    (httpx.ReadError, "upstream-reset", None),
    (httpx.WriteError, "upstream-reset", None),
    (httpx.TransportError, "upstream-error", 502),
)


class UpstreamFailure(Exception):
    """The upstream URL failed: ``outcome`` (see journal.OUTCOMES) and the ``status`` to answer, if any."""

    def __init__(self, outcome: str, status: int | None, detail: str) -> None:
        super().__init__(detail)
        self.outcome, self.status, self.detail = outcome, status, detail


class Forwarder:
    """Sends requests to ``upstream`` (an http(s) URL; its path prefixes every request path).

    Use from one event loop; :meth:`aclose` closes the pool.
    """

    def __init__(self, upstream: str, *, timeout_s: float, max_connections: int) -> None:
        self.base = httpx.URL(upstream)
        self.shown = redact_url(upstream)
        self.timeout = httpx.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s))
        self._limits = httpx.Limits(max_connections=max_connections,
                                    max_keepalive_connections=max_connections)
        self._transport: httpx.AsyncHTTPTransport | None = None

    def url_for(self, raw_target: bytes) -> httpx.URL:
        """The upstream URL of a request target (path and query)."""
        return self.base.copy_with(raw_path=self.base.raw_path.rstrip(b"/") + raw_target)

    async def send(self, method: str, raw_target: bytes, headers: Iterable[tuple[bytes, bytes]],
                   body: bytes) -> httpx.Response:
        """The upstream's answer, its head read and its body still streaming; raises UpstreamFailure."""
        if self._transport is None:
            self._transport = httpx.AsyncHTTPTransport(limits=self._limits, retries=0)
        kept = [(k, v) for k, v in headers if k.lower() not in NOT_FORWARDED_HEADERS]
        request = httpx.Request(method, self.url_for(raw_target), headers=kept, content=body,
                                extensions={"timeout": self.timeout.as_dict()})
        try:
            return await self._transport.handle_async_request(request)
        except httpx.TransportError as error:
            raise self.failure(error) from error

    def failure(self, error: httpx.TransportError) -> UpstreamFailure:
        """What ``error`` from the upstream means for the client."""
        outcome, status = next((o, s) for kind, o, s in UPSTREAM_FAILURES if isinstance(error, kind))
        detail = redact_text(f"{type(error).__name__} from {self.shown}: {error}".rstrip(": "))
        return UpstreamFailure(outcome, status, detail)

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()
            self._transport = None
