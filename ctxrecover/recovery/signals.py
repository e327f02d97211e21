"""Reading a failed exchange for the gateway model (SPEC §11): header faults, ambiguity, signatures.

What the classified :class:`~ctxrecover.classify.Failure` does not say but the model needs:
whether a network failure may hide a body-size limit (a drop or a timeout after the
body started, a 502/503/504 that is not the provider's JSON), a signature that groups
the same failure from the same page (kind, status, page fingerprint), the body a
failure carries, and a key of a request body with recall keys normalised.

>>> page_fingerprint("<html><title>403 Forbidden</title>Ray ID 8a1b</html>") == page_fingerprint(
...     "<html><title>403 Forbidden</title>Ray ID 77f0</html>")
True
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping

from ctxrecover.classify import Failure, FailureKind

__all__ = [
    "body_key",
    "failure_signature",
    "is_ambiguous",
    "is_header_fault",
    "page_fingerprint",
    "response_text",
]

HEADER_FAULT_STATUS = 431
HEADER_FAULT_REASON = "header_431"
#: Gateway statuses that may hide an upstream body-size rejection (RFC 9110 §15.6.3-15.6.5: bad
#: gateway, unavailable, gateway timeout); e.g. Envoy answers an upstream reset with a 503
#: "upstream connect error or disconnect/reset before headers" (Envoy docs, response flags UC/UF).
AMBIGUOUS_STATUSES = frozenset({502, 503, 504})
#: Failures before any body byte left: their size says nothing about the body. Rows: httpx's
#: ConnectError, ConnectTimeout, PoolTimeout, ProxyError (httpx/_exceptions.py), and the OS texts of
#: ECONNREFUSED, ENETUNREACH, EHOSTUNREACH and getaddrinfo failures (glibc, macOS libc).
CONNECT_PHASE_MARKERS = (
    "connecterror",
    "connecttimeout",
    "pooltimeout",
    "proxyerror",
    "connection refused",
    "network is unreachable",
    "no route to host",
    "name or service not known",
    "nodename nor servname",
    "getaddrinfo",
)
TIMEOUT_MARKERS = ("timeout", "timed out")
FINGERPRINT_CHARS = 512
FINGERPRINT_HEX = 8
BODY_KEY_HEX = 16
MAX_CHAIN = 16
RECALL_KEY_BYTES_RE = re.compile(rb"<<ccr:[0-9a-f]{16}>>")
RECALL_KEY_PLACEHOLDER = b"<<ccr:*>>"
TITLE_RE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
TAG_RE = re.compile(r"<[^>]*>")
VOLATILE_RE = re.compile(r"[\w.:-]*\d[\w.:-]*")  # request ids, ray ids, timestamps, sizes
SPACE_RE = re.compile(r"\s+")


def is_header_fault(failure: Failure) -> bool:
    """True for a header fault: reason ``header_431`` or status 431 (SPEC §11)."""
    return failure.reason == HEADER_FAULT_REASON or failure.status == HEADER_FAULT_STATUS


def _is_provider_json(body: str | None) -> bool:
    text = (body or "").strip()
    if not text.startswith("{"):
        return False
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def is_ambiguous(failure: Failure, body: str | None = None) -> bool:
    """True for a failure that may hide a body-size limit: a drop or timeout after the body
    started, or a 502/503/504 whose body is not the provider's JSON (SPEC §11)."""
    if failure.kind is FailureKind.SUSPECTED_PAYLOAD:
        return True
    if failure.kind is not FailureKind.TRANSIENT_NETWORK:
        return False
    if failure.status is None:
        evidence = failure.evidence.lower()
        return not any(marker in evidence for marker in CONNECT_PHASE_MARKERS)
    return failure.status in AMBIGUOUS_STATUSES and not _is_provider_json(body)


def page_fingerprint(body: str | None) -> str:
    """A short hash of the page a gateway answered with: its HTML title, else its text,
    lower-cased, with numbers and ids folded, so the same page gives the same print."""
    text = body or ""
    title = TITLE_RE.search(text)
    text = title.group(1) if title else TAG_RE.sub(" ", text)
    text = SPACE_RE.sub(" ", VOLATILE_RE.sub("#", text.lower())).strip()[:FINGERPRINT_CHARS]
    return hashlib.sha256(text.encode()).hexdigest()[:FINGERPRINT_HEX] if text else ""


def failure_signature(failure: Failure, body: str | None = None) -> str:
    """``kind:status:fingerprint``; network failures are one family per phase (drop or timeout)."""
    family = failure.kind.value
    if failure.kind in (FailureKind.TRANSIENT_NETWORK, FailureKind.SUSPECTED_PAYLOAD):
        evidence = failure.evidence.lower()
        family = "network-timeout" if any(m in evidence for m in TIMEOUT_MARKERS) else "network-drop"
    status = "-" if failure.status is None else str(failure.status)
    return f"{family}:{status}:{page_fingerprint(body)}"


def response_text(error: BaseException | None) -> str | None:
    """The response body an exception carries (``body`` or ``response.text``), through its cause chain."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < MAX_CHAIN:
        seen.add(id(current))
        body = getattr(current, "body", None)
        if isinstance(body, bytes):
            return body.decode("utf-8", "replace")
        if isinstance(body, str) and body:
            return body
        if isinstance(body, Mapping | list):
            return json.dumps(body)
        response = getattr(current, "response", None)
        try:
            text = getattr(response, "text", None)
        except Exception:  # a streamed response that was never read
            text = None
        if isinstance(text, str) and text:
            return text
        current = current.__cause__ or current.__context__
    return None


def body_key(body: bytes) -> str:
    """A hash of a request body with every ``<<ccr:KEY>>`` recall key replaced by a placeholder:
    two bodies that differ only by fresh recall keys get the same key."""
    normalised = RECALL_KEY_BYTES_RE.sub(RECALL_KEY_PLACEHOLDER, body)
    return hashlib.sha256(normalised).hexdigest()[:BODY_KEY_HEX]
