"""Proxy, gateway and WAF fault models in front of an upstream handler.

A :class:`Middlebox` wraps any ``handler(request) -> httpx.Response`` (a
:class:`~simulator.providers.MockProvider`, another middlebox) with a list of
faults. For each request it decides, as data, what the middlebox does:

- :class:`Forward` — pass the request to the upstream;
- :class:`Respond` — answer itself (413 / 431 / 403 HTML pages, 429);
- a :class:`ConnectionFault` — :class:`ResetAfter`, :class:`CloseAfterBody`,
  :class:`SlowClose`, :class:`IdleTimeout`.

``decide(request, turn)`` returns that decision, so the loopback TCP server can
really reset or close the socket; calling the middlebox in-process acts on it
and raises the httpx transport error a client would see (``ReadError`` on a
reset, ``RemoteProtocolError`` on a close without response, ``ReadTimeout``).
``decide_headers(method, path, headers, content_length, turn)`` decides from the
request head alone when the first fault that can fire only needs the declared
size (:class:`BodyCap`, :class:`HeaderCap`, :class:`ResetAfter`): the loopback
server then answers before reading the body, or resets mid-POST after
``n_bytes``, while the client is still sending.

The first fault whose conditions hold fires: ``from_turn`` ≤ turn ≤
``until_turn``, request body ≥ ``min_bytes``, the fault's own trigger (body or
headers over a limit), then a ``probability`` draw from the middlebox's own
``random.Random(seed)``. Pages live in ``fixtures/pages/`` and keep the real
fingerprints (titles, Cloudflare Ray ID, Akamai reference, F5 support ID);
their ids are drawn from the seed too.

>>> upstream = lambda request: httpx.Response(200, json={"ok": True})
>>> box = Middlebox(upstream, [WafBlock(129 * 1024, page="cloudflare")], seed=7)
>>> client = httpx.Client(transport=httpx.MockTransport(box))
>>> client.post("http://mock/v1/messages", content=b"x" * 101 * 1024).status_code
200
>>> client.post("http://mock/v1/messages", content=b"x" * 129 * 1024).status_code
403
>>> box.rejections[0].kind
'waf-403-html'
"""

from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from string import Template
from types import MappingProxyType
from typing import ClassVar

import httpx

from simulator.providers import format_for_path, rate_limit_response

__all__ = [
    "BODY_CAP_PAGES",
    "FAULT_KINDS",
    "PAGES_DIR",
    "WAF_PAGES",
    "BedrockHtml403",
    "BodyCap",
    "CloseAfterBody",
    "ConnectionFault",
    "Decision",
    "Fault",
    "Forward",
    "Handler",
    "HeaderCap",
    "IdleTimeout",
    "Middlebox",
    "PageVariant",
    "RateLimit429",
    "Rejection",
    "ResetAfter",
    "Respond",
    "SlowClose",
    "WafBlock",
    "header_bytes",
]

PAGES_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "pages"

# What a client sees in-process when the middlebox drops the connection.
RESET_MESSAGE = "[Errno 104] Connection reset by peer"
CLOSED_MESSAGE = "Server disconnected without sending a response."
TIMEOUT_MESSAGE = "timed out"

DEFAULT_SLOW_CLOSE_S = 5.0
DEFAULT_IDLE_TIMEOUT_S = 60.0
DEFAULT_RETRY_AFTER_S = 20
CLOUDFLARE_COLO = "FRA"
HEX_DIGITS = "0123456789abcdef"
CF_ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_="
FALLBACK_RATE_LIMIT_BODY = '{"error":{"message":"Rate limit exceeded: too many requests, retry after %ds"}}'


@dataclass(frozen=True, slots=True)
class PageVariant:
    """One fault page: its file in ``fixtures/pages/``, status, content type and headers.

    ``$name`` placeholders in the file and the headers are filled per request
    (``host``, ``path``, ``ray_id``, ``client_ip``, ``reference``,
    ``support_id``, ``cf_id``, ``transaction_id``).
    """

    file: str
    status: int
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()


