"""Mock providers: real request shapes, strict validation, real error and success bodies."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from ctxrecover.classify import classify
from ctxrecover.messages import ToolCall
from simulator.providers.mock import (
    DEFAULT_PRICE,
    PRICES,
    MockProvider,
    ParsedRequest,
    Price,
    Reply,
    Usage,
    cost,
    estimate_tokens,
    format_for_path,
    price_for,
    rate_limit_response,
)

PATHS = {
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/gemini-2.5-pro:generateContent",
    "bedrock-converse": "/model/anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse",
}
MODELS = {
    "openai-chat": "gpt-4o",
    "openai-responses": "gpt-4o",
    "anthropic": "claude-sonnet-4-20250514",
    "gemini": "gemini-2.5-pro",
    "bedrock-converse": "anthropic.claude-3-5-sonnet-20241022-v2:0",
}


def user_body(fmt: str, text: str = "hello", max_tokens: int | None = None) -> dict[str, Any]:
    """The smallest valid request of each format."""
    body: dict[str, Any]
    if fmt == "openai-chat":
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
    elif fmt == "openai-responses":
        body = {"model": "gpt-4o", "input": [{"role": "user", "content": text}]}
        if max_tokens is not None:
            body["max_output_tokens"] = max_tokens
    elif fmt == "anthropic":
        body = {
            "model": MODELS[fmt],
            "max_tokens": max_tokens or 256,
            "messages": [{"role": "user", "content": text}],
        }
    elif fmt == "gemini":
        body = {"contents": [{"role": "user", "parts": [{"text": text}]}]}
        if max_tokens is not None:
            body["generationConfig"] = {"maxOutputTokens": max_tokens}
    else:
        body = {"messages": [{"role": "user", "content": [{"text": text}]}]}
        if max_tokens is not None:
            body["inferenceConfig"] = {"maxTokens": max_tokens}
    return body


def post(provider: MockProvider, body: Any, path: str | None = None) -> httpx.Response:
    with httpx.Client(transport=httpx.MockTransport(provider), base_url="http://mock") as client:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return client.post(
            path or PATHS[provider.format], content=content, headers={"content-type": "application/json"}
        )


def classify_kind(response: httpx.Response) -> str:
    failure = classify(status=response.status_code, body=response.text, headers=dict(response.headers))
    return str(failure.kind)


READ_CALL = ToolCall("", "read_file", '{"path": "a.py"}')


# -- successful replies --------------------------------------------------------

STOP_REASONS = {  # format: (path into the JSON, plain, with tool calls, truncated)
    "openai-chat": (("choices", 0, "finish_reason"), "stop", "tool_calls", "length"),
    "openai-responses": (("status",), "completed", "completed", "incomplete"),
    "anthropic": (("stop_reason",), "end_turn", "tool_use", "max_tokens"),
    "gemini": (("candidates", 0, "finishReason"), "STOP", "STOP", "MAX_TOKENS"),
    "bedrock-converse": (("stopReason",), "end_turn", "tool_use", "max_tokens"),
}
USAGE_KEYS = {
    "openai-chat": (
        "usage",
        {
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "prompt_tokens_details",
            "completion_tokens_details",
        },
    ),
    "openai-responses": (
        "usage",
        {"input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details", "total_tokens"},
    ),
    "anthropic": (
        "usage",
        {"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"},
    ),
    "gemini": ("usageMetadata", {"promptTokenCount", "candidatesTokenCount", "totalTokenCount"}),
    "bedrock-converse": (
        "usage",
        {"inputTokens", "outputTokens", "totalTokens", "cacheReadInputTokens", "cacheWriteInputTokens"},
    ),
}


def dig(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


@pytest.mark.parametrize("fmt", list(PATHS))
def test_valid_request_gets_200_in_the_real_format_with_usage(fmt: str) -> None:
    provider = MockProvider(fmt, context_window=10_000, script=["Hello there!"])
    response = post(provider, user_body(fmt, "x" * 400))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    doc = response.json()
    usage_key, keys = USAGE_KEYS[fmt]
    assert set(doc[usage_key]) == keys
    path, plain, _, _ = STOP_REASONS[fmt]
    assert dig(doc, path) == plain
    assert "Hello there!" in response.text
    call = provider.last_call
    assert (call.outcome, call.model, call.message_count) == ("ok", MODELS[fmt], 1)
    assert call.input_tokens == 100  # 400 chars / 4
    assert call.usage == Usage(100, 3, model=MODELS[fmt])  # "Hello there!" = 12 chars


@pytest.mark.parametrize("fmt", list(PATHS))
def test_tool_call_replies_use_the_provider_shape_and_stop_reason(fmt: str) -> None:
    provider = MockProvider(fmt, context_window=10_000, script=[Reply("Reading.", (READ_CALL,))])
    doc = post(provider, user_body(fmt)).json()
    path, _, with_tools, _ = STOP_REASONS[fmt]
    assert dig(doc, path) == with_tools
    text = json.dumps(doc)
    assert "read_file" in text and "a.py" in text


def test_tool_call_ids_are_minted_in_each_provider_style() -> None:
    ids = {}
    for fmt in ("openai-chat", "anthropic", "bedrock-converse"):
        provider = MockProvider(fmt, context_window=1000, script=[Reply("", (READ_CALL,))])
        ids[fmt] = json.dumps(post(provider, user_body(fmt)).json())
    assert '"id": "call_' in ids["openai-chat"]
    assert '"id": "toolu_01' in ids["anthropic"]
    assert '"toolUseId": "tooluse_' in ids["bedrock-converse"]


@pytest.mark.parametrize("fmt", list(PATHS))
def test_reply_over_max_tokens_is_cut_with_the_truncation_stop_reason(fmt: str) -> None:
    provider = MockProvider(fmt, context_window=10_000, script=[Reply("y" * 400, (READ_CALL,))])
    response = post(provider, user_body(fmt, max_tokens=10))
    doc = response.json()
    path, _, _, truncated = STOP_REASONS[fmt]
    assert dig(doc, path) == truncated
    assert "y" * 40 in response.text and "y" * 41 not in response.text
    assert "read_file" not in response.text  # a cut reply carries no half tool call
    assert provider.last_call.outcome == "output_truncated"
    assert provider.last_call.usage is not None and provider.last_call.usage.output_tokens == 10
    assert classify_kind(response) == "output_truncated"


def test_responses_truncation_reports_incomplete_details() -> None:
    doc = post(
        MockProvider("openai-responses", context_window=1000, script=["z" * 100]),
        user_body("openai-responses", max_tokens=5),
    ).json()
    assert doc["incomplete_details"] == {"reason": "max_output_tokens"}


def test_without_max_tokens_the_output_cap_truncates() -> None:
    provider = MockProvider("gemini", context_window=1000, max_output_tokens_cap=3, script=["w" * 100])
    doc = post(provider, user_body("gemini")).json()
    assert doc["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert doc["candidates"][0]["content"]["parts"] == [{"text": "w" * 12}]


@pytest.mark.parametrize("fmt", list(PATHS))
def test_successful_untruncated_reply_classifies_ok(fmt: str) -> None:
    response = post(MockProvider(fmt, context_window=1000, script=["fine"]), user_body(fmt))
    assert classify_kind(response) == "ok"


# -- strict validation -----------------------------------------------------------

OPENAI_DANGLING = {
    "model": "gpt-4o",
    "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_x", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "user", "content": "next"},
    ],
}
OPENAI_ORPHAN_TOOL = {
    "model": "gpt-4o",
    "messages": [
        {"role": "user", "content": "u"},
        {"role": "tool", "tool_call_id": "call_y", "content": "r"},
    ],
}
ANTHROPIC_DANGLING = {
    "model": "claude-sonnet-4",
    "max_tokens": 100,
    "messages": [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_x", "name": "f", "input": {}}]},
        {"role": "user", "content": "no result"},
    ],
}


def openai_error(message: str, param: str | None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}


def anthropic_error(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def gemini_error(message: str) -> dict[str, Any]:
    return {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}


VALIDATION_CASES: list[tuple[str, str, dict[str, Any], dict[str, Any], str]] = [
    (
        "openai-dangling-tool-calls",
        "openai-chat",
        OPENAI_DANGLING,
        openai_error(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            "'tool_call_id'. The following tool_call_ids did not have response messages: call_x",
            "messages.[3].role",
        ),
        "malformed_history",
    ),
    (
        "openai-tool-without-call",
        "openai-chat",
        OPENAI_ORPHAN_TOOL,
        openai_error(
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
            "'tool_calls'.",
            "messages.[1].role",
        ),
        "malformed_history",
    ),
    (
        "openai-empty-messages",
        "openai-chat",
        {"model": "gpt-4o", "messages": []},
        openai_error(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an "
            "empty array "
            "instead.",
            "messages",
            "empty_array",
        ),
        "invalid_request",
    ),
    (
        "openai-bad-role",
        "openai-chat",
        {"model": "gpt-4o", "messages": [{"role": "robot", "content": "x"}]},
        openai_error(
            "Invalid value: 'robot'. Supported values are: 'system', 'assistant', 'user', 'function', "
            "'tool', and 'developer'.",
            "messages.[0].role",
            "invalid_value",
        ),
        "invalid_request",
    ),
    (
        "responses-orphan-output",
        "openai-responses",
        {
            "model": "gpt-4o",
            "input": [
                {"role": "user", "content": "u"},
                {"type": "function_call_output", "call_id": "call_z", "output": "r"},
            ],
        },
        openai_error("No tool call found for function call output with call_id call_z.", "input"),
        "malformed_history",
    ),
    (
        "responses-missing-output",
        "openai-responses",
        {
            "model": "gpt-4o",
            "input": [
                {"role": "user", "content": "u"},
                {"type": "function_call", "call_id": "call_q", "name": "f", "arguments": "{}"},
            ],
        },
        openai_error("No tool output found for function call call_q.", "input"),
        "malformed_history",
    ),
    (
        "anthropic-dangling-tool-use",
        "anthropic",
        ANTHROPIC_DANGLING,
        anthropic_error(
            "messages.3: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_x. "
            "Each `tool_use` block must have a corresponding `tool_result` block in the next message."
        ),
        "malformed_history",
    ),
    (
        "anthropic-unexpected-result",
        "anthropic",
        {
            "model": "m",
            "max_tokens": 10,
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_q", "content": "r"}],
                }
            ],
        },
        anthropic_error(
            "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_q. "
            "Each `tool_result` block must have a corresponding `tool_use` block in the previous "
            "message."
        ),
        "malformed_history",
    ),
    (
        "anthropic-first-message",
        "anthropic",
        {
            "model": "m",
            "max_tokens": 10,
            "messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}],
        },
        anthropic_error('messages: first message must use the "user" role'),
        "malformed_history",
    ),
    (
        "anthropic-alternation",
        "anthropic",
        {
            "model": "m",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        },
        anthropic_error(
            'messages: roles must alternate between "user" and "assistant", but found multiple '
            '"user" roles in a row'
        ),
        "malformed_history",
    ),
    (
        "anthropic-system-role",
        "anthropic",
        {"model": "m", "max_tokens": 10, "messages": [{"role": "system", "content": "s"}]},
        anthropic_error(
            'messages: Unexpected role "system". The Messages API accepts a top-level `system` '
            'parameter, not "system" as an input message role.'
        ),
        "invalid_request",
    ),
    (
        "anthropic-empty-content",
        "anthropic",
        {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": ""}]},
        anthropic_error(
            "messages.0: all messages must have non-empty content except for the optional final "
            "assistant message"
        ),
        "malformed_history",
    ),
    (
        "anthropic-max-tokens-required",
        "anthropic",
        {"model": "m", "messages": [{"role": "user", "content": "u"}]},
        anthropic_error("max_tokens: Field required"),
        "invalid_request",
    ),
    (
        "gemini-first-content",
        "gemini",
        {
            "contents": [
                {"role": "model", "parts": [{"text": "m"}]},
                {"role": "user", "parts": [{"text": "u"}]},
            ]
        },
        gemini_error("First content should be with role 'user', got model"),
        "malformed_history",
    ),
    (
        "gemini-alternation",
        "gemini",
        {
            "contents": [
                {"role": "user", "parts": [{"text": "a"}]},
                {"role": "user", "parts": [{"text": "b"}]},
            ]
        },
        gemini_error("Please ensure that multiturn requests alternate between user and model."),
        "malformed_history",
    ),
    (
        "gemini-response-count",
        "gemini",
        {
            "contents": [
                {"role": "user", "parts": [{"text": "u"}]},
                {
                    "role": "model",
                    "parts": [
                        {"functionCall": {"name": "f", "args": {}}},
                        {"functionCall": {"name": "g", "args": {}}},
                    ],
                },
                {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]},
            ]
        },
        gemini_error(
            "Please ensure that the number of function response parts is equal to the number of "
            "function call parts of the function call turn."
        ),
        "malformed_history",
    ),
    (
        "gemini-orphan-response",
        "gemini",
        {"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}]},
        gemini_error(
            "Please ensure that function response turn comes immediately after a function call turn."
        ),
        "malformed_history",
    ),
    (
        "gemini-ends-with-model",
        "gemini",
        {
            "contents": [
                {"role": "user", "parts": [{"text": "u"}]},
                {"role": "model", "parts": [{"text": "m"}]},
            ]
        },
        gemini_error("Please ensure that multiturn requests ends with a user role or a function response."),
        "malformed_history",
    ),
    (
        "gemini-bad-role",
        "gemini",
        {"contents": [{"role": "assistant", "parts": [{"text": "u"}]}]},
        gemini_error("Please use a valid role: user, model."),
        "invalid_request",
    ),
    (
        "bedrock-first-message",
        "bedrock-converse",
        {"messages": [{"role": "assistant", "content": [{"text": "a"}]}]},
        {
            "message": "A conversation must start with a user message. Try again with a conversation "
            "that starts "
            "with a user message."
        },
        "malformed_history",
    ),
    (
        "bedrock-alternation",
        "bedrock-converse",
        {
            "messages": [
                {"role": "user", "content": [{"text": "a"}]},
                {"role": "user", "content": [{"text": "b"}]},
            ]
        },
        {
            "message": "A conversation must alternate between user and assistant roles. Make sure the "
            "conversation "
            "alternates between user and assistant roles and try again."
        },
        "malformed_history",
    ),
    (
        "bedrock-missing-tool-result",
        "bedrock-converse",
        {
            "messages": [
                {"role": "user", "content": [{"text": "u"}]},
                {
                    "role": "assistant",
                    "content": [{"toolUse": {"toolUseId": "tooluse_a", "name": "f", "input": {}}}],
                },
                {"role": "user", "content": [{"text": "no result"}]},
            ]
        },
        {"message": "Expected toolResult blocks at messages.2.content for the following Ids: tooluse_a"},
        "malformed_history",
    ),
    (
        "bedrock-too-many-results",
        "bedrock-converse",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"toolResult": {"toolUseId": "tooluse_b", "content": [{"text": "r"}]}}],
                }
            ]
        },
        {
            "message": "The number of toolResult blocks at messages.0.content exceeds the number of "
            "toolUse blocks "
            "of previous turn."
        },
        "malformed_history",
    ),
    (
        "bedrock-empty-content",
        "bedrock-converse",
        {"messages": [{"role": "user", "content": []}]},
        {
            "message": "The content field in the Message object at messages.0 is empty. Add a "
            "ContentBlock object "
            "to the content field and try again."
        },
        "malformed_history",
    ),
]


@pytest.mark.parametrize(
    ("fmt", "body", "expected", "outcome"),
    [c[1:] for c in VALIDATION_CASES],
    ids=[c[0] for c in VALIDATION_CASES],
)
def test_each_validation_rule_answers_the_real_status_and_body(
    fmt: str, body: dict[str, Any], expected: dict[str, Any], outcome: str
) -> None:
    provider = MockProvider(fmt, context_window=100_000)
    response = post(provider, body)
    assert response.status_code == 400
    assert response.json() == expected
    assert provider.last_call.outcome == outcome
    assert provider.last_call.usage is None


def test_bedrock_errors_carry_the_validation_exception_header() -> None:
    response = post(MockProvider("bedrock-converse", context_window=100), {"messages": []})
    assert response.headers["x-amzn-errortype"] == (
        "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/"
    )
    assert response.headers["content-type"] == "application/json"


# The rules SPEC §2 names as malformed history: pairing, alternation, a tool message without tool_calls.
SPEC_MALFORMED = (
    "openai-dangling-tool-calls",
    "openai-tool-without-call",
    "responses-orphan-output",
    "responses-missing-output",
    "anthropic-dangling-tool-use",
    "anthropic-unexpected-result",
    "anthropic-alternation",
    "gemini-alternation",
    "gemini-response-count",
    "gemini-orphan-response",
    "bedrock-alternation",
    "bedrock-missing-tool-result",
    "bedrock-too-many-results",
)


@pytest.mark.parametrize("case", [c for c in VALIDATION_CASES if c[0] in SPEC_MALFORMED], ids=SPEC_MALFORMED)
def test_pairing_and_alternation_errors_classify_as_malformed_history(case: tuple[Any, ...]) -> None:
    _, fmt, body, _, _ = case
    assert classify_kind(post(MockProvider(fmt, context_window=100_000), body)) == "malformed_history"


VALID_TOOL_ROUND_TRIPS = {
    "openai-chat": {
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": "u"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "c2", "content": "r2"},
            {"role": "tool", "tool_call_id": "c1", "content": "r1"},
            {"role": "user", "content": "thanks"},
        ],
    },
    "openai-responses": {
        "model": "gpt-4o",
        "input": [
            {"role": "user", "content": "u"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "r1"},
        ],
    },
    "anthropic": {
        "model": "m",
        "max_tokens": 50,
        "messages": [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r"}]},
            {"role": "assistant", "content": "prefill"},
        ],
    },
    "gemini": {
        "contents": [
            {"role": "user", "parts": [{"text": "u"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"ok": True}}}]},
        ]
    },
    "bedrock-converse": {
        "messages": [
            {"role": "user", "content": [{"text": "u"}]},
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "f", "input": {}}}]},
            {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "r"}]}}]},
        ]
    },
}


@pytest.mark.parametrize("fmt", list(PATHS))
def test_a_well_paired_tool_round_trip_is_accepted(fmt: str) -> None:
    provider = MockProvider(fmt, context_window=10_000)
    assert post(provider, VALID_TOOL_ROUND_TRIPS[fmt]).status_code == 200
    assert provider.last_call.message_count == len(
        VALID_TOOL_ROUND_TRIPS[fmt].get("messages")
        or VALID_TOOL_ROUND_TRIPS[fmt].get("input")
        or VALID_TOOL_ROUND_TRIPS[fmt]["contents"]
    )


INVALID_JSON = {
    "openai-chat": "We could not parse the JSON body of your request.",
    "openai-responses": "We could not parse the JSON body of your request.",
    "anthropic": "There was an issue with your request body: invalid JSON",
    "gemini": "Invalid JSON payload received.",
    "bedrock-converse": "Unable to parse request body",
}


@pytest.mark.parametrize("fmt", list(PATHS))
def test_a_body_that_is_not_json_gets_the_provider_parse_error(fmt: str) -> None:
    provider = MockProvider(fmt, context_window=100)
    response = post(provider, b"{not json")
    assert response.status_code == 400
    assert INVALID_JSON[fmt] in response.text
    assert provider.last_call.outcome == "invalid_request"


def test_unknown_path_is_a_404_naming_the_served_endpoint() -> None:
    provider = MockProvider("anthropic", context_window=100)
    response = post(provider, user_body("anthropic"), path="/v1/complete")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == (
        "ctxsim MockProvider(anthropic) serves POST /v1/messages; got POST /v1/complete"
    )
    assert provider.last_call.outcome == "not_found"


@pytest.mark.parametrize(
    ("fmt", "body"),
    [
        ("openai-chat", {"model": "gpt-4o", "messages": "hello"}),
        ("anthropic", {"model": "m", "max_tokens": "many", "messages": [{"role": "user", "content": "u"}]}),
        ("gemini", {"contents": ["just text"]}),
        ("bedrock-converse", {"messages": [{"role": "user", "content": "not blocks"}]}),
    ],
)
def test_a_body_of_the_wrong_shape_gets_a_400_not_a_crash(fmt: str, body: dict[str, Any]) -> None:
    provider = MockProvider(fmt, context_window=1000)
    response = post(provider, body)
    assert response.status_code == 400
    assert "ctxsim MockProvider could not read the request body" in response.text
    assert provider.last_call.outcome == "invalid_request"


def test_streaming_requests_get_an_event_stream_and_their_errors_stay_json() -> None:
    provider = MockProvider("openai-chat", context_window=100, script=["streamed"])
    streamed = post(provider, {**user_body("openai-chat"), "stream": True})
    assert streamed.status_code == 200
    assert streamed.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert streamed.text.endswith("data: [DONE]\n\n")
    too_long = post(provider, {**user_body("openai-chat", "x" * 1000), "stream": True})
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"


# -- context overflow ----------------------------------------------------------------

OVERFLOWS = {
    "openai-chat": openai_error(
        "This model's maximum context length is 100 tokens. However, your messages resulted in 250 tokens. "
        "Please reduce the length of the messages.",
        "messages",
        "context_length_exceeded",
    ),
    "openai-responses": openai_error(
        "Your input exceeds the context window of this model. Please adjust your input and try again.",
        "input",
        "context_length_exceeded",
    ),
    "anthropic": anthropic_error("prompt is too long: 250 tokens > 100 maximum"),
    "gemini": gemini_error("The input token count (250) exceeds the maximum number of tokens allowed (100)."),
    "bedrock-converse": {"message": "Input is too long for requested model."},
}


@pytest.mark.parametrize("fmt", list(PATHS))
def test_overflow_is_answered_with_the_real_overflow_body(fmt: str) -> None:
    provider = MockProvider(fmt, context_window=100)
    body = user_body(fmt, "x" * 1000)
    if fmt == "anthropic":
        body["max_tokens"] = 10
    response = post(provider, body)
    assert response.status_code == 400
    assert response.json() == OVERFLOWS[fmt]
    assert (provider.last_call.outcome, provider.last_call.input_tokens) == ("context_overflow", 250)
    assert classify_kind(response) == "context_overflow"


def test_input_plus_max_tokens_over_the_window_uses_the_completion_variants() -> None:
    openai = post(MockProvider("openai-chat", context_window=300), user_body("openai-chat", "x" * 1000, 100))
    assert openai.json()["error"]["message"] == (
        "This model's maximum context length is 300 tokens. However, you requested 350 tokens (250 in the "
        "messages, 100 in the completion). Please reduce the length of the messages or completion."
    )
    anthropic = post(MockProvider("anthropic", context_window=300), user_body("anthropic", "x" * 1000, 100))
    assert anthropic.json()["error"]["message"] == (
        "input length and `max_tokens` exceed context limit: 250 + 100 > 300, decrease input length or "
        "`max_tokens` and try again"
    )
    assert classify_kind(openai) == classify_kind(anthropic) == "context_overflow"


def test_prompt_exactly_at_the_window_passes() -> None:
    provider = MockProvider("gemini", context_window=250)
    assert post(provider, user_body("gemini", "x" * 1000)).status_code == 200


OUTPUT_CAPS = {
    "openai-chat": "max_tokens is too large: 500. This model supports at most 100 completion tokens, whereas "
    "you provided 500.",
    "openai-responses": "Invalid 'max_output_tokens': integer above maximum value. Expected a value <= 100, "
    "but got 500 instead.",
    "anthropic": "max_tokens: 500 > 100, which is the maximum allowed number of output tokens for "
    "claude-sonnet-4-20250514",
    "gemini": "Unable to submit request because it has a maxOutputTokens value of 500 but the supported "
    "range is from 1 (inclusive) to 101 (exclusive). Update the value and try again.",
    "bedrock-converse": "The maximum tokens you requested exceeds the model limit of 100. Try again with a "
    "maximum tokens value that is lower than 100.",
}


@pytest.mark.parametrize("fmt", list(PATHS))
def test_max_tokens_above_the_output_cap_gets_the_provider_error(fmt: str) -> None:
    provider = MockProvider(fmt, context_window=10_000, max_output_tokens_cap=100)
    response = post(provider, user_body(fmt, max_tokens=500))
    assert response.status_code == 400
    assert OUTPUT_CAPS[fmt] in response.text
    assert provider.last_call.outcome == "invalid_request"


# -- rate limits ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", list(PATHS))
def test_rate_limited_calls_get_the_provider_429_and_classify_as_rate_limit(fmt: str) -> None:
    provider = MockProvider(fmt, context_window=10_000, rate_limit_calls={2})
    assert post(provider, user_body(fmt)).status_code == 200
    limited = post(provider, user_body(fmt))
    assert limited.status_code == 429
    assert post(provider, user_body(fmt)).status_code == 200
    assert [c.outcome for c in provider.calls] == ["ok", "rate_limit", "ok"]
    assert classify_kind(limited) == "rate_limit"


def test_rate_limit_bodies_are_the_real_ones() -> None:
    openai = rate_limit_response("openai-chat", model="gpt-4o", retry_after=7, requested_tokens=1200).json()
    assert openai["error"]["code"] == "rate_limit_exceeded"
    assert openai["error"]["message"].startswith(
        "Rate limit reached for gpt-4o in organization org-ctxsim on tokens per min (TPM): Limit 30000, "
        "Used 30000, Requested 1200. Please try again in 7s."
    )
    anthropic = rate_limit_response("anthropic")
    assert anthropic.json()["error"]["type"] == "rate_limit_error"
    assert anthropic.headers["retry-after"] == "20"
    assert rate_limit_response("gemini").json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    bedrock = rate_limit_response("bedrock-converse")
    assert bedrock.headers["x-amzn-errortype"].startswith("ThrottlingException:")
    with pytest.raises(ValueError, match="unknown wire format 'grpc'; valid formats: openai-chat"):
        rate_limit_response("grpc")


# -- tokens, caching, scripts, ids ---------------------------------------------------------


def test_token_estimate_counts_text_tool_arguments_tools_and_images() -> None:
    body = {
        "model": "gpt-4o",
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "a" * 100},
                    {"type": "image_url", "image_url": {"url": "http://x/i.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "read", "arguments": '{"p": 1}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": "b" * 40},
        ],
    }
    provider = MockProvider("openai-chat", context_window=10_000)
    post(provider, body)
    tools_chars = len(json.dumps(body["tools"], separators=(",", ":")))
    expected_chars = 100 + len("read") + len('{"p": 1}') + 40 + tools_chars
    assert provider.last_call.input_tokens == estimate_tokens(expected_chars, 1)
    assert estimate_tokens(expected_chars, 1) == -(-expected_chars // 4) + 85


def test_anthropic_cache_breakpoints_write_then_read() -> None:
    system = [{"type": "text", "text": "S" * 8000, "cache_control": {"type": "ephemeral"}}]
    body = {
        "model": "claude-sonnet-4",
        "max_tokens": 100,
        "system": system,
        "messages": [{"role": "user", "content": "hi"}],
    }
    provider = MockProvider("anthropic", context_window=100_000)
    first = post(provider, body).json()["usage"]
    second = post(provider, {**body, "messages": [{"role": "user", "content": "again"}]}).json()["usage"]
    assert first["cache_creation_input_tokens"] == 2000
    assert (first["cache_read_input_tokens"], first["input_tokens"]) == (0, 1)
    assert (second["cache_creation_input_tokens"], second["cache_read_input_tokens"]) == (0, 2000)
    assert second["input_tokens"] == 2  # "again" = 5 chars


def test_short_cache_prefixes_are_not_cached() -> None:
    body = {
        "model": "m",
        "max_tokens": 10,
        "system": [{"type": "text", "text": "short", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hi"}],
    }
    usage = post(MockProvider("anthropic", context_window=1000), body).json()["usage"]
    assert usage["cache_creation_input_tokens"] == usage["cache_read_input_tokens"] == 0


def test_bedrock_cache_points_report_cache_tokens() -> None:
    body = {
        "system": [{"text": "S" * 8000}, {"cachePoint": {"type": "default"}}],
        "messages": [{"role": "user", "content": [{"text": "hi"}]}],
    }
    provider = MockProvider("bedrock-converse", context_window=100_000)
    first = post(provider, body).json()["usage"]
    second = post(provider, body).json()["usage"]
    assert (first["cacheWriteInputTokens"], second["cacheReadInputTokens"]) == (2000, 2000)


def test_script_callable_receives_the_parsed_request() -> None:
    seen: list[ParsedRequest] = []

    def script(request: ParsedRequest) -> str:
        seen.append(request)
        return f"you sent {request.message_count} messages"

    provider = MockProvider("openai-chat", context_window=1000, script=script)
    doc = post(provider, user_body("openai-chat", max_tokens=50)).json()
    assert doc["choices"][0]["message"]["content"] == "you sent 1 messages"
    assert (seen[0].format, seen[0].model, seen[0].max_tokens, seen[0].call_index) == (
        "openai-chat",
        "gpt-4o",
        50,
        1,
    )


def test_an_exhausted_script_raises_a_clear_lookup_error() -> None:
    provider = MockProvider("openai-chat", context_window=1000, script=iter(["one"]))
    post(provider, user_body("openai-chat"))
    with pytest.raises(LookupError, match="MockProvider script is exhausted at call 2"):
        post(provider, user_body("openai-chat"))


def test_default_script_acknowledges_deterministically() -> None:
    doc = post(MockProvider("anthropic", context_window=1000), user_body("anthropic", "x" * 40)).json()
    assert doc["content"][0]["text"] == "Acknowledged turn 1: 1 messages, about 10 input tokens."


def test_reply_rejects_tool_arguments_that_are_not_a_json_object() -> None:
    with pytest.raises(ValueError, match="Reply tool call 'f': arguments must be a JSON object"):
        Reply("x", (ToolCall("", "f", "[1]"),))
    with pytest.raises(ValueError, match="arguments are not JSON"):
        Reply("x", (ToolCall("", "f", "{"),))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"context_window": 0},
        {"context_window": 10, "chars_per_token": 0},
        {"context_window": 10, "max_output_tokens_cap": 0},
    ],
)
def test_bad_provider_settings_fail_early(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be"):
        MockProvider("anthropic", **kwargs)
    with pytest.raises(ValueError, match="unknown wire format 'claude'"):
        MockProvider("claude", context_window=10)


def test_ids_are_deterministic_per_seed() -> None:
    def ids(seed: int) -> str:
        script = [Reply("x", (READ_CALL,))]
        provider = MockProvider("anthropic", context_window=1000, script=script, seed=seed)
        doc = post(provider, user_body("anthropic")).json()
        return doc["id"] + doc["content"][1]["id"]

    assert ids(1) == ids(1)
    assert ids(1) != ids(2)


def test_calls_record_request_bytes_and_message_count() -> None:
    provider = MockProvider("openai-chat", context_window=1000)
    body = json.dumps(VALID_TOOL_ROUND_TRIPS["openai-chat"]).encode()
    post(provider, body)
    call = provider.last_call
    assert (call.index, call.request_bytes, call.message_count, provider.call_count) == (1, len(body), 5, 1)
    assert call.request.url.path == "/v1/chat/completions"
    assert call.response.status_code == 200


def test_bedrock_model_id_is_url_decoded_from_the_path() -> None:
    provider = MockProvider("bedrock-converse", context_window=1000)
    post(provider, user_body("bedrock-converse"))
    assert provider.last_call.model == "anthropic.claude-3-5-sonnet-20241022-v2:0"


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        ("/v1/chat/completions", "openai-chat"),
        ("/openai/v1/responses", "openai-responses"),
        ("/v1/messages", "anthropic"),
        ("/v1beta/models/gemini-2.5-flash:generateContent", "gemini"),
        ("/model/us.anthropic.claude-sonnet-4-20250514-v1:0/converse", "bedrock-converse"),
        ("/v1/embeddings", None),
    ],
)
def test_format_for_path(path: str, fmt: str | None) -> None:
    assert format_for_path(path) == fmt


# -- prices ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("anthropic.claude-3-5-sonnet-20241022-v2:0", "claude-3-5-sonnet"),
        ("claude-opus-4-20250514", "claude-opus-4"),
        ("gemini-2.5-flash", "gemini-2.5-flash"),
    ],
)
def test_price_for_picks_the_longest_matching_family(model: str, family: str) -> None:
    assert price_for(model) == PRICES[family]


def test_unknown_models_use_the_default_price() -> None:
    assert price_for("mystery-model") == DEFAULT_PRICE


def test_cost_prices_input_output_and_cache_tokens() -> None:
    usage = Usage(
        1_000_000,
        100_000,
        cache_read_tokens=2_000_000,
        cache_write_tokens=1_000_000,
        model="claude-sonnet-4-20250514",
    )
    assert cost(usage) == pytest.approx(3.00 + 1.50 + 0.60 + 3.75)
    assert cost(usage, Price(1, 1, 1, 1)) == pytest.approx(4.1)


def test_provider_total_cost_uses_its_price_override() -> None:
    provider = MockProvider(
        "openai-chat", context_window=10_000, script=["x" * 400], prices=Price(1, 2, 0, 0)
    )
    post(provider, user_body("openai-chat", "y" * 4000))
    assert provider.total_usage == Usage(1000, 100)
    assert provider.total_cost == pytest.approx((1000 * 1 + 100 * 2) / 1_000_000)
