"""classify(): SPEC §2 acceptance tables, guards, real client exceptions, totality."""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import anthropic
import httpx
import httpx2
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover.classify import Failure, FailureKind, classify
from ctxrecover.classify.tables import OUTPUT_TRUNCATION_STOP_REASONS
from ctxrecover.failure import RECOVERABLE_KINDS
from ctxrecover.sizes import format_payload_size

classify_module = importlib.import_module("ctxrecover.classify.decide")
inputs_module = importlib.import_module("ctxrecover.classify.evidence")
tables_module = importlib.import_module("ctxrecover.classify.tables")

K = FailureKind
BIG_HISTORY = 600_000
SMALL_HISTORY = 20_000
OPENAI_URL = "https://api.openai.com/v1/chat/completions"
ANTHROPIC_URL = "https://api.anthropic.com/v1/messages"
CLOUDFLARE_BLOCK = (
    "<!DOCTYPE html><html><head><title>Attention Required! | Cloudflare</title></head><body>"
    "<h1>Sorry, you have been blocked</h1><span>Cloudflare Ray ID: 8d49989abc171ce8</span></body></html>"
)
NGINX_403 = (
    "<html>\r\n<head><title>403 Forbidden</title></head>\r\n<body>\r\n<center><h1>403 "
    "Forbidden</h1></center>\r\n</body>\r\n</html>\r\n"
)


# -- SPEC §2.1 – §2.4 acceptance rows ------------------------------------------------------------

OVERFLOW_ROWS = [
    (
        "This model's maximum context length is 128000 tokens. However, your "
        "messages resulted in 130000 tokens.",
        400,
        K.CONTEXT_OVERFLOW,
    ),
    (
        "Your input exceeds the context window of this model. Please adjust your input and try again.",
        400,
        K.CONTEXT_OVERFLOW,
    ),
    ('{"error":{"code":"context_length_exceeded","message":"..."}}', 400, K.CONTEXT_OVERFLOW),
    ("prompt is too long: 250000 tokens > 200000 maximum", 400, K.CONTEXT_OVERFLOW),
    (
        "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
        400,
        K.CONTEXT_OVERFLOW,
    ),
    ("This request exceeds the maximum prompt length for the model.", 400, K.CONTEXT_OVERFLOW),
    (
        "Prompt contains 40000 tokens, too large for model with 32768 maximum context length",
        400,
        K.CONTEXT_OVERFLOW,
    ),
    ("ValidationException: Input is too long for requested model.", 400, K.CONTEXT_OVERFLOW),
    ("Please reduce the length of the messages or completion.", 400, K.CONTEXT_OVERFLOW),
    ("invalid request: total tokens 300k exceed what the model supports", 400, K.CONTEXT_OVERFLOW),
    ("Rate limit exceeded: too many requests, retry after 20s", 429, K.RATE_LIMIT),
    ("tokens per minute limit exceeded", 429, K.RATE_LIMIT),
    ("invalid api key", 401, K.AUTH),
    ("context deadline exceeded", None, K.TRANSIENT_NETWORK),
    ("unknown parameter: foo", 400, K.OTHER),
]


@pytest.mark.parametrize(("text", "status", "kind"), OVERFLOW_ROWS, ids=[r[0][:40] for r in OVERFLOW_ROWS])
def test_spec_2_1_overflow_rows(text: str, status: int | None, kind: FailureKind) -> None:
    assert classify(status=status, body=text).kind is kind


def test_spec_2_1_wrapped_413_naming_the_prompt_is_overflow() -> None:
    request = httpx.Request("POST", OPENAI_URL)
    response = httpx.Response(413, text="prompt length above the limit", request=request)
    inner = httpx.HTTPStatusError("Client error '413 Payload Too Large'", request=request, response=response)
    try:
        try:
            raise inner
        except httpx.HTTPStatusError as exc:
            raise RuntimeError("turn failed") from exc
    except RuntimeError as outer:
        failure = classify(outer)
    assert failure.kind is K.CONTEXT_OVERFLOW
    assert failure.status == 413
    assert failure.reason == "ctx_too_long"


@pytest.mark.parametrize(
    ("status", "label", "text"),
    [
        (413, "payload_413", "proxy/gateway payload limit (413/431)"),
        (431, "header_431", "request headers too large (431)"),  # SPEC §11: a header fault, not a body cap
    ],
)
def test_spec_2_2_status_413_431_is_payload(status: int, label: str, text: str) -> None:
    failure = classify(status=status, body="")
    assert failure.kind is K.PAYLOAD_TOO_LARGE
    assert (failure.reason, failure.reason_text) == (label, text)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (None, "431 Request Header Fields Too Large"),
        (400, "<html><head><title>400 Request Header Or Cookie Too Large</title></head></html>"),
        (400, "Size of a request header field exceeds server limit."),
        (None, "Error: HTTP 431"),
    ],
)
def test_spec_11_header_faults_are_labelled_header_431(status: int | None, body: str) -> None:
    failure = classify(status=status, body=body)
    assert failure.kind is K.PAYLOAD_TOO_LARGE
    assert failure.reason == "header_431"


