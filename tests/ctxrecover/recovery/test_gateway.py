"""The gateway model (SPEC §11): evidence of accepted and rejected sizes, verdicts, the cap interval.

Unit tests of the frozen value and a hypothesis state machine of its invariants; the
session-level scenarios of the issue live in tests/ctxrecover/test_gateway_e2e.py.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import httpx
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ctxrecover.classify import Failure, FailureKind, classify
from ctxrecover.errors import ConfigError
from ctxrecover.policy import CAP_STRATEGIES, DEFAULT_POLICY, Policy
from ctxrecover.recovery import (
    CAP_TARGETS,
    GatewayModel,
    Verdict,
    body_key,
    cap_notice,
    failure_signature,
    is_ambiguous,
    is_header_fault,
    page_fingerprint,
    response_text,
)
from ctxrecover.sizes import MIB
from ctxrecover.transport import SendFailed

LEARNED = (
    "ℹ Gateway rejected a %s request — payload cap set to %s for this session "
    "(export CHATCLI_MAX_PAYLOAD to override)"
)
ASSUMED = "ℹ Assuming 4 MB payload cap — export CHATCLI_MAX_PAYLOAD (e.g. 5MB, 512KB) to adjust"
LIFTED = "ℹ Gateway accepted a %s request — the learned payload cap (%s) is lifted for this session"
WAF_PAGE = "<html><head><title>403 Forbidden</title></head><body>Request blocked. Ray ID: %s</body></html>"
REJECTED = 129_434  # the seed's 126.4 KB request


def waf(size: int | None = None) -> Failure:
    return classify(
        status=403, body=WAF_PAGE % "8a1b2c3d4e5f", headers={"content-type": "text/html"}, request_bytes=size
    )


def nginx_413(size: int | None = None) -> Failure:
    return classify(
        status=413, body="<html><title>413 Request Entity Too Large</title></html>", request_bytes=size
    )


def reset(size: int | None = None, history: int = 1_000, large: int = 500_000) -> Failure:
    error = SendFailed("ReadError", request_bytes=size or 0)
    error.__cause__ = httpx.ReadError("[Errno 104] Connection reset by peer")
    return classify(error, request_bytes=size, history_chars=history, large_history_chars=large)


def judge(
    model: GatewayModel,
    failure: Failure,
    size: int | None,
    policy: Policy = DEFAULT_POLICY,
    body: str | None = None,
):
    return model.judge(failure, request_bytes=size, policy=policy, body=body)


# -- size-consistent rejections and the cap interval -------------------------------------------------


def test_a_first_rejection_learns_three_quarters_of_its_size_and_says_so() -> None:
    before = GatewayModel()
    judged = judge(before, nginx_413(REJECTED), REJECTED)
    assert judged.verdict is Verdict.SIZE_LIMIT
    assert judged.model.learned_cap == judged.model.effective_cap == REJECTED * 3 // 4 == 97_075
    assert judged.model.smallest_rejected == REJECTED
    assert judged.model.hard_limit == math.ceil(REJECTED * 0.995)  # less than 0.5% below: known to fail too
    notice = cap_notice(before, judged.model)
    assert notice is not None and notice.code == "learned_cap"
    assert notice.message == LEARNED % ("126.4 KB", "94.8 KB")
    assert cap_notice(judged.model, judged.model) is None  # once per change, never every turn


def test_the_cap_never_falls_below_the_largest_accepted_size() -> None:
    # corporate-128k-waf: 122 239 bytes passed, 131 008 were blocked; ¾ would say 98 256.
    model = GatewayModel().accepted(122_239, policy=DEFAULT_POLICY)
    judged = judge(model, waf(131_008), 131_008)
    assert judged.verdict is Verdict.BLOCK  # the size reading, once the turn's experiment shows it
    assert judged.model.learned_cap == 122_239
    assert judged.model.largest_accepted <= judged.model.learned_cap < judged.model.smallest_rejected


def test_the_interval_tightens_only_from_below_the_smallest_rejection() -> None:
    model = judge(GatewayModel(), nginx_413(REJECTED), REJECTED).model
    same = judge(model, nginx_413(200_000), 200_000).model
    assert same.learned_cap == 97_075 and same.smallest_rejected == REJECTED
    assert cap_notice(model, same) is None
    tighter = judge(model, nginx_413(100_000), 100_000).model
    assert tighter.learned_cap == 75_000 and tighter.smallest_rejected == 100_000
    notice = cap_notice(model, tighter)
    assert notice is not None and notice.message == LEARNED % ("97.7 KB", "73.2 KB")


def test_the_cap_rises_when_larger_requests_pass() -> None:
    model = judge(GatewayModel(), nginx_413(REJECTED), REJECTED).model
    below = model.accepted(90_000, policy=DEFAULT_POLICY)
    assert below.learned_cap == 97_075  # ¾ still holds above what passed
    above = below.accepted(110_000, policy=DEFAULT_POLICY)
    assert above.learned_cap == 110_000 and above.largest_accepted == 110_000
    notice = cap_notice(below, above)
    assert notice is not None and notice.message == LEARNED % ("126.4 KB", "107.4 KB")
    # the session says it when a rejection moves the cap; a rise from an accepted request is silent,
    # or requests that grow turn by turn would repeat the rejection's notice every turn
    assert cap_notice(below, above, accepted=True) is None

    lifted = above.accepted(REJECTED + 1, policy=DEFAULT_POLICY)
    assert lifted.learned_cap is None
    lift = cap_notice(above, lifted, accepted=True)
    assert lift is not None and lift.message.startswith("ℹ Gateway accepted a 126.4 KB request")


def test_a_cap_move_too_small_to_show_is_not_announced_again() -> None:
    first = judge(GatewayModel(), nginx_413(200_000), 200_000).model
    hair = judge(first, nginx_413(199_990), 199_990).model
    assert (first.learned_cap, hair.learned_cap) == (150_000, 149_992)  # both "146.5 KB"
    assert cap_notice(first, hair) is None
    lower = judge(hair, nginx_413(150_000), 150_000).model
    notice = cap_notice(hair, lower)
    assert notice is not None and notice.message == LEARNED % ("146.5 KB", "109.9 KB")


def test_a_request_accepted_at_or_above_a_rejection_lifts_that_evidence() -> None:
    model = judge(GatewayModel(), nginx_413(REJECTED), REJECTED).model
    lifted = model.accepted(REJECTED, policy=DEFAULT_POLICY)
    assert lifted.rejections == () and lifted.learned_cap is None and lifted.hard_limit is None
    notice = cap_notice(model, lifted)
    assert notice is not None and notice.message == LIFTED % ("126.4 KB", "94.8 KB")


def test_each_signature_keeps_its_own_smallest_rejection_and_the_cap_reads_the_smallest() -> None:
    model = judge(GatewayModel(), nginx_413(REJECTED), REJECTED).model
    model = judge(model, waf(110_000), 110_000, body=WAF_PAGE % "x1").model
    assert len(model.rejections) == 2 and model.smallest_rejected == 110_000
    assert model.learned_cap == 82_500


def test_bisection_takes_the_midpoint_and_settles_on_the_largest_accepted_size() -> None:
    policy = Policy(cap_strategy="bisection")
    model = GatewayModel.from_policy(policy).accepted(100_000, policy=policy)
    model = judge(model, waf(140_000), 140_000, policy).model
    assert model.learned_cap == 120_000
    model = model.accepted(119_000, policy=policy)
    assert model.learned_cap == 129_500
    model = judge(model, waf(121_000), 121_000, policy).model
    assert model.learned_cap == 119_000  # 121 000 - 119 000 <= 2 % of 121 000


def test_the_none_strategy_records_evidence_but_learns_no_cap() -> None:
    policy = Policy(cap_strategy="none")
    judged = judge(GatewayModel.from_policy(policy), nginx_413(REJECTED), REJECTED, policy)
    assert judged.verdict is Verdict.SIZE_LIMIT and judged.model.smallest_rejected == REJECTED
    assert judged.model.learned_cap is None and judged.model.hard_limit is None
    assert not judged.model.known_too_large(10 * REJECTED)
    assert judge(GatewayModel.from_policy(policy), nginx_413(), None, policy).model.learned_cap is None


def test_every_policy_strategy_has_a_target() -> None:
    assert set(CAP_TARGETS) == set(CAP_STRATEGIES)


def test_known_too_large_is_at_or_above_the_smallest_rejection_less_the_resolution() -> None:
    model = judge(GatewayModel(), nginx_413(REJECTED), REJECTED).model
    assert model.known_too_large(REJECTED) and model.known_too_large(REJECTED + 1)
    near = math.ceil(REJECTED * (1 - DEFAULT_POLICY.retry_min_reduction))  # 647 bytes off: learns nothing
    assert model.known_too_large(near) and not model.known_too_large(near - 1)
    exact = judge(GatewayModel(resolution=0.0), nginx_413(REJECTED), REJECTED).model
    assert exact.known_too_large(REJECTED) and not exact.known_too_large(REJECTED - 1)
    assert not GatewayModel().known_too_large(10**9)


def test_the_resolution_never_reaches_below_what_passed() -> None:
    model = GatewayModel().accepted(REJECTED - 10, policy=DEFAULT_POLICY)
    judged = judge(model, nginx_413(REJECTED), REJECTED).model
    assert judged.hard_limit == REJECTED - 9  # the accepted size is never known to fail
    assert not judged.known_too_large(REJECTED - 10)


def test_the_resolution_comes_from_the_policy_and_is_validated() -> None:
    assert GatewayModel.from_policy(Policy(retry_min_reduction=0.05)).resolution == 0.05
    with pytest.raises(ConfigError, match="GatewayModel.resolution must be a fraction in"):
        GatewayModel(resolution=1.0)


def test_a_configured_cap_is_the_one_in_force_when_tighter_and_is_named_so() -> None:
    model = judge(GatewayModel.from_policy(Policy(payload_cap=50_000)), nginx_413(REJECTED), REJECTED).model
    assert (model.learned_cap, model.effective_cap, model.cap_source) == (97_075, 50_000, "configured")
    looser = judge(GatewayModel(configured_cap=5 * MIB), nginx_413(REJECTED), REJECTED).model
    assert (looser.effective_cap, looser.cap_source) == (97_075, "learned")
    assert GatewayModel().cap_source is None


def test_unknown_size_without_a_cap_assumes_4mb_once() -> None:
    before = GatewayModel()
    first = judge(before, nginx_413(), None)
    assert first.verdict is Verdict.SIZE_LIMIT and first.model.effective_cap == 4 * MIB
    assert first.model.assumed_cap
    notice = cap_notice(before, first.model)
    assert notice is not None and (notice.code, notice.message) == ("assumed_cap", ASSUMED)
    again = judge(first.model, nginx_413(), None)
    assert again.model == first.model
    with_cap = judge(GatewayModel(configured_cap=MIB), nginx_413(), None).model
    assert with_cap.learned_cap is None and with_cap.effective_cap == MIB
    assert first.model.accepted(5 * MIB, policy=DEFAULT_POLICY).learned_cap is None  # the guess was wrong


def test_judging_never_touches_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHATCLI_MAX_PAYLOAD", raising=False)
    before = dict(os.environ)
    judge(GatewayModel(), nginx_413(REJECTED), REJECTED)
    judge(GatewayModel(), nginx_413(), None)
    assert dict(os.environ) == before and Policy.from_env().payload_cap == 0


# -- content blocks, header faults, unrelated failures ---------------------------------------------


def test_a_rejection_at_or_below_an_accepted_size_is_a_content_block_and_moves_nothing() -> None:
    model = GatewayModel().accepted(96_000, policy=DEFAULT_POLICY)
    model = judge(model, waf(130_000), 130_000).model
    for size in (96_000, 40_000):
        judged = judge(model, waf(size), size)
        assert judged.verdict is Verdict.CONTENT_BLOCK
        assert judged.model.learned_cap == model.learned_cap and judged.model.rejections == model.rejections
        assert judged.model.content_blocks == model.content_blocks + 1
        assert cap_notice(model, judged.model) is None


@pytest.mark.parametrize(
    "failure",
    [
        Failure(FailureKind.PAYLOAD_TOO_LARGE, reason="header_431", status=400),
        classify(status=431, body="", request_bytes=20_000),
    ],
)
def test_a_header_fault_teaches_no_body_cap(failure: Failure) -> None:
    assert is_header_fault(failure)
    judged = judge(GatewayModel(), failure, 20_000)
    assert judged.verdict is Verdict.HEADER_FAULT
    assert judged.model.learned_cap is None and judged.model.rejections == ()
    assert judged.model.header_faults == 1


@pytest.mark.parametrize(
    "failure",
    [
        classify(status=400, body="prompt is too long: 250000 tokens > 200000 maximum"),
        classify(status=429, body="rate limit"),
        classify(status=401, body="invalid api key"),
        Failure(FailureKind.OUTPUT_LIMIT, output_limit_tokens=16_384),
        classify(httpx.ConnectError("[Errno 111] Connection refused")),
    ],
)
def test_failures_that_say_nothing_about_the_body_size_leave_the_model_alone(failure: Failure) -> None:
    judged = judge(GatewayModel(), failure, 150_000)
    assert judged.verdict is Verdict.UNRELATED and judged.model == GatewayModel()


# -- ambiguous failures: one plain retry, size evidence when they repeat -------------------------------


def test_a_reset_is_retried_once_and_becomes_size_evidence_when_it_repeats_at_or_above_its_size() -> None:
    model = GatewayModel().accepted(60_000, policy=DEFAULT_POLICY)
    first = judge(model, reset(150_000), 150_000)
    assert first.verdict is Verdict.RETRY and first.model.learned_cap is None
    assert [s.smallest_bytes for s in first.model.suspects] == [150_000]
    second = judge(first.model, reset(152_000), 152_000)
    assert second.verdict is Verdict.SIZE_LIMIT
    assert second.failure.kind is FailureKind.SUSPECTED_PAYLOAD and second.failure.recoverable
    assert second.failure.notice == (
        "⚠ Recoverable failure (suspected payload limit (network error repeated at 146.5 KB)) — "
        "compacting and retrying"
    )
    assert second.model.smallest_rejected == 150_000 and second.model.suspects == ()
    assert second.model.learned_cap == 112_500


def test_a_transient_reset_is_forgotten_when_the_same_size_passes() -> None:
    first = judge(GatewayModel(), reset(150_000), 150_000)
    passed = first.model.accepted(150_000, policy=DEFAULT_POLICY)
    assert passed.suspects == () and passed.learned_cap is None
    assert judge(passed, reset(151_000), 151_000).verdict is Verdict.RETRY  # a fresh first sighting


def test_a_smaller_repeat_lowers_the_suspect_without_confirming_it() -> None:
    first = judge(GatewayModel(), reset(150_000), 150_000)
    smaller = judge(first.model, reset(120_000), 120_000)
    assert smaller.verdict is Verdict.RETRY
    assert [(s.smallest_bytes, s.count) for s in smaller.model.suspects] == [(120_000, 2)]


def test_a_reset_below_an_accepted_size_is_a_plain_retry_never_a_content_block() -> None:
    model = GatewayModel().accepted(200_000, policy=DEFAULT_POLICY)
    judged = judge(model, reset(150_000), 150_000)
    assert judged.verdict is Verdict.RETRY and judged.model.suspects == ()


def test_a_reset_with_a_history_of_500_000_chars_is_size_evidence_at_once() -> None:
    judged = judge(GatewayModel(), reset(781_000, history=781_000), 781_000)
    assert judged.verdict is Verdict.SIZE_LIMIT and judged.model.smallest_rejected == 781_000
    assert judged.failure.kind is FailureKind.SUSPECTED_PAYLOAD
    # the threshold is classification's (a session passes its policy's): the model reads the kind
    low = judge(GatewayModel(), reset(200_000, history=150_000, large=100_000), 200_000)
    assert low.verdict is Verdict.SIZE_LIMIT
    assert low.failure.reason_text == "suspected payload limit (large history 146.5 KB + network error)"
    high = judge(GatewayModel(), reset(200_000, history=600_000, large=1_000_000), 200_000)
    assert high.verdict is Verdict.RETRY and high.failure.kind is FailureKind.TRANSIENT_NETWORK


ENVOY = "upstream connect error or disconnect/reset before headers. reset reason: connection termination"
OPENAI_503 = (
    '{"error": {"message": "The server had an error while processing your request.", "type": "server_error"}}'
)


@pytest.mark.parametrize(
    ("status", "body", "ambiguous"),
    [
        (503, ENVOY, True),
        (502, "<html><title>502 Bad Gateway</title></html>", True),
        (504, "", True),
        (503, OPENAI_503, False),
        (500, "<html>Internal Server Error</html>", False),
    ],
)
def test_a_gateway_5xx_is_ambiguous_unless_it_is_the_providers_json(
    status: int, body: str, ambiguous: bool
) -> None:
    failure = classify(status=status, body=body, request_bytes=150_000)
    assert failure.kind is FailureKind.TRANSIENT_NETWORK
    assert is_ambiguous(failure, body) is ambiguous
    verdict = judge(GatewayModel(), failure, 150_000, body=body).verdict
    assert verdict is (Verdict.RETRY if ambiguous else Verdict.UNRELATED)


def test_an_envoy_503_masking_a_413_becomes_size_evidence_on_the_second_one() -> None:
    failure = classify(status=503, body=ENVOY, request_bytes=160_000)
    first = judge(GatewayModel(), failure, 160_000, body=ENVOY)
    second = judge(first.model, failure, 160_000, body=ENVOY)
    assert (first.verdict, second.verdict) == (Verdict.RETRY, Verdict.SIZE_LIMIT)
    assert second.model.smallest_rejected == 160_000


def test_connect_phase_failures_are_never_size_evidence() -> None:
    for error in (httpx.ConnectError("refused"), httpx.ConnectTimeout("timed out"), httpx.PoolTimeout("x")):
        failure = classify(error, request_bytes=150_000)
        assert not is_ambiguous(failure), error


def test_an_unknown_size_reset_is_a_plain_transient_failure() -> None:
    judged = judge(GatewayModel(), reset(), None)
    assert judged.verdict is Verdict.UNRELATED and judged.model == GatewayModel()


# -- signatures, fingerprints, refused bodies --------------------------------------------------------


def test_the_same_page_with_different_request_ids_has_one_fingerprint() -> None:
    one, two = WAF_PAGE % "8a1b2c3d4e5f", WAF_PAGE % "77f0e1d2c3b4"
    assert page_fingerprint(one) == page_fingerprint(two) != ""
    assert page_fingerprint(one) != page_fingerprint("<html><title>Access Denied</title></html>")
    assert page_fingerprint("Request 12345 blocked") == page_fingerprint("Request 67890 blocked")
    assert page_fingerprint(None) == page_fingerprint("") == ""


def test_signatures_tell_kind_status_and_page_apart_and_fold_network_phases() -> None:
    assert failure_signature(waf(), WAF_PAGE % "1") == failure_signature(waf(), WAF_PAGE % "2")
    assert failure_signature(waf(), WAF_PAGE % "1") != failure_signature(nginx_413(), WAF_PAGE % "1")
    dropped = [classify(e, request_bytes=9) for e in (httpx.ReadError("x"), httpx.RemoteProtocolError("y"))]
    assert failure_signature(dropped[0]) == failure_signature(dropped[1]) == "network-drop:-:"
    assert failure_signature(classify(httpx.WriteTimeout("timed out"))) == "network-timeout:-:"


def test_bodies_that_differ_only_by_recall_keys_share_a_key() -> None:
    one = b'{"messages":[{"content":"see <<ccr:0123456789abcdef>> and <<ccr:fedcba9876543210>>"}]}'
    two = b'{"messages":[{"content":"see <<ccr:aaaaaaaaaaaaaaaa>> and <<ccr:bbbbbbbbbbbbbbbb>>"}]}'
    assert body_key(one) == body_key(two) != body_key(one.replace(b"see", b"saw"))


def test_refused_bodies_are_found_by_size_then_key_and_the_memory_is_bounded() -> None:
    model = GatewayModel().refuse("k1", 1_000, Verdict.SIZE_LIMIT)
    computed: list[str] = []

    def key(value: str):
        return lambda: computed.append(value) or value

    assert model.refusal(999, key("k1")) is None and computed == []  # another size: never hashed
    found = model.refusal(1_000, key("k1"))
    assert found is not None and found.verdict == "size_limit"
    assert model.refusal(1_000, key("k2")) is None
    for i in range(100):
        model = model.refuse(f"x{i}", i + 1, Verdict.CONTENT_BLOCK)
    assert len(model.refused) == 32 and model.refused[-1].key == "x99"


def test_retract_to_restores_the_earlier_evidence_and_keeps_the_counters() -> None:
    start = GatewayModel().accepted(96_000, policy=DEFAULT_POLICY)
    misread = judge(start, waf(97_000), 97_000).model.replace(payload_notice_sent=True)
    blocked = judge(misread, waf(95_000), 95_000).model
    restored = blocked.retract_to(start)
    assert restored.learned_cap is None and restored.rejections == () and not restored.payload_notice_sent
    assert restored.content_blocks == 1 and restored.largest_accepted == 96_000


# -- persistence and validation ----------------------------------------------------------------------


def test_the_model_round_trips_through_json() -> None:
    model = GatewayModel(configured_cap=MIB).accepted(60_000, policy=DEFAULT_POLICY)
    model = judge(model, reset(150_000), 150_000).model
    model = judge(model, waf(130_000), 130_000).model.refuse("abc", 130_000, Verdict.SIZE_LIMIT)
    model = model.replace(payload_notice_sent=True)
    assert GatewayModel.from_dict(json.loads(json.dumps(model.to_dict()))) == model


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"learned": 5}, "unknown field"),
        ({"strategy": "halving"}, "GatewayModel.strategy must be one of"),
        ({"largest_accepted": -1}, "GatewayModel.largest_accepted must be an int >= 0"),
        ({"learned_cap": 0}, "GatewayModel.learned_cap must be a positive int or None"),
        ({"rejections": [{"signature": "x"}]}, "field 'rejections' is malformed"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_bad_state_names_the_field(data: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        GatewayModel.from_dict(data)  # type: ignore[arg-type]


def test_response_text_reads_our_senders_and_sdk_errors() -> None:
    assert response_text(SendFailed("HTTP 403", request_bytes=1, status=403, body="<html>x</html>")) == (
        "<html>x</html>"
    )

    class SDKError(Exception):
        body = {"error": {"message": "overloaded"}}

    assert json.loads(response_text(SDKError()) or "") == {"error": {"message": "overloaded"}}
    wrapped = RuntimeError("wrapper")
    response = httpx.Response(503, text=ENVOY, request=httpx.Request("POST", "http://x"))
    inner = httpx.HTTPStatusError("503", request=response.request, response=response)
    wrapped.__cause__ = inner
    assert response_text(wrapped) == ENVOY
    assert response_text(None) is None and response_text(ValueError("no body")) is None


# -- invariants under random observation sequences (hypothesis stateful) ---------------------------


SIZES = st.integers(1_000, 2_000_000)  # request sizes; below a 1-byte rejection no cap can exist
SIGNATURE_BODIES = [WAF_PAGE % "1", "<html><title>413 Request Entity Too Large</title></html>", ENVOY, None]


class GatewayMachine(RuleBasedStateMachine):
    """Random accepted sizes, size rejections, content blocks, resets and 431s (¾ strategy)."""

    policy = DEFAULT_POLICY

    def __init__(self) -> None:
        super().__init__()
        self.model = GatewayModel.from_policy(self.policy)

    @rule(size=SIZES)
    def accept(self, size: int) -> None:
        if self.model.known_too_large(size):
            return  # the session never sends it
        before = self.model
        self.model = self.model.accepted(size, policy=self.policy)
        assert self.model.largest_accepted == max(before.largest_accepted, size)

    @rule(size=SIZES, page=st.sampled_from(SIGNATURE_BODIES[:2]), size_reading=st.booleans())
    def reject(self, size: int, page: str, size_reading: bool) -> None:
        if self.model.known_too_large(size):
            return
        status = 403 if "403" in page else 413
        failure = classify(status=status, body=page, headers={"content-type": "text/html"})
        before = self.model
        judged = judge(before, failure, size, self.policy, body=page)
        if size <= before.largest_accepted:
            assert judged.verdict is Verdict.CONTENT_BLOCK
            # content blocks never move the cap nor the evidence
            assert judged.model.learned_cap == before.learned_cap
            assert judged.model.rejections == before.rejections
        else:
            # a 413 says size; a WAF page is a block the turn's experiment settles (SPEC §12): the model
            # it returns is the size reading's, adopted only when the experiment confirms it
            assert judged.verdict is (Verdict.SIZE_LIMIT if status == 413 else Verdict.BLOCK)
            assert judged.model.smallest_rejected is not None and judged.model.smallest_rejected <= size
            if judged.verdict is Verdict.BLOCK and not size_reading:
                assert judged.model.learned_cap is not None  # what the size reading would teach
                return  # content: the turn keeps the model it had
        self.model = judged.model

    @rule(size=SIZES, envoy=st.booleans())
    def drop(self, size: int, envoy: bool) -> None:
        if self.model.known_too_large(size):
            return
        failure = classify(status=503, body=ENVOY) if envoy else reset(size)
        judged = judge(self.model, failure, size, self.policy, body=ENVOY if envoy else None)
        assert judged.verdict in (Verdict.RETRY, Verdict.SIZE_LIMIT)
        if judged.verdict is Verdict.RETRY:
            assert judged.model.learned_cap == self.model.learned_cap
        self.model = judged.model

    @rule(size=SIZES)
    def header_fault(self, size: int) -> None:
        judged = judge(self.model, classify(status=431, body=""), size, self.policy)
        assert judged.verdict is Verdict.HEADER_FAULT
        assert dataclasses.replace(judged.model, header_faults=self.model.header_faults) == self.model
        self.model = judged.model

    @invariant()
    def the_cap_sits_in_the_evidence_interval(self) -> None:
        model = self.model
        rejected = model.smallest_rejected
        if rejected is not None:
            assert model.largest_accepted < rejected
            assert model.learned_cap is not None
            assert model.largest_accepted <= model.learned_cap < rejected
            assert model.known_too_large(rejected) and not model.known_too_large(model.learned_cap)
        assert all(s.smallest_bytes > model.largest_accepted for s in model.suspects)


class BisectionMachine(GatewayMachine):
    """The same observations and invariants under the bisection strategy."""

    policy = Policy(cap_strategy="bisection")


MACHINE_SETTINGS = settings(max_examples=120, stateful_step_count=30, deadline=None)
TestGatewayMachine = GatewayMachine.TestCase
TestGatewayMachine.settings = MACHINE_SETTINGS
TestBisectionMachine = BisectionMachine.TestCase
TestBisectionMachine.settings = MACHINE_SETTINGS
