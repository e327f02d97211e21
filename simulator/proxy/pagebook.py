"""Telling gateway answers apart: which bundled page an answer is, and whether a gateway refused at all.

``ctxsim infer`` and ``ctxsim probe`` read answers they did not produce. An answer is a
*gateway refusal* when the connection was dropped, when its status is one gateways use for
themselves (:data:`GATEWAY_STATUSES`), when it is an HTML 403 on a JSON API, or when it is
one of the bundled pages; a provider's own JSON error (a 400 context overflow, a 401) went
through the gateway. :func:`known_page` finds the bundled page an answer is from its shape
alone — status and fingerprint (:func:`~simulator.proxy.journal.page_fingerprint`, which
ignores ids, numbers, versions, host and path), else status, title, content type and a length
band (:data:`LENGTH_BAND`: the same page of another version or configuration) — so an
inferred scenario can name it. The bundled pages include those captured from the real
engines (nginx, Apache, HAProxy, Squid, Caddy: ``fixtures/pages/captured.json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

from simulator.proxy.faults import render_page
from simulator.proxy.journal import page_fingerprint, page_title
from simulator.proxy.pages import (
    BEDROCK_HTML_PAGE,
    BODY_CAP_PAGES,
    HEADER_CAP_PAGE,
    TIMEOUT_PAGES,
    UPSTREAM_ERROR_PAGES,
    WAF_PAGES,
    PageVariant,
)

__all__ = [
    "GATEWAY_STATUSES",
    "LENGTH_BAND",
    "KnownPage",
    "is_gateway_refusal",
    "known_page",
    "known_pages",
    "server_product",
]

# Statuses a gateway answers itself (sources: RFC 9110 for 408/413/429/502–504, RFC 6585 for 431,
# Cloudflare's 52x origin errors). A 403 counts when it is HTML (a WAF page on a JSON API).
GATEWAY_STATUSES = frozenset({408, 413, 429, 431, 502, 503, 504, 520, 521, 522, 523, 524})
# A page whose fingerprint differs from a bundled one (another version's wording, a signature line on
# or off) is still that page when status, title and content type agree and its length is within this
# fraction of the bundled page's.
LENGTH_BAND = 0.2
# Placeholders a bundled page is rendered with to fingerprint it (host and path are normalised away).
SAMPLE_IDS: Mapping[str, str] = MappingProxyType(
    {
        "host": "gateway.example",
        "path": "/v1/messages",
        "client_ip": "192.0.2.1",
        "ray_id": "8f3a2b1c0d9e8f7a",
        "reference": "18.2f1e3d4c.1700000000.5a6b7c8d",
        "support_id": "1234567890123456789",
        "cf_id": "A1b2C3d4" * 7,
        "transaction_id": "0a1b2c3d-4e5f-4a1b-8c2d-3e4f5a6b7c8d",
    }
)


@dataclass(frozen=True, slots=True)
class KnownPage:
    """A bundled page: the fault ``kind`` that answers it and, for a choice, the ``field`` naming it."""

    kind: str
    field: str | None
    name: str
    status: int
    content_type: str
    title: str
    fingerprint: str
    length: int = 0
    server: str = ""  # the product its Server header names ("nginx", "apache"), lower-case

    @property
    def identity(self) -> str:
        """``kind/name``: what tells this page from the others, whatever its fingerprint."""
        return f"{self.kind}/{self.name}"


def _known(kind: str, field: str | None, name: str, page: PageVariant) -> KnownPage:
    body = render_page(page, SAMPLE_IDS).body
    return KnownPage(
        kind,
        field,
        name,
        page.status,
        page.content_type,
        page_title(body),
        page_fingerprint(body, host=SAMPLE_IDS["host"], path=SAMPLE_IDS["path"]),
        len(body),
        server_product(dict(page.headers).get("server", "")),
    )


def server_product(server: str) -> str:
    """The product a Server header names, lower-case: ``Apache/2.4.71 (Debian)`` is ``apache``."""
    return server.split("/")[0].split()[0].lower() if server.strip() else ""


@cache
def known_pages() -> tuple[KnownPage, ...]:
    """Every bundled page, with the fault that answers it."""
    return (
        *(_known("body-cap", "response", name, page) for name, page in BODY_CAP_PAGES.items()),
        *(_known("waf-403-html", "page", name, page) for name, page in WAF_PAGES.items()),
        _known("bedrock-html-403", None, "corporate-proxy", BEDROCK_HTML_PAGE),
        _known("header-cap", None, "header-fields", HEADER_CAP_PAGE),
        *(_known("timeout", "page", name, page) for name, page in TIMEOUT_PAGES.items()),
        *(_known("upstream-error", "page", name, page) for name, page in UPSTREAM_ERROR_PAGES.items()),
    )


def known_page(
    status: int | None,
    fingerprint: str,
    *,
    title: str = "",
    content_type: str = "",
    length: int | None = None,
    server: str = "",
) -> KnownPage | None:
    """The bundled page an answer is, from its shape: its status and fingerprint, else (given a
    ``title``, ``content_type`` and ``length``) the page of that status, title, content type and
    server product (when both name one) whose length is nearest, within :data:`LENGTH_BAND`;
    None when no page fits."""
    product = server_product(server)
    exact = next((p for p in known_pages() if p.status == status and p.fingerprint == fingerprint), None)
    if exact is not None or not title or length is None:
        return exact
    kind = content_type.split(";")[0].strip().lower()
    shaped = [
        p
        for p in known_pages()
        if p.status == status
        and p.title == title
        and p.content_type.split(";")[0].strip().lower() == kind
        and not (product and p.server and product != p.server)
        and abs(p.length - length) <= LENGTH_BAND * max(p.length, 1)
    ]
    return min(shaped, key=lambda p: abs(p.length - length), default=None)


def is_gateway_refusal(status: int | None, content_type: str, fingerprint: str, *, dropped: bool) -> bool:
    """Whether an answer is a gateway's refusal rather than something that passed through it."""
    if dropped:
        return True
    if status is None or status < 400:
        return False
    return (
        status in GATEWAY_STATUSES
        or (status == 403 and "html" in content_type.lower())
        or known_page(status, fingerprint) is not None
    )