BODY_CAP_PAGES: Mapping[str, PageVariant] = MappingProxyType(
    {
        "nginx": PageVariant("413-nginx.html", 413, "text/html", (("server", "nginx"),)),
        "envoy": PageVariant("413-envoy.txt", 413, "text/plain", (("server", "envoy"),)),
        "aws-alb": PageVariant("413-aws-alb.html", 413, "text/html", (("server", "awselb/2.0"),)),
        "cloudflare": PageVariant(
            "413-cloudflare.html", 413, "text/html",
            (("server", "cloudflare"), ("cf-ray", "${ray_id}-" + CLOUDFLARE_COLO)),
        ),
        "json-error": PageVariant("413-json-error.json", 413, "application/json"),
        "json-message": PageVariant("413-json-message.json", 413, "application/json"),
    }
)
WAF_PAGES: Mapping[str, PageVariant] = MappingProxyType(
    {
        "cloudflare": PageVariant(
            "403-cloudflare.html", 403, "text/html; charset=UTF-8",
            (("server", "cloudflare"), ("cf-ray", "${ray_id}-" + CLOUDFLARE_COLO)),
        ),
        "akamai": PageVariant("403-akamai.html", 403, "text/html", (("server", "AkamaiGHost"),)),
        "modsecurity": PageVariant("403-modsecurity.html", 403, "text/html; charset=iso-8859-1",
                                   (("server", "Apache"),)),
        "f5": PageVariant("403-f5.html", 403, "text/html; charset=utf-8"),
        "aws-waf": PageVariant(
            "403-aws-waf.html", 403, "text/html",
            (("server", "CloudFront"), ("x-cache", "Error from cloudfront"), ("x-amz-cf-id", "${cf_id}")),
        ),
    }
)
# The corporate incident: a proxy's HTML 403 in front of the Bedrock JSON API.
# The page deliberately carries no WAF vocabulary: only the HTML gives it away.
BEDROCK_HTML_PAGE = PageVariant("403-corporate-proxy.html", 403, "text/html; charset=utf-8")
HEADER_CAP_PAGE = PageVariant("431-header-fields.html", 431, "text/html")


@cache
def _page_text(file: str) -> str:
    path = PAGES_DIR / file
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"fault page {path} is missing; the middlebox reads its pages from fixtures/pages/ "
            "of a source checkout (pip install -e .)"
        ) from None


def _choose(name: str, value: str, table: Mapping[str, object]) -> None:
    if value not in table:
        raise ValueError(f"{name} must be one of {', '.join(sorted(table))}, got {value!r}")


# -- decisions ---------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Forward:
    """Decision: pass the request to the upstream unchanged."""


@dataclass(frozen=True, slots=True)
class Respond:
    """Decision: the middlebox answers itself with this status, headers and body."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    @property
    def text(self) -> str:
        """The body decoded as UTF-8."""
        return self.body.decode("utf-8", "replace")

    def to_response(self, request: httpx.Request | None = None) -> httpx.Response:
        """This answer as an ``httpx.Response`` (bound to ``request`` when given)."""
        return httpx.Response(self.status, headers=list(self.headers), content=self.body, request=request)


# -- faults ------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class Fault(ABC):
    """Base of every fault: the shared conditions and the decision it takes.

    ``probability`` (seeded draw), ``from_turn``/``until_turn`` (1-based,
    inclusive) and ``min_bytes`` (request body size) gate the fault.
    """

    kind: ClassVar[str] = ""
    # True when the trigger needs only the declared body size and the headers, so the
    # fault can act as soon as the request head is in (see Middlebox.decide_headers).
    at_headers: ClassVar[bool] = False
    probability: float = 1.0
    from_turn: int = 1
    until_turn: int | None = None
    min_bytes: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"probability must be within [0, 1], got {self.probability}")
        if self.from_turn < 1:
            raise ValueError(f"from_turn must be >= 1 (turns count from 1), got {self.from_turn}")
        if self.until_turn is not None and self.until_turn < self.from_turn:
            raise ValueError(f"until_turn must be >= from_turn ({self.from_turn}), got {self.until_turn}")
        if self.min_bytes < 0:
            raise ValueError(f"min_bytes must be >= 0, got {self.min_bytes}")
        self._check()

    def _check(self) -> None:  # noqa: B027 - an optional hook, not an abstract method
        """Validate the fault's own fields (subclasses override)."""

    def applies(self, request: httpx.Request, body_bytes: int, turn: int) -> bool:
        """Whether every condition except the probability draw holds."""
        return self.gated_in(body_bytes, turn) and self._triggered(request, body_bytes)

    def gated_in(self, body_bytes: int, turn: int) -> bool:
        """Whether the shared conditions (turn range, ``min_bytes``) hold; the trigger is not looked at."""
        return (
            turn >= self.from_turn
            and (self.until_turn is None or turn <= self.until_turn)
            and body_bytes >= self.min_bytes
        )

    def _triggered(self, request: httpx.Request, body_bytes: int) -> bool:
        return True

    @abstractmethod
    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        """The decision this fault takes for ``request`` (``ids`` fill page placeholders)."""


