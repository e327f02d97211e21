"""Middlebox faults: what one gateway misbehaviour does to a request (a page, a reset, a silence).

A fault decides per request: :class:`Forward` it, or :class:`Respond` with a page; connection
faults (:class:`ConnectionFault`) drop the connection instead; shaping faults
(:mod:`simulator.proxy.shaping`: latency, bandwidth, a cut stream) change a forwarded answer.
Faults fire by body size, turn window and probability; :data:`FAULT_KINDS` names them for
scenarios, specs and the admin API.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from string import Template
from types import MappingProxyType
from typing import ClassVar, NoReturn

import httpx

from simulator.providers.mock import format_for_path, rate_limit_response
from simulator.proxy.anomaly import RULE_SETS, AnomalyScorer, Verdict
from simulator.proxy.fault_base import (
    FORWARD,
    ConnectionFault,
    Decision,
    Fault,
    Forward,
    Respond,
    choose,
    positive,
)
from simulator.proxy.pages import (
    BEDROCK_HTML_PAGE,
    BODY_CAP_PAGES,
    HEADER_CAP_PAGE,
    TIMEOUT_PAGES,
    UPSTREAM_ERROR_PAGES,
    WAF_PAGES,
    PageVariant,
    page_text,
)
from simulator.proxy.shaping import Bandwidth, CutStream, Latency, ShapingFault

__all__ = [
    "FAULT_KINDS",
    "FORWARD",
    "AnomalyWaf",
    "Bandwidth",
    "BedrockHtml403",
    "BodyCap",
    "CloseAfterBody",
    "ConnectionFault",
    "ContentMatch",
    "CutStream",
    "Decision",
    "Fault",
    "Forward",
    "GatewayTimeout",
    "HeaderCap",
    "IdleTimeout",
    "Latency",
    "RateLimit429",
    "ResetAfter",
    "Respond",
    "ShapingFault",
    "SlowClose",
    "StatusPage",
    "UpstreamError",
    "WafBlock",
    "header_bytes",
    "render_page",
]


# What a client sees in-process when the middlebox drops the connection.
RESET_MESSAGE = "[Errno 104] Connection reset by peer"
CLOSED_MESSAGE = "Server disconnected without sending a response."
TIMEOUT_MESSAGE = "timed out"
DEFAULT_SLOW_CLOSE_S = 5.0
DEFAULT_IDLE_TIMEOUT_S = 60.0
DEFAULT_RETRY_AFTER_S = 20
DEFAULT_GATEWAY_TIMEOUT_S = 60.0  # nginx's proxy_read_timeout and an AWS ALB's idle timeout
HEX_DIGITS = "0123456789abcdef"
CF_ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_="
FALLBACK_RATE_LIMIT_BODY = '{"error":{"message":"Rate limit exceeded: too many requests, retry after %ds"}}'


def render_page(page: PageVariant, ids: Mapping[str, str]) -> Respond:
    """``page`` as a middlebox answers it, its ``$name`` placeholders filled from ``ids``."""
    body = Template(page_text(page.file)).safe_substitute(ids).encode()
    headers = (
        *((("content-type", page.content_type),) if page.content_type else ()),
        *((name, Template(value).safe_substitute(ids)) for name, value in page.headers),
        *((("connection", "close"),) if page.closes else ()),
    )
    return Respond(page.status, headers, body, lingers=page.lingers)


@dataclass(frozen=True, slots=True)
class BodyCap(Fault):
    """Bodies over ``limit`` bytes get a 413 page: ``response`` names one of :data:`BODY_CAP_PAGES`."""

    kind: ClassVar[str] = "body-cap"
    at_headers: ClassVar[bool] = True
    limit: int
    response: str = "nginx"

    def _check(self) -> None:
        positive("limit", self.limit)
        choose("response", self.response, BODY_CAP_PAGES)

    def _triggered(self, request: httpx.Request, body_bytes: int) -> bool:
        return body_bytes > self.limit

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        return render_page(BODY_CAP_PAGES[self.response], ids)


def head_url(path: str, headers: list[tuple[str, str]]) -> str:
    host = next((value for name, value in headers if name.lower() == "host"), "localhost")
    return f"http://{host}{path}"


def header_bytes(request: httpx.Request) -> int:
    """Size of the request line and headers as sent on the wire (HTTP/1.1)."""
    line = len(request.method) + len(request.url.raw_path) + len(" HTTP/1.1\r\n") + 1
    return line + sum(len(k) + len(v) + 4 for k, v in request.headers.raw) + 2


@dataclass(frozen=True, slots=True)
class HeaderCap(Fault):
    """Requests whose request line and headers exceed ``limit`` bytes get 431."""

    kind: ClassVar[str] = "header-cap"
    at_headers: ClassVar[bool] = True
    limit: int

    def _check(self) -> None:
        positive("limit", self.limit)

    def _triggered(self, request: httpx.Request, body_bytes: int) -> bool:
        return header_bytes(request) > self.limit

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        return render_page(HEADER_CAP_PAGE, ids)


@dataclass(frozen=True, slots=True)
class WafBlock(Fault):
    """A WAF blocks bodies of ``min_bytes`` or more with a 403 HTML page (:data:`WAF_PAGES`)."""

    kind: ClassVar[str] = "waf-403-html"
    min_bytes: int = 0
    page: str = "cloudflare"

    def _check(self) -> None:
        choose("page", self.page, WAF_PAGES)

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        return render_page(WAF_PAGES[self.page], ids)


@dataclass(frozen=True, slots=True)
class ContentMatch(Fault):
    """A WAF rule on content: bodies matching ``pattern`` get a 403 page (:data:`WAF_PAGES`), whatever
    their size.

    ``pattern`` is a regular expression searched, case-insensitively (a WAF lower-cases
    before matching), in the raw request body as sent — JSON-escaped, so a newline in a
    message is ``\\n``. E.g. an SQL-injection rule (``union\\s+select``, ``or\\s+1=1``) or a
    remote-command rule (``curl [^|]*\\|\\s*sh``) firing on a tool result that quotes one.
    """

    kind: ClassVar[str] = "content-match"
    pattern: str
    page: str = "modsecurity"

    def _check(self) -> None:
        choose("page", self.page, WAF_PAGES)
        if not self.pattern:
            raise ValueError("pattern must be a non-empty regular expression")
        try:
            re.compile(self.pattern, re.IGNORECASE)
        except re.error as exc:
            raise ValueError(f"pattern {self.pattern!r} is not a regular expression: {exc}") from None

    def _triggered(self, request: httpx.Request, body_bytes: int) -> bool:
        body = request.read().decode("utf-8", "replace")
        return re.search(self.pattern, body, re.IGNORECASE) is not None  # compiled once, by re's cache

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        return render_page(WAF_PAGES[self.page], ids)


@cache
def _scorer(rules: str, paranoia: int, json_body: bool) -> AnomalyScorer:
    return AnomalyScorer.bundled(rules, paranoia=paranoia, threshold=1, json_body=json_body)


@dataclass(frozen=True, slots=True)
class AnomalyWaf(Fault):
    """A WAF that scores a body the CRS way and blocks it at ``threshold`` (:mod:`simulator.proxy.anomaly`).

    The rules of ``rules`` (:data:`~simulator.proxy.anomaly.RULE_SETS`: the OWASP CRS 3.3) up to
    ``paranoia`` (1–4) run over the request's arguments (each JSON leaf, with ``json_body``),
    headers and path; every matching value adds its rule's score, and a sum of ``threshold`` or
    more gets the ``page`` (:data:`WAF_PAGES`; ``apache`` and ``nginx`` are what Apache and nginx
    with ModSecurity answer), whatever the body's size.
    """

    kind: ClassVar[str] = "anomaly-waf"
    paranoia: int = 1
    threshold: int = 5
    page: str = "apache"
    rules: str = "crs-3.3"
    json_body: bool = True

    def _check(self) -> None:
        choose("page", self.page, WAF_PAGES)
        choose("rules", self.rules, RULE_SETS)
        if self.paranoia not in (1, 2, 3, 4):
            raise ValueError(f"paranoia must be 1, 2, 3 or 4, got {self.paranoia}")
        positive("threshold", self.threshold)

    def verdict(self, request: httpx.Request) -> Verdict:
        """The anomaly score of ``request`` under this fault's rules (what matched, and the sum)."""
        verdict = _scorer(self.rules, self.paranoia, self.json_body).score(request)
        return Verdict(verdict.score, self.threshold, verdict.matches)

    def _triggered(self, request: httpx.Request, body_bytes: int) -> bool:
        return self.verdict(request).blocked

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        return render_page(WAF_PAGES[self.page], ids)