@pytest.mark.parametrize(
    "text",
    [
        "413 Payload Too Large",
        "Request Entity Too Large",
        "http: request body too large",
        "413 Content Too Large",
        "request body exceeded the configured limit",
        "Request exceeds maximum request size",
        "431 Request Header Fields Too Large",
        "status 413",
        "StatusCode: 413",
        "HTTP 413",
        "HTTP/1.1 413",
        "upstream answered (413)",
    ],
)
def test_spec_2_2_payload_text_without_status(text: str) -> None:
    assert classify(body=text).kind is K.PAYLOAD_TOO_LARGE


@pytest.mark.parametrize(
    "text",
    [
        "14130 tokens",
        "the tool returned 14130 tokens",
        "found 413 files and 4311 lines",
        "see line 431 of main.py",
    ],
)
def test_spec_2_2_bare_number_inside_text_is_not_payload(text: str) -> None:
    assert classify(body=text).kind is not K.PAYLOAD_TOO_LARGE


def test_spec_2_2_anthropic_413_byte_cap_is_payload_not_overflow() -> None:
    body = {
        "type": "error",
        "error": {"type": "request_too_large", "message": "Request exceeds the maximum size"},
    }
    assert classify(status=413, body=body).kind is K.PAYLOAD_TOO_LARGE


WAF_ROWS = [
    ("403 Forbidden: invalid_api_key", K.AUTH),
    ("403 forbidden — blocked by firewall", K.WAF_REJECTION),
    ("HTTP 403: cloudflare challenge", K.WAF_REJECTION),
    (
        "operation error Bedrock Runtime: InvokeModel, https response error StatusCode: 403, RequestID: , "
        "deserialization failed, failed to decode response body, invalid character "
        "'<' looking for beginning of value",
        K.WAF_REJECTION,
    ),
    ("StatusCode: 403, invalid character '<' looking for beginning of value", K.WAF_REJECTION),
]


@pytest.mark.parametrize(("text", "kind"), WAF_ROWS, ids=[r[0][:40] for r in WAF_ROWS])
def test_spec_2_3_waf_rows(text: str, kind: FailureKind) -> None:
    assert classify(body=text).kind is kind


def test_spec_2_3_html_signal_without_403_is_not_waf() -> None:
    assert classify(body="deserialization failed, invalid character '<'").kind is not K.WAF_REJECTION


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({"content-type": "text/html; charset=UTF-8"}, "Forbidden"),
        (None, NGINX_403),
        (None, "  \n<!DOCTYPE html><html><body>denied</body></html>"),
        ({"cf-mitigated": "challenge"}, ""),
    ],
)
def test_spec_2_3_html_or_waf_header_on_403_is_waf(headers: dict[str, str] | None, body: str) -> None:
    assert classify(status=403, headers=headers, body=body).kind is K.WAF_REJECTION


@pytest.mark.parametrize(
    "body",
    [
        {
            "error": {
                "code": "unsupported_country_region_territory",
                "message": "Country, region, or territory not supported",
                "param": None,
                "type": "request_forbidden",
            }
        },
        '<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code></Error>',
        "",
    ],
)
def test_spec_2_3_403_without_signals_stays_auth(body: object) -> None:
    headers = {"content-type": "application/json", "server": "cloudflare", "cf-ray": "8a1b2c3d4e5f6789-FRA"}
    failure = classify(status=403, body=body, headers=headers)  # type: ignore[arg-type]
    assert failure.kind is K.AUTH
    assert not failure.recoverable


EOF_TEXTS = [
    "unexpected EOF",
    "read tcp 10.0.0.5:52314->52.1.2.3:443: read: connection reset by peer",
    "write: broken pipe",
    "stream error: stream ID 3; INTERNAL_ERROR",
    "EOF",
    'Post "https://bedrock-runtime.us-east-1.amazonaws.com/model/x/converse": EOF',
]


@pytest.mark.parametrize("text", EOF_TEXTS)
def test_spec_2_4_eof_with_big_history_is_suspected_payload(text: str) -> None:
    failure = classify(body=text, history_chars=BIG_HISTORY)
    assert failure.kind is K.SUSPECTED_PAYLOAD
    assert failure.reason == "suspected_payload"
    assert failure.recoverable and failure.is_payload


@pytest.mark.parametrize("text", EOF_TEXTS)
def test_spec_2_4_eof_with_small_history_is_transient(text: str) -> None:
    failure = classify(body=text, history_chars=SMALL_HISTORY)
    assert failure.kind is K.TRANSIENT_NETWORK
    assert not failure.recoverable