def _respond(page: PageVariant, ids: Mapping[str, str]) -> Respond:
    body = Template(_page_text(page.file)).safe_substitute(ids).encode()
    headers = (("content-type", page.content_type),
               *((name, Template(value).safe_substitute(ids)) for name, value in page.headers),
               ("connection", "close"))
    return Respond(page.status, headers, body)


def _positive(name: str, value: int | float) -> None:
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")


@dataclass(frozen=True, slots=True)
class BodyCap(Fault):
    """Bodies over ``limit`` bytes get a 413 page: ``response`` names one of :data:`BODY_CAP_PAGES`."""

    kind: ClassVar[str] = "body-cap"
    at_headers: ClassVar[bool] = True
    limit: int
    response: str = "nginx"

    def _check(self) -> None:
        _positive("limit", self.limit)
        _choose("response", self.response, BODY_CAP_PAGES)

    def _triggered(self, request: httpx.Request, body_bytes: int) -> bool:
        return body_bytes > self.limit

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        return _respond(BODY_CAP_PAGES[self.response], ids)


def _head_url(path: str, headers: list[tuple[str, str]]) -> str:
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
        _positive("limit", self.limit)

    def _triggered(self, request: httpx.Request, body_bytes: int) -> bool:
        return header_bytes(request) > self.limit

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        return _respond(HEADER_CAP_PAGE, ids)


@dataclass(frozen=True, slots=True)
class WafBlock(Fault):
    """A WAF blocks bodies of ``min_bytes`` or more with a 403 HTML page (:data:`WAF_PAGES`)."""

    kind: ClassVar[str] = "waf-403-html"
    min_bytes: int = 0
    page: str = "cloudflare"

    def _check(self) -> None:
        _choose("page", self.page, WAF_PAGES)

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        return _respond(WAF_PAGES[self.page], ids)


@dataclass(frozen=True, slots=True)
class BedrockHtml403(Fault):
    """A corporate proxy answers bodies of ``min_bytes`` or more with an HTML 403 on a JSON API."""

    kind: ClassVar[str] = "bedrock-html-403"
    min_bytes: int = 0

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        return _respond(BEDROCK_HTML_PAGE, ids)


@dataclass(frozen=True, slots=True)
class RateLimit429(Fault):
    """A 429 in the provider's own format (``fmt``, else detected from the request path)."""

    kind: ClassVar[str] = "rate-limit-429"
    retry_after: int = DEFAULT_RETRY_AFTER_S
    fmt: str | None = None

    def _check(self) -> None:
        _positive("retry_after", self.retry_after)
        if self.fmt is not None:
            rate_limit_response(self.fmt)  # raises ValueError listing the formats

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        fmt = self.fmt or format_for_path(request.url.path)
        if fmt is None:
            body = (FALLBACK_RATE_LIMIT_BODY % self.retry_after).encode()
            return Respond(429, (("content-type", "application/json"), ("retry-after", str(self.retry_after)),
                                 ("connection", "close")), body)
        response = rate_limit_response(fmt, retry_after=self.retry_after)
        headers = tuple((k, v) for k, v in response.headers.items() if k != "content-length")
        return Respond(429, headers + (("connection", "close"),), response.content)