@dataclass(frozen=True, slots=True)
class BedrockHtml403(Fault):
    """A corporate proxy answers bodies of ``min_bytes`` or more with an HTML 403 on a JSON API."""

    kind: ClassVar[str] = "bedrock-html-403"
    min_bytes: int = 0

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        return render_page(BEDROCK_HTML_PAGE, ids)


@dataclass(frozen=True, slots=True)
class RateLimit429(Fault):
    """A 429 in the provider's own format (``fmt``, else detected from the request path)."""

    kind: ClassVar[str] = "rate-limit-429"
    retry_after: int = DEFAULT_RETRY_AFTER_S
    fmt: str | None = None

    def _check(self) -> None:
        positive("retry_after", self.retry_after)
        if self.fmt is not None:
            rate_limit_response(self.fmt)  # raises ValueError listing the formats

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        fmt = self.fmt or format_for_path(request.url.path)
        if fmt is None:
            body = (FALLBACK_RATE_LIMIT_BODY % self.retry_after).encode()
            return Respond(
                429,
                (
                    ("content-type", "application/json"),
                    ("retry-after", str(self.retry_after)),
                    ("connection", "close"),
                ),
                body,
            )
        response = rate_limit_response(fmt, retry_after=self.retry_after)
        headers = tuple((k, v) for k, v in response.headers.items() if k != "content-length")
        return Respond(429, headers + (("connection", "close"),), response.content)