def test_spec_2_4_threshold_is_500_000_chars() -> None:
    assert classify(body="unexpected EOF", history_chars=499_999).kind is K.TRANSIENT_NETWORK
    assert classify(body="unexpected EOF", history_chars=500_000).kind is K.SUSPECTED_PAYLOAD


@pytest.mark.parametrize(("status", "body"), [(413, ""), (403, CLOUDFLARE_BLOCK)])
def test_spec_2_4_payload_and_waf_regardless_of_history(status: int, body: str) -> None:
    for history in (0, SMALL_HISTORY, BIG_HISTORY):
        assert classify(status=status, body=body, history_chars=history).is_payload


def test_timeouts_are_transient_even_with_big_history() -> None:
    assert classify(body="The read operation timed out", history_chars=5_000_000).kind is K.TRANSIENT_NETWORK


# -- §2.5 labels, texts, notice --------------------------------------------------------------------

REASON_ROWS = [
    (dict(status=413, body=""), "payload_413", "proxy/gateway payload limit (413/431)"),
    (dict(status=403, body=CLOUDFLARE_BLOCK), "waf_403", "proxy/WAF rejection (403 + security signals)"),
    (
        dict(body="connection reset by peer", history_chars=BIG_HISTORY),
        "suspected_payload",
        "suspected payload limit (large history 585.9 KB + network error)",
    ),
    (
        dict(status=400, body="prompt is too long: 250000 tokens > 200000 maximum"),
        "ctx_too_long",
        "context too long",
    ),
]


@pytest.mark.parametrize(("kwargs", "label", "text"), REASON_ROWS, ids=[r[1] for r in REASON_ROWS])
def test_spec_2_5_reason_labels_texts_and_notice(kwargs: dict[str, object], label: str, text: str) -> None:
    failure = classify(**kwargs)  # type: ignore[arg-type]
    assert failure.reason == label
    assert failure.reason_text == text
    assert failure.notice == f"⚠ Recoverable failure ({text}) — compacting and retrying"


def test_spec_2_5_suspected_text_formats_the_history_size() -> None:
    failure = classify(body="broken pipe", history_chars=3 * 1024 * 1024)
    assert (
        failure.reason_text
        == f"suspected payload limit (large history {format_payload_size(3 * 1024 * 1024)} + network error)"
    )
    assert failure.reason_text == "suspected payload limit (large history 3.0 MB + network error)"


def test_spec_2_5_payload_wins_over_overflow() -> None:
    text = "http: request body too large — the prompt is too long for the context window"
    assert classify(status=400, body=text).reason == "payload_413"
    assert classify(status=413, body=text).reason == "payload_413"


def test_spec_2_2_status_reason_phrase_alone_does_not_hide_a_token_overflow() -> None:
    text = "Client error '413 Payload Too Large': prompt is too long: 250000 tokens > 200000 maximum"
    assert classify(status=413, body=text).kind is K.CONTEXT_OVERFLOW
    assert classify(status=413, body="Client error '413 Payload Too Large'").kind is K.PAYLOAD_TOO_LARGE


KIND_PROPERTIES = [
    (K.CONTEXT_OVERFLOW, True, False),
    (K.PAYLOAD_TOO_LARGE, True, True),
    (K.WAF_REJECTION, True, True),
    (K.SUSPECTED_PAYLOAD, True, True),
    (K.MALFORMED_HISTORY, True, False),
    (K.OUTPUT_TRUNCATED, False, False),
    (K.OUTPUT_LIMIT, False, False),
    (K.BILLING, False, False),
    (K.AUTH, False, False),
    (K.RATE_LIMIT, False, False),
    (K.TRANSIENT_NETWORK, False, False),
    (K.OTHER, False, False),
    (K.OK, False, False),
]


@pytest.mark.parametrize(("kind", "recoverable", "is_payload"), KIND_PROPERTIES)
def test_recoverable_and_is_payload_by_kind(kind: FailureKind, recoverable: bool, is_payload: bool) -> None:
    failure = Failure(kind)
    assert failure.recoverable is recoverable
    assert failure.is_payload is is_payload


def test_kinds_without_reason_have_no_notice() -> None:
    for kwargs in (
        dict(status=429, body=""),
        dict(status=401, body=""),
        dict(status=400, body="roles must alternate"),
    ):
        failure = classify(**kwargs)  # type: ignore[arg-type]
        assert failure.reason is None and failure.reason_text is None and failure.notice is None


def test_failure_kind_values_are_the_spec_strings() -> None:
    assert [str(k) for k in FailureKind] == [
        "context_overflow",
        "payload_too_large",
        "waf_rejection",
        "suspected_payload",
        "malformed_history",
        "output_truncated",
        "output_limit",
        "policy_block",
        "content_refused",
        "billing",
        "auth",
        "rate_limit",
        "transient_network",
        "other",
        "ok",
    ]


# -- §2.6 stop reasons -------------------------------------------------------------------------------


