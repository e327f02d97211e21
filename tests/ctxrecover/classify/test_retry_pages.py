"""Retry pages are transient (SPEC §12): a gateway's own "the upstream failed, try again" page at 502/503/504.

Never a block, auth, other or a size limit — whatever vendor the page names, whatever system error it
quotes, whatever the history's size — while a block page served at a gateway status stays a block.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ctxrecover.classify import FailureKind, classify

ROOT = Path(__file__).resolve().parents[3]
PAGES = ROOT / "fixtures" / "pages"
CAPTURED = json.loads((PAGES / "captured.json").read_text(encoding="utf-8"))
GATEWAY_PAGES = sorted(p.name for p in PAGES.iterdir() if re.match(r"5(?:0[234]|2\d)-", p.name))
LARGE_HISTORY = (
    600_000  # over SPEC §2.4's 500 000 chars: a reset of *this* request would be a suspected payload
)
SQUID_TEMPLATES = Path("/usr/share/squid/errors/en")
# Squid's error pages for an upstream it could not reach or read, with the status Squid answers them with
# (squid-cache/squid src/errorpage.cc and the ERR_* call sites of src/FwdState.cc, src/http.cc).
# ERR_CANNOT_FORWARD is not one: it lists "permission denied" (an element id) among its causes.
SQUID_UPSTREAM_FAULTS = {
    "ERR_CONNECT_FAIL": 503,
    "ERR_READ_ERROR": 502,
    "ERR_READ_TIMEOUT": 504,
    "ERR_WRITE_ERROR": 502,
    "ERR_ZERO_SIZE_OBJECT": 502,
    "ERR_DNS_FAIL": 503,
    "ERR_GATEWAY_FAILURE": 502,
    "ERR_SHUTTING_DOWN": 503,
    "ERR_SOCKET_FAILURE": 500,
    "ERR_INVALID_RESP": 502,
}
SQUID_HEADERS = {"content-type": "text/html;charset=utf-8", "server": "squid/5.7"}


def _page(name: str) -> tuple[int, str, dict[str, str]]:
    return (
        int(name[:3]),
        (PAGES / name).read_text(encoding="utf-8"),
        CAPTURED.get(name, {}).get("headers", {}),
    )


@pytest.mark.parametrize("history_chars", [None, LARGE_HISTORY])
@pytest.mark.parametrize("name", GATEWAY_PAGES)
def test_each_bundled_gateway_page_is_transient_at_any_history(name: str, history_chars: int | None) -> None:
    status, body, headers = _page(name)
    failure = classify(
        status=status, body=body, headers=headers, request_bytes=140_000, history_chars=history_chars
    )
    assert failure.kind is FailureKind.TRANSIENT_NETWORK, f"{name}: {failure.evidence}"


def test_squids_read_error_behind_a_large_history_is_no_suspected_payload() -> None:
    """The "(104) Connection reset by peer" is between Squid and its upstream, not this request's drop."""
    status, body, headers = _page("502-squid.html")
    failure = classify(status=status, body=body, headers=headers, history_chars=LARGE_HISTORY)
    assert (failure.kind, failure.evidence) == (FailureKind.TRANSIENT_NETWORK, "502 page: read error")


@pytest.mark.parametrize(
    "system_error",
    [
        "(104) Connection reset by peer",
        "(32) Broken pipe",
        "[No Error]",
        "(0) No error.",
        "(113) No route to host",
    ],
)
@pytest.mark.parametrize("status", [502, 503])
def test_squids_read_error_is_transient_whatever_system_error_it_names(
    system_error: str, status: int
) -> None:
    _, body, headers = _page("502-squid.html")
    body = body.replace("(104) Connection reset by peer", system_error)
    assert system_error in body
    failure = classify(status=status, body=body, headers={**headers, "x-squid-error": "ERR_READ_ERROR 0"})
    assert (failure.kind, failure.evidence) == (FailureKind.TRANSIENT_NETWORK, f"{status} page: read error")