@dataclass(frozen=True, slots=True)
class ConnectionFault(Fault):
    """A fault that drops the connection instead of answering; it is its own decision."""

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        return self

    @abstractmethod
    def raise_in_process(self, request: httpx.Request, sleep: Callable[[float], object]) -> None:
        """Raise the httpx transport error a client sees when this fault hits."""


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

    def raise_in_process(self, request: httpx.Request, sleep: Callable[[float], object]) -> None:
        raise httpx.ReadError(RESET_MESSAGE, request=request)


@dataclass(frozen=True, slots=True)
class CloseAfterBody(ConnectionFault):
    """Read the whole body, then close the connection without a response (EOF)."""

    kind: ClassVar[str] = "close-after-body"

    def raise_in_process(self, request: httpx.Request, sleep: Callable[[float], object]) -> None:
        raise httpx.RemoteProtocolError(CLOSED_MESSAGE, request=request)


@dataclass(frozen=True, slots=True)
class SlowClose(ConnectionFault):
    """Read the body, stay silent for ``delay_s`` seconds, then close without a response."""

    kind: ClassVar[str] = "slow-close"
    delay_s: float = DEFAULT_SLOW_CLOSE_S

    def _check(self) -> None:
        _positive("delay_s", self.delay_s)

    def raise_in_process(self, request: httpx.Request, sleep: Callable[[float], object]) -> None:
        sleep(self.delay_s)
        raise httpx.RemoteProtocolError(CLOSED_MESSAGE, request=request)


@dataclass(frozen=True, slots=True)
class IdleTimeout(ConnectionFault):
    """Hold the connection open without answering for ``delay_s`` seconds (a read timeout)."""

    kind: ClassVar[str] = "idle-timeout"
    delay_s: float = DEFAULT_IDLE_TIMEOUT_S

    def _check(self) -> None:
        _positive("delay_s", self.delay_s)

    def raise_in_process(self, request: httpx.Request, sleep: Callable[[float], object]) -> None:
        sleep(self.delay_s)
        raise httpx.ReadTimeout(TIMEOUT_MESSAGE, request=request)


Decision = Forward | Respond | ConnectionFault
FORWARD = Forward()

FAULT_KINDS: Mapping[str, type[Fault]] = MappingProxyType(
    {
        cls.kind: cls
        for cls in (BodyCap, HeaderCap, WafBlock, BedrockHtml403, ResetAfter, CloseAfterBody, SlowClose,
                    IdleTimeout, RateLimit429)
    }
)


# -- the middlebox -------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Rejection:
    """One request the middlebox did not forward."""

    turn: int
    kind: str
    request_bytes: int
    decision: Respond | ConnectionFault

    @property
    def status(self) -> int | None:
        """The HTTP status answered, or None when the connection was dropped."""
        return self.decision.status if isinstance(self.decision, Respond) else None


Handler = Callable[[httpx.Request], httpx.Response]