def _doc_at(path: str, value: str) -> dict[str, object]:
    """A minimal successful response holding ``value`` at a table path (``a[].b`` / ``a.b``)."""
    node: object = value
    for part in reversed(path.split(".")):
        node = {part[:-2]: [node]} if part.endswith("[]") else {part: node}
    assert isinstance(node, dict)
    return node


@pytest.mark.parametrize(("wire", "path", "value"), OUTPUT_TRUNCATION_STOP_REASONS)
def test_spec_2_6_truncating_stop_reasons(wire: str, path: str, value: str) -> None:
    failure = classify(status=200, body=_doc_at(path, value))
    assert failure.kind is K.OUTPUT_TRUNCATED, wire
    assert failure.stop_reason == value
    assert not failure.recoverable


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("choices[].finish_reason", "stop"),
        ("choices[].finish_reason", "tool_calls"),
        ("stop_reason", "end_turn"),
        ("stopReason", "end_turn"),
        ("candidates[].finishReason", "STOP"),
        ("done_reason", "stop"),
    ],
)
def test_spec_2_6_normal_stops_are_ok(path: str, value: str) -> None:
    failure = classify(body=json.dumps(_doc_at(path, value)))
    assert failure.kind is K.OK
    assert failure.stop_reason == value


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("choices[].finish_reason", "content_filter"),
        ("incomplete_details.reason", "content_filter"),
        ("promptFeedback.blockReason", "OTHER"),
        ("candidates[].finishReason", "SAFETY"),
        ("candidates[].finishReason", "PROHIBITED_CONTENT"),
        ("candidates[].finishReason", "BLOCKLIST"),
        ("stop_reason", "refusal"),
        ("stopReason", "guardrail_intervened"),
    ],
)
def test_spec_12_a_providers_own_refusal_at_200_is_content_refused_never_ok(path: str, value: str) -> None:
    failure = classify(status=200, body=json.dumps(_doc_at(path, value)))
    assert failure.kind is K.CONTENT_REFUSED and failure.stop_reason == value
    assert not failure.recoverable and failure.reason is None


def test_spec_2_6_responses_api_incomplete() -> None:
    body = {
        "object": "response",
        "status": "incomplete",
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [],
    }
    assert classify(status=200, body=body).kind is K.OUTPUT_TRUNCATED


def test_big_successful_body_is_parsed_whole() -> None:
    body = json.dumps({"choices": [{"message": {"content": "y" * 3_000_000}, "finish_reason": "length"}]})
    assert len(body) > inputs_module.MAX_TEXT_CHARS
    assert classify(status=200, body=body.encode()).kind is K.OUTPUT_TRUNCATED


def test_success_text_mentioning_errors_is_still_ok() -> None:
    body = {
        "choices": [
            {"message": {"content": "HTTP 413 and 429 mean the prompt is too long"}, "finish_reason": "stop"}
        ]
    }
    assert classify(body=body).kind is K.OK


def test_openai_length_finish_reason_error_is_output_truncated() -> None:
    from openai.types.chat import ChatCompletion

    completion = ChatCompletion.model_construct(
        id="x", choices=[], created=0, model="gpt-4o", object="chat.completion"
    )
    failure = classify(openai.LengthFinishReasonError(completion=completion))
    assert failure.kind is K.OUTPUT_TRUNCATED


# -- Guards --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (
            429,
            "Request too large for gpt-4o in organization org-x on tokens per min "
            "(TPM): Limit 30000, Requested 50000.",
        ),
        (429, "token limit"),
        (529, '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'),
        (
            200,
            'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
        ),
        (
            413,
            "Request too large for model `llama3-70b-8192` on tokens per minute "
            "(TPM): Limit 6000, Requested 7000",
        ),
        (400, "ThrottlingException: Too many tokens, please wait before trying again."),
        (None, "Request too large: your RPM quota is exhausted"),
        (503, "The model is overloaded. Please try again later."),
    ],
)
def test_guard_rate_and_quota_beat_size_words(status: int | None, text: str) -> None:
    failure = classify(status=status, body=text)
    assert failure.kind is K.RATE_LIMIT
    assert not failure.recoverable


@pytest.mark.parametrize(
    "text",
    [
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_01A. "
        "Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        "'tool_call_id'. The following tool_call_ids did not have response messages: call_1",
        "Invalid parameter: messages with role 'tool' must be a response to a "
        "preceeding message with 'tool_calls'.",
        'messages: roles must alternate between "user" and "assistant", but '
        'found multiple "user" roles in a row',
        "Please ensure that function call turn comes immediately after a user turn "
        "or after a function response turn.",
        "A conversation must alternate between user and assistant roles.",
        "The number of toolResult blocks at messages.2.content exceeds the number "
        "of toolUse blocks of previous turn.",
        "No tool output found for function call call_abc.",
        "Not the same number of function calls and responses",
    ],
)
def test_guard_pairing_errors_are_malformed_history(text: str) -> None:
    failure = classify(status=400, body=text)
    assert failure.kind is K.MALFORMED_HISTORY
    assert failure.recoverable and not failure.is_payload
    assert failure.reason is None