def _render_squid(template: str) -> str:
    """A Squid template with its %-codes filled as Squid fills them (errors/templates, src/errorpage.cc)."""
    values = {
        "U": "http://127.0.0.1/v1/chat/completions",
        "I": "127.0.0.1",
        "E": "(111) Connection refused",
        "H": "127.0.0.1",
        "z": "DNS domain '127.0.0.1' is invalid",
        "R": "[unknown method]",
        "w": "webmaster",
        "W": "",
        "T": "Wed, 02 Dec 2026 01:39:31 GMT",
        "h": "ctxsim-squid",
        "s": "squid/5.7",
        "l": "",
    }
    text = (SQUID_TEMPLATES / template).read_text(encoding="utf-8")
    return re.sub(
        r"%([a-zA-Z])", lambda m: values.get(m.group(1), template if m.group(1) == "c" else ""), text
    )


needs_squid_templates = pytest.mark.skipif(
    not SQUID_TEMPLATES.is_dir(), reason="needs Debian's squid-common (its English error templates)"
)


@needs_squid_templates
@pytest.mark.parametrize("template", sorted(SQUID_UPSTREAM_FAULTS))
def test_squids_own_upstream_fault_pages_are_transient(template: str) -> None:
    status = SQUID_UPSTREAM_FAULTS[template]
    headers = {**SQUID_HEADERS, "x-squid-error": f"{template} 111"}
    for history_chars in (None, LARGE_HISTORY):
        failure = classify(
            status=status, body=_render_squid(template), headers=headers, history_chars=history_chars
        )
        assert failure.kind is FailureKind.TRANSIENT_NETWORK, f"{template} at {status}: {failure.evidence}"


@needs_squid_templates
def test_squids_access_denied_page_with_the_same_title_stays_a_block() -> None:
    headers = {**SQUID_HEADERS, "x-squid-error": "ERR_ACCESS_DENIED 0"}
    failure = classify(status=403, body=_render_squid("ERR_ACCESS_DENIED"), headers=headers)
    assert failure.kind is FailureKind.WAF_REJECTION


def test_an_empty_502_is_the_gateway_saying_the_upstream_failed() -> None:
    """Caddy's answer to an unreachable upstream and to an over-cap body alike: one plain retry (§11 decides
    whether a repeated one at that size is a cap)."""
    failure = classify(status=502, body=b"", headers={"server": "Caddy"}, request_bytes=140_000)
    assert (failure.kind, failure.evidence) == (FailureKind.TRANSIENT_NETWORK, "empty 502")


@pytest.mark.parametrize(
    ("title", "evidence"),
    [
        ("502 Bad Gateway", "502 page: bad gateway"),  # the title states the status
        ("Bad Gateway", "page: bad gateway"),
        ("Gateway Timeout", "page: gateway timeout"),
    ],
)
def test_a_page_without_any_status_is_transient_when_its_title_announces_the_fault(
    title: str, evidence: str
) -> None:
    failure = classify(body=f"<html><head><title>{title}</title></head><body><h1>{title}</h1></body></html>")
    assert (failure.kind, failure.evidence) == (FailureKind.TRANSIENT_NETWORK, evidence)


BLOCKS_AT_GATEWAY_STATUSES = {
    "a block title": (
        "<html><head><title>Request Blocked</title></head><body>Please try again later.</body></html>"
    ),
    "a refusal sentence": (
        "<html><body><h1>503 Service Unavailable</h1><p>Your request has been blocked by the firewall."
        " Please retry your request.</p></body></html>"
    ),
    "a block element id": (
        "<html><body><div id='block_message'>upstream</div><p>Please try again.</p></body></html>"
    ),
}


@pytest.mark.parametrize("status", [502, 503, 504])
@pytest.mark.parametrize("shape", list(BLOCKS_AT_GATEWAY_STATUSES))
def test_a_block_page_served_at_a_gateway_status_stays_a_block(shape: str, status: int) -> None:
    failure = classify(status=status, body=BLOCKS_AT_GATEWAY_STATUSES[shape])
    assert failure.kind is FailureKind.WAF_REJECTION, failure.evidence


def test_a_providers_json_at_502_is_read_as_the_provider_wrote_it() -> None:
    body = {"error": {"message": "prompt is too long: 250000 tokens > 200000 maximum", "type": "upstream"}}
    assert classify(status=502, body=body).kind is FailureKind.CONTEXT_OVERFLOW


def test_a_dropped_connection_behind_a_large_history_is_still_a_suspected_payload() -> None:
    """SPEC §2.4 is unchanged for this request's own drop: only a gateway's page is a retry page."""
    failure = classify(ConnectionResetError("Connection reset by peer"), history_chars=LARGE_HISTORY)
    assert failure.kind is FailureKind.SUSPECTED_PAYLOAD
