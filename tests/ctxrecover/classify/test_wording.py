"""Wording structure: subject + excess per clause, output parameters, byte and header caps, billing.

The texts below are wordings of servers the phrase tables never listed; each must be read
by its structure alone (the labelled, sourced originals live in fixtures/errors/).
"""

from __future__ import annotations

import pytest

from ctxrecover.classify import FailureKind, classify
from ctxrecover.classify.wording import (
    budget,
    header_wording,
    output_limit_wording,
    overflow_wording,
    payload_wording,
    stated_output_limit,
)

K = FailureKind


@pytest.mark.parametrize(
    "text",
    [
        "prompt token count of 93854 exceeds the limit of 90000",  # GitHub Copilot
        "range of input length should be [1, 30720]",  # DashScope / Qwen
        "input validation error: inputs must have less than 4096 tokens. given: 4545",  # TGI
        "input is larger than the max context size. skipping",  # llama.cpp
        "the decoder prompt (length 9051) is longer than the maximum model length of 8192",  # vLLM
        "requested tokens (5000) exceed context window of 4096",  # llama-cpp-python
    ],
)
def test_overflow_is_read_from_subject_and_excess(text: str) -> None:
    assert overflow_wording(text)


@pytest.mark.parametrize(
    "text",
    [
        "httpsconnectionpool(host='api.x.com', port=443): max retries exceeded with url: /v1/messages",
        "1 validation error for chatrequest temperature input should be less than or equal to 2 "
        "[type=less_than_equal]",
        "invalid 'tools[0].function.name': string too long. expected a string with maximum length 64",
        "context deadline exceeded (client.timeout exceeded while awaiting headers)",
        "this might be due to: * excessively large context for the llm (context length: 100000)",
        "upstream connect error or disconnect/reset before headers. reset reason: overflow",
        "message: you exceeded nothing",
    ],
)
def test_overflow_never_reads_paths_keys_parameters_timeouts_or_guesses(text: str) -> None:
    assert overflow_wording(text) is None


@pytest.mark.parametrize(
    ("text", "cap"),
    [
        ("max_tokens is too large: 100000. this model supports at most 16384 completion tokens", 16_384),
        ("max_tokens: 200000 > 64000, which is the maximum allowed number of output tokens", 64_000),
        ("max_tokens for llama-3.1-8b-instant must be less than or equal to 8000", 8_000),
        ("invalid max_tokens value, the valid range of max_tokens is [1, 8192]", 8_192),
        (
            "it has a maxoutputtokens value of 100000 but the supported range is from 1 (inclusive) to 65537 "
            "(exclusive)",
            65_536,
        ),
        ("input validation error: max_new_tokens must be <= 2048. given: 4096", 2_048),
    ],
)
def test_output_limits_and_their_stated_cap(text: str, cap: int) -> None:
    assert output_limit_wording(text)
    assert stated_output_limit(text) == cap


@pytest.mark.parametrize(
    "text",
    [
        "input validation error: inputs tokens + max_new_tokens must be <= 2048. given: 2100 inputs tokens",
        "input length and max_tokens exceed context limit: 197421 + 8192 > 200000",
        "max_tokens is not supported with this model. use max_completion_tokens instead",
    ],
)
def test_sums_and_unsupported_parameters_are_not_output_limits(text: str) -> None:
    assert output_limit_wording(text) is None


def test_budget_reads_window_input_and_output() -> None:
    split = budget(
        "maximum context length is 4097 tokens, however you requested 4569 tokens (3545 in your "
        "prompt; 1024 for the completion)"
    )
    assert split is not None and (split.window, split.input, split.output) == (4097, 3545, 1024)
    assert not split.output_never_fits
    assert budget("prompt is too long") is None


def test_byte_and_header_caps_by_structure() -> None:
    assert payload_wording("request payload size exceeds the limit: 20971520 bytes")
    assert payload_wording("<h1>content length exceeded maximum</h1>")
    assert payload_wording("payload too large: prompt is too long") is None  # a status phrase is no byte cap
    assert header_wording("request header field exceeds server limit")
    assert (
        header_wording("context deadline exceeded (client.timeout exceeded while awaiting headers)") is None
    )


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (402, "", K.BILLING),
        (
            429,
            '{"error":{"code":"insufficient_quota","message":"You exceeded your current quota"}}',
            K.BILLING,
        ),
        (400, "Your credit balance is too low to access the Anthropic API.", K.BILLING),
        (
            429,
            "You exceeded your current quota, please check your plan and billing details. "
            "Please retry in 21s.",
            K.RATE_LIMIT,
        ),
        (
            None,
            "This request requires more credits, or fewer max_tokens. You requested up to 4096 tokens",
            K.BILLING,
        ),
    ],
)
def test_billing_is_never_retried_nor_compacted(status: int | None, body: str, kind: FailureKind) -> None:
    failure = classify(status=status, body=body)
    assert failure.kind is kind
    assert not failure.recoverable and failure.notice is None


def test_llama_cpp_overflow_on_a_500_is_an_overflow_not_a_retry() -> None:
    body = (
        '{"error":{"code":500,"message":"the request exceeds the available context size, try increasing it",'
        '"type":"server_error"}}'
    )
    assert classify(status=500, body=body).kind is K.CONTEXT_OVERFLOW
    assert classify(body=body).kind is K.CONTEXT_OVERFLOW
    assert (
        classify(status=500, body='{"error":{"message":"boom","type":"server_error"}}').kind
        is K.TRANSIENT_NETWORK
    )


def test_a_stream_drop_that_names_the_overflow_is_the_overflow() -> None:
    text = "stream error: stream disconnected before completion: Your input exceeds the context window."
    assert classify(body=text, history_chars=900_000).kind is K.CONTEXT_OVERFLOW
    assert (
        classify(body="stream error: stream disconnected", history_chars=900_000).kind is K.SUSPECTED_PAYLOAD
    )


def test_an_error_body_quoted_in_a_message_gives_its_status() -> None:
    failure = classify(body='401 {"error":{"message":"No cookie auth credentials found","code":401}}')
    assert failure.kind is K.AUTH and failure.status == 401
    sdk = "Error code: 404 - {'error': {'message': 'The model does not exist', 'code': 'model_not_found'}}"
    assert classify(body=sdk).kind is K.OTHER