@pytest.mark.parametrize(
    "text",
    [
        "max_tokens is too large: 100000. This model supports at most 16384 completion tokens",
        "max_tokens: 200000 > 64000, which is the maximum allowed number of output tokens for claude-x",
    ],
)
def test_guard_output_cap_errors_are_not_overflow(text: str) -> None:
    # Issue 11: an output cap is its own kind (lower max_tokens, never compact); it used to read as ``other``.
    failure = classify(status=400, body=text)
    assert failure.kind is K.OUTPUT_LIMIT
    assert not failure.recoverable and failure.notice is None


# -- Inputs: bytes, JSON, headers, bodies in errors ------------------------------------------------------


def test_body_as_bytes_and_as_parsed_json_agree() -> None:
    doc = {"error": {"message": "prompt is too long: 1 > 0", "type": "invalid_request_error"}}
    text = json.dumps(doc)
    kinds = {classify(status=400, body=b).kind for b in (text, text.encode(), doc)}
    assert kinds == {K.CONTEXT_OVERFLOW}


def test_error_code_inside_body_gives_the_status() -> None:
    failure = classify(body={"error": {"code": 413, "message": "Payload Too Large"}})
    assert failure.kind is K.PAYLOAD_TOO_LARGE
    assert failure.status == 413


def test_request_bytes_become_rejected_bytes() -> None:
    assert classify(status=413, body="", request_bytes=129_434).rejected_bytes == 129_434
    assert classify(status=200, body={"stop_reason": "end_turn"}, request_bytes=10).rejected_bytes is None


def test_rejected_bytes_read_from_the_error_attribute() -> None:
    class GatewayRejected(Exception):
        status_code = 413
        request_bytes = 4_194_304

    failure = classify(GatewayRejected("rejected"))
    assert failure.kind is K.PAYLOAD_TOO_LARGE
    assert failure.rejected_bytes == 4_194_304


def test_nothing_given_is_other() -> None:
    assert classify().kind is K.OTHER


# -- real httpx exceptions -------------------------------------------------------------------------------


def _httpx_request() -> httpx.Request:
    return httpx.Request("POST", OPENAI_URL, content=b"x" * 2048)


@pytest.mark.parametrize(
    "make",
    [
        lambda r: httpx.RemoteProtocolError("Server disconnected without sending a response.", request=r),
        lambda r: httpx.ReadError("[Errno 104] Connection reset by peer", request=r),
        lambda r: httpx.WriteError("[Errno 32] Broken pipe", request=r),
        lambda r: httpx.ReadError("", request=r),
    ],
    ids=["RemoteProtocolError", "ReadError", "WriteError", "ReadError-empty"],
)
def test_httpx_dropped_connection_family(make) -> None:  # type: ignore[no-untyped-def]
    exc = make(_httpx_request())
    big = classify(exc, history_chars=BIG_HISTORY)
    assert big.kind is K.SUSPECTED_PAYLOAD
    assert big.rejected_bytes == 2048  # the request's Content-Length
    assert classify(exc, history_chars=SMALL_HISTORY).kind is K.TRANSIENT_NETWORK


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ReadTimeout("timed out"),
        httpx.ConnectTimeout("timed out"),
        httpx.ConnectError("All connection attempts failed"),
    ],
)
def test_httpx_timeouts_and_connect_errors_are_transient(exc: Exception) -> None:
    assert classify(exc, history_chars=BIG_HISTORY).kind is K.TRANSIENT_NETWORK


@pytest.mark.parametrize(
    ("status", "text", "headers", "kind"),
    [
        (
            413,
            "<html><head><title>413 Request Entity Too Large</title></head></html>",
            {"server": "nginx"},
            K.PAYLOAD_TOO_LARGE,
        ),
        (403, NGINX_403, {"content-type": "text/html"}, K.WAF_REJECTION),
        (400, '{"error":{"code":"context_length_exceeded","message":"too long"}}', {}, K.CONTEXT_OVERFLOW),
        (401, '{"error":{"message":"Incorrect API key provided"}}', {}, K.AUTH),
    ],
)
def test_httpx_status_error_with_real_response(
    status: int, text: str, headers: dict[str, str], kind: FailureKind
) -> None:
    request = _httpx_request()
    response = httpx.Response(status, text=text, headers=headers, request=request)
    try:
        response.raise_for_status()
    except httpx.HTTPStatusError as exc:
        failure = classify(exc)
    assert failure.kind is kind
    assert failure.status == status


def test_stream_dropped_after_a_200_is_a_network_failure() -> None:
    exc = httpx.RemoteProtocolError("peer closed connection without sending complete message body")
    assert classify(exc, status=200, history_chars=BIG_HISTORY).kind is K.SUSPECTED_PAYLOAD
    assert classify(exc, status=200, history_chars=SMALL_HISTORY).kind is K.TRANSIENT_NETWORK


