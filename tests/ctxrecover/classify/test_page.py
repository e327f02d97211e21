"""HTML reduction: what a page shows reaches phrase matching; its machinery never does."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover.classify import FailureKind, classify
from ctxrecover.classify.evidence import gather
from ctxrecover.classify.page import MARKUP, reduce_html

PAGES = Path(__file__).parents[3] / "fixtures" / "pages"
# Cloudflare Web Analytics' beacon as the edge injects it into HTML it serves: JSON inside an attribute
# (https://developers.cloudflare.com/analytics/web-analytics/changelog/ for beacon.min.js; the
# data-cf-beacon '{"token": ...}' form as in https://github.com/nuxt-hub/core/commit/92381d8).
BEACON = (
    '<script defer src="https://static.cloudflareinsights.com/beacon.min.js" '
    'data-cf-beacon=\'{"rayId":"8c2d3e4f5a6b7c8d","token":"4ce6c2a9d3b54d1d","version":"2024.3.0",'
    '"si":100}\'></script>'
)


def test_scripts_styles_comments_and_attributes_never_reach_the_text() -> None:
    page = reduce_html(
        "<html><head><title>Blocked</title><style>.token{max-width:1px} /* exceed */</style>"
        "<script>var context = {tokens: 'exceeds the maximum'};</script></head><body>"
        "<!-- prompt is too long --><div data-x='{\"token\": 1}' class='context-limit'>Visible words</div>"
        "</body></html>"
    )
    assert page.title == "Blocked"
    assert page.text == "Visible words"
    assert "div.class=context-limit" in page.markers


def test_title_headings_entities_and_text_outside_the_markup_are_kept() -> None:
    page = reduce_html("Error code: 403 - <html><h1>Access&nbsp;Denied</h1><p>Reference&#32;#18.1</p></html>")
    assert page.headings == ("Access Denied",)
    assert page.text.splitlines() == ["Error code: 403 -", "Access Denied", "Reference #18.1"]


def test_style_urls_are_markers_even_when_the_style_never_closes() -> None:
    page = reduce_html("<title>405</title><style>.m{background:url('https://errors.aliyun.com/x.png')")
    assert "style.url=https://errors.aliyun.com/x.png" in page.markers


def test_a_cloudflare_413_page_with_its_beacon_json_is_payload_not_overflow() -> None:
    html = (PAGES / "413-cloudflare.html").read_text(encoding="utf-8").replace("</body>", BEACON + "</body>")
    assert '"token"' in html
    evidence = gather(body=html)
    assert "token" not in evidence.text
    for status in (413, None):
        failure = classify(status=status, body=html, headers={"content-type": "text/html"})
        assert failure.kind is FailureKind.PAYLOAD_TOO_LARGE
        assert failure.reason == "payload_413"


def test_markup_detection_needs_a_tag_not_a_comparison() -> None:
    assert MARKUP.search("<html><body>x</body></html>")
    assert not MARKUP.search("prompt is too long: 250000 tokens > 200000 maximum")
    assert not MARKUP.search("invalid character '<' looking for beginning of value")


@settings(max_examples=150)
@given(st.text(alphabet=st.sampled_from(list("<>/!-='\" abcdhtmlsript{}:")), max_size=300))
def test_reduction_never_raises_on_broken_markup(markup: str) -> None:
    page = reduce_html(markup)
    assert isinstance(page.text, str) and isinstance(page.title, str)
