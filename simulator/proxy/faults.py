"""Middlebox faults: what one gateway misbehaviour does to a request (a page, a reset, a silence).

A fault decides per request: :class:`Forward` it, or :class:`Respond` with a page; connection
faults (:class:`ConnectionFault`) drop the connection instead. Faults fire by body size, turn
window and probability; :data:`FAULT_KINDS` names them for scenarios and specs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from string import Template
from types import MappingProxyType
from typing import ClassVar

import httpx

from simulator.providers.mock import format_for_path, rate_limit_response
from simulator.proxy.pages import (
    BEDROCK_HTML_PAGE,
    BODY_CAP_PAGES,
    HEADER_CAP_PAGE,
    WAF_PAGES,
    PageVariant,
    page_text,
)

__all__ = [
    "BedrockHtml403",
    "BodyCap",
    "CloseAfterBody",
    "ConnectionFault",
    "Decision",
    "FAULT_KINDS",
    "Fault",
    "Forward",
    "HeaderCap",
    "IdleTimeout",
    "RateLimit429",
    "ResetAfter",
    "Respond",
    "SlowClose",
    "WafBlock",
    "header_bytes",
]


# What a client sees in-process when the middlebox drops the connection.
RESET_MESSAGE = "[Errno 104] Connection reset by peer"
CLOSED_MESSAGE = "Server disconnected without sending a response."
TIMEOUT_MESSAGE = "timed out"
DEFAULT_SLOW_CLOSE_S = 5.0
DEFAULT_IDLE_TIMEOUT_S = 60.0
DEFAULT_RETRY_AFTER_S = 20
HEX_DIGITS = "0123456789abcdef"
CF_ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_="
FALLBACK_RATE_LIMIT_BODY = '{"error":{"message":"Rate limit exceeded: too many requests, retry after %ds"}}'


def _choose(name: str, value: str, table: Mapping[str, object]) -> None:
    if value not in table:
        raise ValueError(f"{name} must be one of {', '.join(sorted(table))}, got {value!r}")


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
    body = Template(page_text(page.file)).safe_substitute(ids).encode()
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