@dataclass(frozen=True, slots=True)
class ResetAfter(ConnectionFault):
    """Reset the TCP connection after ``n_bytes`` body bytes (only bodies longer than that).

    Over loopback, a request declaring a longer Content-Length is reset mid-POST:
    the server stops reading at ``n_bytes`` while the client is still sending.
    """

    kind: ClassVar[str] = "reset-after"
    at_headers: ClassVar[bool] = True
    n_bytes: int

    def _check(self) -> None:
        if self.n_bytes < 0:
            raise ValueError(f"n_bytes must be >= 0, got {self.n_bytes}")

    def _triggered(self, request: httpx.Request, body_bytes: int) -> bool:
        return body_bytes > self.n_bytes

    def raise_in_process(self, request: httpx.Request, sleep: Callable[[float], object]) -> NoReturn:
        raise httpx.ReadError(RESET_MESSAGE, request=request)


@dataclass(frozen=True, slots=True)
class CloseAfterBody(ConnectionFault):
    """Read the whole body, then close the connection without a response (EOF)."""

    kind: ClassVar[str] = "close-after-body"

    def raise_in_process(self, request: httpx.Request, sleep: Callable[[float], object]) -> NoReturn:
        raise httpx.RemoteProtocolError(CLOSED_MESSAGE, request=request)


@dataclass(frozen=True, slots=True)
class SlowClose(ConnectionFault):
    """Read the body, stay silent for ``delay_s`` seconds, then close without a response."""

    kind: ClassVar[str] = "slow-close"
    delay_s: float = DEFAULT_SLOW_CLOSE_S

    def _check(self) -> None:
        positive("delay_s", self.delay_s)

    def raise_in_process(self, request: httpx.Request, sleep: Callable[[float], object]) -> NoReturn:
        sleep(self.delay_s)
        raise httpx.RemoteProtocolError(CLOSED_MESSAGE, request=request)