class Middlebox:
    """A chain of faults in front of ``upstream``, itself a handler.

    ``turn_of(request)`` gives a request's 1-based turn; by default each
    request is the next turn (retries included). ``sleep`` is used by
    :class:`SlowClose` and :class:`IdleTimeout` in-process. ``upstream`` may
    be None when only :meth:`decide` is used (e.g. in front of a real URL).
    """

    def __init__(
        self,
        upstream: Handler | None,
        faults: Iterable[Fault] = (),
        *,
        seed: int = 0,
        sleep: Callable[[float], object] = time.sleep,
        turn_of: Callable[[httpx.Request], int] | None = None,
    ) -> None:
        self.upstream = upstream
        self.faults: tuple[Fault, ...] = tuple(faults)
        for fault in self.faults:
            if not isinstance(fault, Fault):
                raise TypeError(f"Middlebox faults must be Fault instances, got {fault!r}")
        self.rejections: list[Rejection] = []
        self.requests = 0
        self.forwarded = 0
        self._sleep = sleep
        self._turn_of = turn_of
        self._draws = random.Random(seed)
        self._ids = random.Random(f"ctxsim-page-ids:{seed}")

    def decide(self, request: httpx.Request, turn: int | None = None) -> Decision:
        """What the middlebox does with ``request`` (counts it; records a rejection)."""
        self.requests += 1
        if turn is None:
            turn = self._turn_of(request) if self._turn_of else self.requests
        body_bytes = len(request.read())
        for fault in self.faults:
            if self._fires(fault, request, body_bytes, turn):
                return self._reject(fault, request, body_bytes, turn)
        return FORWARD

    def decide_headers(
        self,
        method: str,
        path: str,
        headers: Iterable[tuple[str, str]] | Mapping[str, str],
        content_length: int | None,
        turn: int | None = None,
    ) -> Respond | ConnectionFault | None:
        """What the middlebox does as soon as the request head is in, or None to wait for the body.

        Faults are walked in order as :meth:`decide` walks them, sized by the
        declared ``content_length``. When the first one that fires acts at the
        head (``at_headers``: a body cap, a header cap, a reset after N bytes), its
        decision is returned, counted and recorded like :meth:`decide`'s. Otherwise
        — a fault that may fire needs the body, nothing fires, or the length is
        unknown (chunked) — the answer is None and nothing is counted or drawn, so
        :meth:`decide` on the full request then decides exactly as it would have.
        """
        if content_length is None:
            return None
        pairs = list(headers.items() if isinstance(headers, Mapping) else headers)
        request = httpx.Request(method, _head_url(path, pairs), headers=pairs)
        if turn is None:
            turn = self._turn_of(request) if self._turn_of else self.requests + 1
        draws = self._draws.getstate()
        for fault in self.faults:
            if not fault.at_headers:
                if fault.gated_in(content_length, turn) and fault.probability > 0.0:
                    break  # it may fire once the body is in: only decide() can tell
                continue
            if self._fires(fault, request, content_length, turn):
                self.requests += 1
                return self._reject(fault, request, content_length, turn)
        self._draws.setstate(draws)  # decide() redraws the same numbers
        return None

    def _fires(self, fault: Fault, request: httpx.Request, body_bytes: int, turn: int) -> bool:
        if not fault.applies(request, body_bytes, turn) or fault.probability <= 0.0:
            return False
        return fault.probability >= 1.0 or self._draws.random() < fault.probability

    def _reject(
        self, fault: Fault, request: httpx.Request, body_bytes: int, turn: int
    ) -> Respond | ConnectionFault:
        decision = fault.action(request, self._page_ids(request))
        self.rejections.append(Rejection(turn, fault.kind, body_bytes, decision))
        return decision

    def __call__(self, request: httpx.Request) -> httpx.Response:
        decision = self.decide(request)
        if isinstance(decision, Respond):
            return decision.to_response(request)
        if isinstance(decision, ConnectionFault):
            decision.raise_in_process(request, self._sleep)
        if self.upstream is None:
            raise RuntimeError("Middlebox has no upstream to forward to; pass upstream= or use decide()")
        self.forwarded += 1
        return self.upstream(request)

    def _page_ids(self, request: httpx.Request) -> dict[str, str]:
        rng = self._ids
        stamp = 1_700_000_000 + rng.randrange(10**8)
        reference = f"18.{rng.getrandbits(32):08x}.{stamp}.{rng.getrandbits(32):08x}"
        transaction = (f"{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-4{rng.getrandbits(12):03x}-"
                       f"8{rng.getrandbits(12):03x}-{rng.getrandbits(48):012x}")
        return {
            "host": request.url.host,
            "path": request.url.path,
            "client_ip": "127.0.0.1",
            "ray_id": "".join(rng.choice(HEX_DIGITS) for _ in range(16)),
            "reference": reference,
            "support_id": str(rng.randrange(10**18, 10**19)),
            "cf_id": "".join(rng.choice(CF_ID_ALPHABET) for _ in range(56)),
            "transaction_id": transaction,
        }
