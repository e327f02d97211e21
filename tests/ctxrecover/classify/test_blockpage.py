"""Block pages by structure: vendor identity, block wording, fault pages — and what is never a block."""

from __future__ import annotations

import pytest

from ctxrecover.classify import FailureKind, classify
from ctxrecover.classify.blockpage import read_block
from ctxrecover.classify.evidence import gather
from ctxrecover.classify.fingerprints import VENDORS

K = FailureKind
# An invented vendor's page: no fingerprint knows it; only its structure (a title that refuses) counts.
UNKNOWN_VENDOR_PAGE = (
    "<html><head><title>Request Blocked - Acme Gateway</title></head><body><h1>Request blocked</h1>"
    "<p>Your request was blocked by the Acme security gateway. Incident: 0x5f3e</p></body></html>"
)
CLOUDFLARE_502 = (
    "<html><head><title>api.example.com | 502: Bad gateway</title></head><body><div id='cf-error-details'>"
    "<h1>Bad gateway</h1><span>Error code 502</span><p>Cloudflare Ray ID: 8d49989abc171ce8</p></div>"
    "</body></html>"
)


def test_every_vendor_row_cites_its_source() -> None:
    assert len({row.vendor for row in VENDORS}) == len(VENDORS)
    assert all(row.source.strip() and ("http" in row.source) for row in VENDORS)


def test_a_vendor_header_on_a_provider_json_is_identity_not_a_block() -> None:
    reading = read_block(
        gather(body='{"error": {"message": "Access denied"}}', headers={"cf-ray": "8d4-SJC"})
    )
    assert reading.vendor == "cloudflare"
    assert reading.block is None


@pytest.mark.parametrize("status", [200, 403, 406, 500, 502, 503, None])
def test_a_page_titled_with_a_refusal_is_a_block_at_any_status(status: int | None) -> None:
    failure = classify(status=status, body=UNKNOWN_VENDOR_PAGE)
    assert failure.kind is K.WAF_REJECTION, failure.evidence
    assert failure.reason == "waf_403"


def test_a_vendor_fault_page_keeps_its_status_meaning() -> None:
    reading = read_block(gather(body=CLOUDFLARE_502))
    assert reading.vendor == "cloudflare" and reading.fault and reading.block is None
    assert classify(status=502, body=CLOUDFLARE_502).kind is K.TRANSIENT_NETWORK
    assert classify(body=CLOUDFLARE_502).kind is K.TRANSIENT_NETWORK


def test_block_headers_and_vendor_block_codes_stand_alone() -> None:
    assert read_block(gather(headers={"x-sucuri-block": "EVA079"})).strong
    assert classify(status=503, body="", headers={"cf-mitigated": "challenge"}).kind is K.WAF_REJECTION
    assert classify(body="error code: 1020").kind is K.WAF_REJECTION
    assert classify(body="error code: 1015").kind is not K.WAF_REJECTION  # 1015 is Cloudflare's rate limit


def test_an_element_id_naming_a_block_is_structure_enough() -> None:
    page = (
        "<html><title>405</title><div id='block_message'></div><span id='block_traceid_tips'></span></html>"
    )
    assert classify(status=405, body=page).kind is K.WAF_REJECTION
    assert classify(status=200, body="<div class='d-block btn-block'>ok</div>").kind is not K.WAF_REJECTION


def test_weak_wording_needs_a_page_or_a_vendor_named_in_the_body() -> None:
    assert read_block(gather(body="Access denied due to invalid subscription key")).block is None
    assert read_block(gather(body="<html><h2>Access denied</h2></html>")).block
    assert read_block(gather(body="Request unsuccessful. Incapsula incident ID: 4850004-1091780")).block


def test_provider_content_filters_are_not_middlebox_blocks() -> None:
    body = (
        '{"type":"error","error":{"type":"invalid_request_error",'
        '"message":"Output blocked by content filtering policy"}}'
    )
    assert classify(status=400, body=body).kind is K.OTHER
    assert classify(body=body).kind is K.OTHER


def test_a_forward_proxy_asking_for_its_own_credentials_is_auth() -> None:
    page = (
        "<html><title>ERROR: Cache Access Denied</title><p>Sorry, you are not currently allowed to "
        "request it until you have authenticated yourself.</p></html>"
    )
    assert classify(status=407, body=page).kind is K.AUTH
    assert classify(body=page).kind is K.AUTH


@pytest.mark.parametrize("status", [400, None])
def test_a_provider_content_moderation_refusal_is_other_not_a_block(status: int | None) -> None:
    body = "Your request was rejected as a result of our safety system. Your prompt may contain bad text."
    failure = classify(status=status, body=body)
    assert failure.kind is K.OTHER and "content policy" in failure.evidence
    # A named web filter is still a middlebox, even when it calls itself a content filter.
    assert classify(body='Content Blocked (content_filter_denied) Content Category: "Suspicious"').kind is (
        K.WAF_REJECTION
    )


@pytest.mark.parametrize(
    "title", ["Acesso Negado", "访问被拒绝", "Zugriff verweigert", "Доступ запрещен", "403 - 云防护"]
)
def test_block_titles_in_other_languages(title: str) -> None:
    page = f"<!DOCTYPE html><html><head><title>{title}</title></head><body><p>...</p></body></html>"
    assert classify(body=page).kind is K.WAF_REJECTION