def test_os_errors_by_class() -> None:
    assert (
        classify(ConnectionResetError(104, "Connection reset by peer"), history_chars=BIG_HISTORY).kind
        is K.SUSPECTED_PAYLOAD
    )
    assert (
        classify(BrokenPipeError(32, "Broken pipe"), history_chars=SMALL_HISTORY).kind is K.TRANSIENT_NETWORK
    )
    assert (
        classify(ConnectionRefusedError(111, "Connection refused"), history_chars=BIG_HISTORY).kind
        is K.TRANSIENT_NETWORK
    )
    assert classify(TimeoutError("timed out"), history_chars=BIG_HISTORY).kind is K.TRANSIENT_NETWORK


def test_foreign_class_named_read_error_is_not_a_network_error() -> None:
    import tarfile

    assert classify(tarfile.ReadError("file could not be opened"), history_chars=BIG_HISTORY).kind is K.OTHER


# -- real SDK exceptions (openai 3.x / anthropic 2.x, built on httpx2) ------------------------------------


def _sdk_response(status: int, text: str, url: str, content_type: str) -> httpx2.Response:
    request = httpx2.Request("POST", url, content=b"{}" * 100)
    return httpx2.Response(status, text=text, headers={"content-type": content_type}, request=request)


def _openai_status_error(
    status: int, text: str, content_type: str = "application/json"
) -> openai.APIStatusError:
    """Build the error exactly as openai's client does (``_make_status_error_from_response``)."""
    response = _sdk_response(status, text, OPENAI_URL, content_type)
    message = f"Error code: {status}"
    body: object = text
    try:
        body = json.loads(text)
    except ValueError:
        pass
    else:
        inner = body.get("error", body) if isinstance(body, dict) else None
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            message += f" - {inner['message']}"
    data = body.get("error", body) if isinstance(body, dict) else body
    classes = {
        400: openai.BadRequestError,
        401: openai.AuthenticationError,
        403: openai.PermissionDeniedError,
        429: openai.RateLimitError,
    }
    return classes.get(status, openai.APIStatusError)(message, response=response, body=data)


def test_openai_403_html_only_in_body_is_waf() -> None:
    exc = _openai_status_error(403, CLOUDFLARE_BLOCK, "text/html; charset=UTF-8")
    assert "Cloudflare" not in str(exc)  # the SDK's message omits the page
    failure = classify(exc)
    assert failure.kind is K.WAF_REJECTION
    assert failure.provider == "cloudflare"
    assert failure.status == 403


def test_openai_403_plain_html_page_is_waf() -> None:
    assert classify(_openai_status_error(403, NGINX_403, "text/html")).kind is K.WAF_REJECTION


def test_openai_403_json_is_auth() -> None:
    text = (
        '{"error":{"code":"unsupported_country_region_territory","message":"Country, region, or '
        'territory not supported","param":null,"type":"request_forbidden"}}'
    )
    failure = classify(_openai_status_error(403, text))
    assert failure.kind is K.AUTH
    assert failure.provider == "openai"


def test_openai_context_length_exceeded() -> None:
    text = json.dumps(
        {
            "error": {
                "message": "Your input exceeds the context window of this model.",
                "type": "invalid_request_error",
                "param": "input",
                "code": "context_length_exceeded",
            }
        }
    )
    failure = classify(_openai_status_error(400, text))
    assert failure.kind is K.CONTEXT_OVERFLOW
    assert failure.provider == "openai"
    assert failure.rejected_bytes == 200


def test_openai_429_request_too_large_is_rate_limit() -> None:
    text = json.dumps(
        {
            "error": {
                "message": "Request too large for gpt-4o in organization org-x on tokens per min (TPM): "
                "Limit 30000, Requested 45123.",
                "type": "tokens",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        }
    )
    assert classify(_openai_status_error(429, text)).kind is K.RATE_LIMIT


def test_openai_connection_error_caused_by_a_dropped_connection() -> None:
    request = httpx2.Request("POST", OPENAI_URL)
    try:
        try:
            raise httpx2.RemoteProtocolError(
                "Server disconnected without sending a response.", request=request
            )
        except httpx2.RemoteProtocolError as exc:
            raise openai.APIConnectionError(request=request) from exc
    except openai.APIConnectionError as exc:
        error = exc
    assert classify(error, history_chars=BIG_HISTORY).kind is K.SUSPECTED_PAYLOAD
    assert classify(error, history_chars=SMALL_HISTORY).kind is K.TRANSIENT_NETWORK
    assert (
        classify(openai.APITimeoutError(request=request), history_chars=BIG_HISTORY).kind
        is K.TRANSIENT_NETWORK
    )


def _anthropic_status_error(
    cls: type[anthropic.APIStatusError], status: int, body: dict[str, object]
) -> anthropic.APIStatusError:
    response = _sdk_response(status, json.dumps(body), ANTHROPIC_URL, "application/json")
    return cls(f"Error code: {status} - {body}", response=response, body=body)


def test_anthropic_prompt_is_too_long() -> None:
    body = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 208310 tokens > 200000 maximum",
        },
    }
    failure = classify(_anthropic_status_error(anthropic.BadRequestError, 400, body))
    assert failure.kind is K.CONTEXT_OVERFLOW
    assert failure.provider == "anthropic"
    assert failure.reason_text == "context too long"