@dataclass(frozen=True, slots=True)
class IdleTimeout(ConnectionFault):
    """Hold the connection open without answering for ``delay_s`` seconds (a read timeout)."""

    kind: ClassVar[str] = "idle-timeout"
    delay_s: float = DEFAULT_IDLE_TIMEOUT_S

    def _check(self) -> None:
        positive("delay_s", self.delay_s)

    def raise_in_process(self, request: httpx.Request, sleep: Callable[[float], object]) -> NoReturn:
        sleep(self.delay_s)
        raise httpx.ReadTimeout(TIMEOUT_MESSAGE, request=request)


@dataclass(frozen=True, slots=True)
class GatewayTimeout(Fault):
    """The gateway's upstream timeout: silent for ``delay_s`` seconds, then a 504 (or 524) page.

    ``page`` is one of :data:`~simulator.proxy.pages.TIMEOUT_PAGES` (nginx's ``504 Gateway
    Time-out``, an AWS ALB's 504, Cloudflare's ``524 A timeout occurred``). The request is not
    forwarded. (toxiproxy's ``timeout`` — silence, then a close — is :class:`SlowClose`.)
    """

    kind: ClassVar[str] = "timeout"
    delay_s: float = DEFAULT_GATEWAY_TIMEOUT_S
    page: str = "nginx"

    def _check(self) -> None:
        positive("delay_s", self.delay_s)
        choose("page", self.page, TIMEOUT_PAGES)

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        page = render_page(TIMEOUT_PAGES[self.page], ids)
        return Respond(page.status, page.headers, page.body, delay_s=self.delay_s)


@dataclass(frozen=True, slots=True)
class StatusPage(Fault):
    """Any other answer a gateway gives: ``status`` with ``body`` as ``content_type``.

    What ``ctxsim infer`` writes for a recorded page that matches none of the bundled ones.
    """

    kind: ClassVar[str] = "status-page"
    status: int
    body: str = ""
    content_type: str = "text/plain; charset=utf-8"

    def _check(self) -> None:
        if not 100 <= self.status <= 599:
            raise ValueError(f"status must be an HTTP status within 100..599, got {self.status}")

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        kind = (("content-type", self.content_type),) if self.content_type else ()  # "": none, as recorded
        return Respond(self.status, (*kind, ("connection", "close")), self.body.encode())


@dataclass(frozen=True, slots=True)
class UpstreamError(Fault):
    """The gateway's own 502/503 page, as when its upstream dropped or refused the request
    (:data:`~simulator.proxy.pages.UPSTREAM_ERROR_PAGES`: Envoy's ``upstream connect error or
    disconnect/reset before headers`` 503, nginx's or an ALB's ``502 Bad Gateway``).

    With ``min_bytes`` it is an upstream body cap masked by the proxy chain: the client never
    sees the 413, only a gateway error above a size.
    """

    kind: ClassVar[str] = "upstream-error"
    page: str = "envoy"

    def _check(self) -> None:
        choose("page", self.page, UPSTREAM_ERROR_PAGES)

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        return render_page(UPSTREAM_ERROR_PAGES[self.page], ids)


FAULT_KINDS: Mapping[str, type[Fault]] = MappingProxyType(
    {
        cls.kind: cls
        for cls in (
            BodyCap,
            HeaderCap,
            WafBlock,
            ContentMatch,
            AnomalyWaf,
            BedrockHtml403,
            ResetAfter,
            CloseAfterBody,
            SlowClose,
            IdleTimeout,
            RateLimit429,
            GatewayTimeout,
            StatusPage,
            UpstreamError,
            Latency,
            Bandwidth,
            CutStream,
        )
    }
)
