"""Is this response a gateway's own "the upstream failed, try again" page? Read from the page's structure.

A reverse proxy that cannot reach or read its upstream answers with its own page
at a gateway status (502/503/504, Cloudflare's 520–524): nginx "502 Bad Gateway",
HAProxy "No server is available to handle this request", Apache "Proxy Error —
Error reading from remote server", Squid's ERR_READ_ERROR / ERR_CONNECT_FAIL
("The system returned: (104) Connection reset by peer … Please retry your
request"), Caddy's empty 502. Such a page is a transient network failure (SPEC
§12 "Retry pages are not block pages"): never a block, auth or a size limit, even
when it names the vendor (a Squid page looks like Squid's ERR_ACCESS_DENIED) or
the system error it met (a "connection reset" between proxy and upstream is not
a reset of this request at a large history, §2.4). Whether a repeated failure at
a large size is a cap is the gateway model's question (§11), not the page's.

The reading needs a gateway status (the response's, or one its text states), no
provider JSON body, and an empty body, upstream-fault wording, or a page whose only
block signal is the vendor's name (a Squid page says "Squid", not "blocked"); without
any status, a page whose title or headings announce the fault. A block signal the
wording does not outweigh (a block header or code, a refusal sentence, a title
saying "blocked"/"denied", a block element id) keeps the page a block.

>>> from ctxrecover.classify.evidence import gather
>>> from ctxrecover.classify.blockpage import read_block
>>> page = gather(status=502, body="<html><body><h1>Read Error</h1><p>Please retry.</p></body></html>")
>>> retry_page(page, read_block(page))
'502 page: read error'
"""

from __future__ import annotations

import re

from ctxrecover.classify.blockpage import BlockReading
from ctxrecover.classify.evidence import Evidence

__all__ = ["GATEWAY_FAULT_STATUSES", "UPSTREAM_FAULT_PATTERNS", "retry_page"]

# Statuses a gateway answers when its upstream failed: RFC 9110 §15.6.3–15.6.5 (502 Bad Gateway, 503
# Service Unavailable, 504 Gateway Timeout); Cloudflare's 520–524 (origin errors, developers.cloudflare.com/
# support/troubleshooting/http-status-codes/cloudflare-5xx-errors/).
GATEWAY_FAULT_STATUSES: frozenset[int] = frozenset({502, 503, 504, 520, 521, 522, 523, 524})
# Wording of an upstream fault, as shapes over the lowercase visible text. Sources: nginx
# src/http/ngx_http_special_response.c (502/503/504 pages); HAProxy src/http_htx.c default errors ("the server
# returned an invalid or incomplete response", "no server is available to handle this request", "the server
# didn't respond in time"); Apache modules/proxy (502 "Proxy Error", "error reading from remote server", 503
# "temporarily unable to service your request"); Squid errors/templates (ERR_READ_ERROR, ERR_CONNECT_FAIL,
# ERR_READ_TIMEOUT, ERR_WRITE_ERROR, ERR_DNS_FAIL, ERR_ZERO_SIZE_OBJECT, ERR_GATEWAY_FAILURE: "the system
# returned: (errno) …", "please retry your request", "please try the request again"); Envoy ("upstream
# connect error or disconnect/reset before headers", "no healthy upstream").
UPSTREAM_FAULT_PATTERNS: tuple[str, ...] = (
    r"\bbad gateway\b",
    r"\bgateway time-?out\b",
    r"\bservice (?:temporarily )?unavailable\b",
    r"\bproxy (?:error|failure)\b",
    r"\b(?:read|write|socket|gateway|dns|connect(?:ion)?) (?:error|fail(?:ed|ure)?|time-?out)\b",
    r"\bconnection to \S+ failed\b",
    r"\b(?:error|unable|failed) (?:reading|writing|connecting) (?:from|to) (?:the )?(?:remote|origin)",
    r"\b(?:invalid|incomplete|empty|zero sized) (?:or incomplete )?(?:response|reply)\b",
    r"\bupstream\b",
    r"\bno (?:healthy )?(?:server|upstream|backend|origin)s? (?:is |are )?(?:available|reachable)\b",
    r"\bdidn'?t respond in time\b",
    r"\btemporarily unable to service\b",
    r"\bunable to (?:determine ip address|forward this request)\b",
    r"\bthe system returned:? \(\d+\)",
    r"\bplease (?:retry|try (?:the request |your request |again))",
)

_WORDING = tuple(re.compile(p) for p in UPSTREAM_FAULT_PATTERNS)


def _page_says_block(reading: BlockReading) -> bool:
    """A block signal a retry page's wording does not outweigh: strong, a block title, a block marker."""
    return reading.strong or (reading.block or "").startswith(("title:", "marker "))


def _wording(texts: list[str]) -> str | None:
    return next((m.group(0) for text in texts for p in _WORDING if (m := p.search(text))), None)


def retry_page(x: Evidence, reading: BlockReading) -> str | None:
    """``"<status> page: <wording>"`` (or ``"empty <status>"``) when ``x`` is a gateway's retry page.

    ``reading`` is :func:`~ctxrecover.classify.blockpage.read_block` of ``x``: a strong
    block signal, a block title or a block marker keeps the response a block. Without
    any status, only a page's own title or headings can announce an upstream fault.
    """
    said = x.status if x.status is not None else x.stated_status
    if said is not None and said not in GATEWAY_FAULT_STATUSES:
        return None
    if x.body_objects or _page_says_block(reading):
        return None
    if said is None:
        announced = _wording([line.lower() for page in x.pages for line in (page.title, *page.headings)])
        return f"page: {announced}" if announced else None
    if not x.text.strip():
        return None if x.has_error else f"empty {said}"
    found = _wording([x.text])
    if found:
        return f"{said} page: {found}"
    # A page whose only block signal is its vendor's name: at a gateway status, the status speaks.
    return f"{said} page of {reading.vendor}" if x.pages and reading.identity_only else None