def test_anthropic_529_overloaded_is_rate_limit_not_recoverable() -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    failure = classify(_anthropic_status_error(anthropic.OverloadedError, 529, body))
    assert failure.kind is K.RATE_LIMIT
    assert not failure.recoverable
    assert failure.notice is None


def test_anthropic_413_content_too_large() -> None:
    body = {
        "type": "error",
        "error": {"type": "request_too_large", "message": "Request exceeds the maximum size"},
    }
    failure = classify(
        _anthropic_status_error(anthropic.ContentTooLargeError, 413, body), request_bytes=33_554_433
    )
    assert failure.kind is K.PAYLOAD_TOO_LARGE
    assert failure.rejected_bytes == 33_554_433


# -- cause chains and hostile inputs -----------------------------------------------------------------------


def test_status_is_found_through_the_context_chain() -> None:
    request = _httpx_request()
    response = httpx.Response(431, request=request)
    try:
        try:
            response.raise_for_status()
        except httpx.HTTPStatusError:
            raise ValueError("while sending the turn")  # noqa: B904 - implicit __context__ on purpose
    except ValueError as exc:
        assert classify(exc).kind is K.PAYLOAD_TOO_LARGE


def test_self_referencing_and_cyclic_chains_terminate() -> None:
    looped = ValueError("unexpected EOF")
    looped.__cause__ = looped
    a, b = RuntimeError("a"), RuntimeError("connection reset by peer")
    a.__cause__, b.__context__ = b, a
    assert classify(looped, history_chars=BIG_HISTORY).kind is K.SUSPECTED_PAYLOAD
    assert classify(a, history_chars=SMALL_HISTORY).kind is K.TRANSIENT_NETWORK


def test_exception_group_members_are_read() -> None:
    group = ExceptionGroup(
        "task group failed", [ValueError("x"), httpx.RemoteProtocolError("Server disconnected")]
    )
    assert classify(group, history_chars=BIG_HISTORY).kind is K.SUSPECTED_PAYLOAD


class _Explodes:
    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"no {name}")

    def __str__(self) -> str:
        raise RuntimeError("no str")


class HostileError(Exception):
    """Every attribute classify might read raises."""

    @property
    def status_code(self) -> int:
        raise RuntimeError("boom")

    @property
    def response(self) -> object:
        raise KeyError("boom")

    @property
    def body(self) -> object:
        raise ValueError("boom")

    @property
    def message(self) -> str:
        raise TypeError("boom")

    @property
    def request(self) -> object:
        return _Explodes()

    def __str__(self) -> str:
        raise RuntimeError("no str")


class WeirdResponseError(Exception):
    status_code = "413"
    response = _Explodes()
    body = {"nested": [{"deeper": [1, 2.5, None, True, {"x": float("nan")}]}]}
    request_bytes = -5


def test_hostile_errors_do_not_raise() -> None:
    assert isinstance(classify(HostileError()), Failure)
    failure = classify(WeirdResponseError(), headers=_Explodes(), body=_Explodes())  # type: ignore[arg-type]
    assert isinstance(failure, Failure)
    assert failure.rejected_bytes is None


def _exceptions() -> st.SearchStrategy[BaseException | None]:
    texts = st.text(max_size=80) | st.sampled_from(
        [
            "Server disconnected",
            "connection reset by peer",
            "413 Payload Too Large",
            "prompt is too long",
            "StatusCode: 403, invalid character '<'",
            "EOF",
            "roles must alternate",
            "tokens per min (TPM)",
        ]
    )

    def build(kind: int, text: str, cycle: bool, status: object) -> BaseException:
        request = httpx.Request("POST", OPENAI_URL)
        exc: BaseException
        if kind == 0:
            exc = httpx.RemoteProtocolError(text, request=request)
        elif kind == 1:
            exc = HostileError(text)
        elif kind == 2:
            exc = WeirdResponseError(text)
        elif kind == 3:
            exc = ExceptionGroup("g", [ValueError(text), OSError(104, text)])
        else:
            exc = RuntimeError(text)
            exc.status_code = status  # type: ignore[attr-defined]
        if cycle:
            exc.__cause__ = exc
        return exc

    return st.none() | st.builds(
        build, st.integers(0, 4), texts, st.booleans(), st.none() | st.integers() | st.text(max_size=5)
    )


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=16,
)


