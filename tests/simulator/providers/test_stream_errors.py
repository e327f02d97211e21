"""Streams that fail mid-way: each provider's in-stream error, as the official parsers read it.

The SDKs read the streams over a real loopback server (they are built on httpx2, which
``httpx.MockTransport`` does not intercept), with ``max_retries=0``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from simulator.providers.mock import FORMATS, MockProvider, rate_limit_response
from simulator.providers.stream_errors import error_event, failing_stream, split_events
from simulator.proxy.loopback import LoopbackServer

TEXT = "The quick brown fox jumps over the lazy dog; " * 4
STREAM_REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "openai-chat": (
        "/v1/chat/completions",
        {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "openai-responses": ("/v1/responses", {"model": "gpt-4o", "stream": True, "input": "hi"}),
    "anthropic": (
        "/v1/messages",
        {
            "model": "claude-sonnet-4",
            "max_tokens": 512,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        },
    ),
    "gemini": (
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    ),
    "bedrock-converse": (
        "/model/anthropic.claude-3-5-sonnet/converse-stream",
        {"messages": [{"role": "user", "content": [{"text": "hi"}]}]},
    ),
}


def streamed(fmt: str, handler: Any = None) -> httpx.Response:
    path, body = STREAM_REQUESTS[fmt]
    handler = handler or MockProvider(fmt, context_window=10_000, script=[TEXT])
    with httpx.Client(transport=httpx.MockTransport(handler), base_url="http://mock") as client:
        return client.post(path, json=body)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_streamed_body_splits_into_its_events_and_joins_back(fmt: str) -> None:
    body = streamed(fmt).content
    events = split_events(fmt, body)
    assert len(events) > 5 and b"".join(events) == body


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_failing_stream_keeps_its_first_events_and_ends_with_the_error_event(fmt: str) -> None:
    error = rate_limit_response(fmt, model="m")
    provider = MockProvider(fmt, context_window=10_000, script=[TEXT])
    cut = streamed(fmt, lambda request: failing_stream(fmt, provider(request), error, after=3))
    whole = split_events(fmt, streamed(fmt).content)
    assert cut.status_code == 200
    assert cut.headers["content-type"] == streamed(fmt).headers["content-type"]
    assert split_events(fmt, cut.content) == [*whole[:3], error_event(fmt, error, sequence_number=3)]


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("anthropic", b'event: error\ndata: {"type":"error","error":{"type":"rate_limit_error","message":'),
        ("openai-chat", b'data: {"error":{"message":"Rate limit reached for m in organization org-ctxsim'),
        ("openai-responses", b'event: error\ndata: {"type":"error","code":"rate_limit_exceeded","message":'),
        (
            "gemini",
            b'data: {"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).",',
        ),
    ],
)
def test_the_sse_error_event_of_each_format(fmt: str, expected: bytes) -> None:
    event = error_event(fmt, rate_limit_response(fmt, model="m"), sequence_number=7)
    assert event.startswith(expected)
    assert event.endswith(b"\r\n\r\n" if fmt == "gemini" else b"\n\n")
    if fmt == "openai-responses":
        assert json.loads(event.split(b"data: ", 1)[1])["sequence_number"] == 7


def test_the_bedrock_error_is_an_exception_message_botocore_reads() -> None:
    eventstream = pytest.importorskip("botocore.eventstream")
    buffer = eventstream.EventStreamBuffer()
    buffer.add_data(error_event("bedrock-converse", rate_limit_response("bedrock-converse")))
    (message,) = list(buffer)
    assert dict(message.headers) == {
        ":exception-type": "throttlingException",
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    assert json.loads(message.payload) == {"message": "Too many tokens, please wait before trying again."}


def test_the_anthropic_sdk_raises_the_in_stream_error_with_its_body() -> None:
    anthropic = pytest.importorskip("anthropic")
    error = httpx.Response(
        529, json={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    provider = MockProvider("anthropic", context_window=10_000, script=[TEXT])
    with (
        LoopbackServer(
            lambda request: failing_stream("anthropic", provider(request), error, after=4)
        ) as server,
        anthropic.Anthropic(base_url=server.base_url, api_key="sk-test", max_retries=0) as client,
    ):
        stream = client.messages.create(
            model="claude-sonnet-4", max_tokens=64, stream=True, messages=[{"role": "user", "content": "hi"}]
        )
        with pytest.raises(anthropic.APIStatusError) as info:
            list(stream)
    assert info.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }


def test_the_openai_sdk_raises_the_in_stream_chat_error_and_yields_the_responses_one() -> None:
    openai = pytest.importorskip("openai")
    chat = MockProvider("openai-chat", context_window=10_000, script=[TEXT])
    responses = MockProvider("openai-responses", context_window=10_000, script=[TEXT])

    def handler(request: httpx.Request) -> httpx.Response:
        fmt, provider = (
            ("openai-chat", chat)
            if request.url.path.endswith("/completions")
            else ("openai-responses", responses)
        )
        return failing_stream(fmt, provider(request), rate_limit_response(fmt, model="gpt-4o"), after=3)

    with (
        LoopbackServer(handler) as server,
        openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-test", max_retries=0) as client,
    ):
        stream = client.chat.completions.create(
            model="gpt-4o", stream=True, messages=[{"role": "user", "content": "hi"}]
        )
        with pytest.raises(openai.APIError) as info:
            list(stream)
        events = list(client.responses.create(model="gpt-4o", input="hi", stream=True))
    assert isinstance(info.value.body, dict) and info.value.body["code"] == "rate_limit_exceeded"
    assert [event.type for event in events][-1] == "error"
    assert events[-1].code == "rate_limit_exceeded"  # type: ignore[union-attr]