@settings(max_examples=150)
@given(
    error=_exceptions(),
    status=st.none() | st.integers(),
    body=st.none() | st.text(max_size=200) | st.binary(max_size=200) | JSONISH,
    headers=st.none()
    | st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=4)
    | st.lists(st.tuples(st.text(max_size=10), st.text(max_size=10)), max_size=3)
    | st.text(max_size=10)
    | st.integers(),
    request_bytes=st.none() | st.integers() | st.floats(),
    history_chars=st.none() | st.integers() | st.floats(),
)
def test_classify_never_raises(  # type: ignore[no-untyped-def]
    error, status, body, headers, request_bytes, history_chars
) -> None:
    failure = classify(
        error,
        status=status,
        body=body,
        headers=headers,
        request_bytes=request_bytes,
        history_chars=history_chars,
    )
    assert isinstance(failure, Failure)
    assert isinstance(failure.kind, FailureKind)
    assert (failure.reason is None) == (failure.reason_text is None)
    assert failure.recoverable == (failure.kind in RECOVERABLE_KINDS)


# -- house rules -----------------------------------------------------------------------------------


@pytest.mark.parametrize("module", [classify_module, inputs_module, tables_module], ids=lambda m: m.__name__)
def test_classify_modules_import_no_http_client_or_sdk(module: object) -> None:
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {
        (node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    }
    assert imported.isdisjoint({"httpx", "httpx2", "httpcore", "httpcore2", "openai", "anthropic"})


def test_phrase_tables_are_lowercase_tuples() -> None:
    tables = [name for name in dir(tables_module) if name.endswith(("_PHRASES", "_WORDS"))]
    assert len(tables) >= 10
    for name in tables:
        table = getattr(tables_module, name)
        assert isinstance(table, tuple), name
        assert all(p == p.lower() and "`" not in p for p in table), name


@pytest.mark.parametrize(
    ("body", "limit"),
    [
        (
            "This model's maximum context length is 128000 tokens. However, your messages resulted in "
            "130000 tokens.",
            128_000,
        ),
        ("prompt is too long: 250000 tokens > 200000 maximum", 200_000),
        (
            "input length and `max_tokens` exceed context limit: 197421 + 8192 > 200000, decrease "
            "input length "
            "or `max_tokens` and try again",
            200_000,
        ),
        (
            "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
            1_048_576,
        ),
        ("Prompt contains 40000 tokens, too large for model with 32768 maximum context length", 32_768),
        ("ValidationException: Input is too long for requested model.", None),
    ],
)
def test_overflow_states_the_window_when_the_text_does(body: str, limit: int | None) -> None:
    failure = classify(status=400, body=body)
    assert failure.kind is K.CONTEXT_OVERFLOW
    assert failure.context_limit_tokens == limit


@pytest.mark.parametrize(
    ("body", "window", "cap"),
    [
        # Issue 11: the output budget alone fills the window; no compaction can make room: lower max_tokens.
        (
            "This model's maximum context length is 8192 tokens. However, you requested 8256 tokens "
            "(64 in the "
            "messages, 8192 in the completion).",
            8_192,
            8_128,
        ),
        ("input length and `max_tokens` exceed context limit: 1200 + 200000 > 200000", 200_000, 198_800),
        (
            "'max_tokens' or 'max_completion_tokens' is too large: 4096. This model's maximum context "
            "length is "
            "8192 tokens and your request has 5000 input tokens (4096 > 8192 - 5000)",
            8_192,
            3_192,
        ),
    ],
)
def test_an_output_budget_the_window_cannot_hold_is_an_output_limit(body: str, window: int, cap: int) -> None:
    failure = classify(status=400, body=body)
    assert failure.kind is K.OUTPUT_LIMIT
    assert (failure.context_limit_tokens, failure.output_limit_tokens) == (window, cap)


@pytest.mark.parametrize(
    "body",
    [
        "input length and `max_tokens` exceed context limit: 197421 + 8192 > 200000",
        "This model's maximum context length is 4097 tokens, however you requested 4569 tokens (3545 in your "
        "prompt; 1024 for the completion).",
        "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 2048. Given: 1887 `inputs` "
        "tokens and 1024 `max_new_tokens`",
    ],
)
def test_input_plus_output_over_the_window_is_an_overflow(body: str) -> None:
    # SPEC §2.1 ("max_tokens" + "exceed"): compaction makes room; the session learns the window from it.
    failure = classify(status=400, body=body)
    assert failure.kind is K.CONTEXT_OVERFLOW
    assert failure.context_limit_tokens is not None


def test_window_is_only_read_from_overflows() -> None:
    failure = classify(status=429, body="maximum context length is 8000 tokens; rate limit")
    assert failure.context_limit_tokens is None


def test_readme_documents_every_kind_and_its_action() -> None:
    readme = (Path(__file__).parents[3] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Failure kinds and what ctxrecover does", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip().strip("`") for line in section.splitlines() if line.startswith("| `")}
    assert rows == {str(kind) for kind in FailureKind}
