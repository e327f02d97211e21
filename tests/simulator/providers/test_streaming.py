"""Streamed mock answers: each provider's real event sequence, read back by the official SDKs.

The SDK tests go through a real loopback server (the SDKs are built on httpx2, which
``httpx.MockTransport`` does not intercept), with ``max_retries=0``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ctxrecover.messages import ToolCall
from simulator.providers.mock import MockProvider, Reply
from simulator.providers.service import MockService
from simulator.providers.streaming import DELTA_CHARS, eventstream_frame
from simulator.proxy.loopback import LoopbackServer

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

LONG_TEXT = "The quick brown fox jumps over the lazy dog; " * 6  # several deltas
CALL = ToolCall("", "read_file", '{"path": "src/app.py", "lines": [1, 40]}')
Served = tuple[LoopbackServer, MockService]
GEMINI_PATH = "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
BEDROCK_PATH = "/model/anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse-stream"


def sse_data(text: str) -> list[tuple[str | None, str]]:
    """(event, data) pairs of an SSE body, as a spec-following parser reads them."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        if not block.strip():
            continue
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((fields.get("event"), fields["data"]))
    return events


def post(handler: Any, path: str, body: dict[str, Any]) -> httpx.Response:
    with httpx.Client(transport=httpx.MockTransport(handler), base_url="http://mock") as client:
        return client.post(path, json=body)


# -- the event sequences, checked against the non-streamed reply ---------------------------


def test_openai_chat_stream_reassembles_to_the_plain_reply_and_ends_with_done() -> None:
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "hi"}],
        "stream_options": {"include_usage": True},
    }
    plain = post(
        MockProvider("openai-chat", context_window=10_000, script=[LONG_TEXT]), "/v1/chat/completions", body
    ).json()
    streamed = post(
        MockProvider("openai-chat", context_window=10_000, script=[LONG_TEXT]),
        "/v1/chat/completions",
        {**body, "stream": True},
    )
    events = sse_data(streamed.text)
    assert events[-1] == (None, "[DONE]")
    chunks = [json.loads(data) for _, data in events[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert {chunk["id"] for chunk in chunks} == {plain["id"]}
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": "", "refusal": None}
    text = "".join(d.get("content") or "" for d in deltas)
    assert text == plain["choices"][0]["message"]["content"] == LONG_TEXT
    assert max(len(d.get("content") or "") for d in deltas) == DELTA_CHARS
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == plain["usage"]
    # as on the real API: asked for usage, every chunk has the field, null until the usage chunk;
    # the completion and its chunks carry the same system fingerprint
    assert [chunk["usage"] for chunk in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert {chunk["system_fingerprint"] for chunk in chunks} == {plain["system_fingerprint"]} == {"fp_ctxsim"}


def test_openai_chat_stream_has_no_usage_chunk_unless_asked() -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    events = sse_data(
        post(MockProvider("openai-chat", context_window=10_000), "/v1/chat/completions", body).text
    )
    assert all("usage" not in json.loads(data) for _, data in events[:-1])


@pytest.mark.parametrize(
    ("fmt", "path", "stream_body"),
    [
        ("openai-chat", "/v1/chat/completions", {"stream": True}),
        ("openai-responses", "/v1/responses", {"stream": True}),
        ("anthropic", "/v1/messages", {"stream": True}),
    ],
)
def test_tool_call_arguments_stream_in_pieces_that_join_to_the_plain_arguments(
    fmt: str, path: str, stream_body: dict[str, Any]
) -> None:
    bodies = {
        "openai-chat": {"model": "gpt-4o", "messages": [{"role": "user", "content": "read"}]},
        "openai-responses": {"model": "gpt-4o", "input": "read"},
        "anthropic": {
            "model": "claude-sonnet-4",
            "max_tokens": 256,
            "messages": [{"role": "user", "content": "read"}],
        },
    }
    provider = MockProvider(fmt, context_window=10_000, script=[Reply("", (CALL,))])
    text = post(provider, path, {**bodies[fmt], **stream_body}).text
    payloads = [json.loads(data) for _, data in sse_data(text) if data != "[DONE]"]
    if fmt == "openai-chat":
        pieces = [
            tc["function"].get("arguments", "")
            for p in payloads
            if p["choices"]
            for tc in p["choices"][0]["delta"].get("tool_calls", [])
        ]
        assert payloads[-1]["choices"][0]["finish_reason"] == "tool_calls"
        assert json.loads("".join(pieces)) == json.loads(CALL.arguments)
    elif fmt == "openai-responses":
        pieces = [p["delta"] for p in payloads if p["type"] == "response.function_call_arguments.delta"]
        done = next(p for p in payloads if p["type"] == "response.function_call_arguments.done")
        assert "".join(pieces) == done["arguments"] == CALL.arguments
    else:
        pieces = [p["delta"]["partial_json"] for p in payloads if p["type"] == "content_block_delta"]
        stop = next(p for p in payloads if p["type"] == "message_delta")
        assert stop["delta"]["stop_reason"] == "tool_use"
        assert json.loads("".join(pieces)) == json.loads(CALL.arguments)


def test_gemini_streams_sse_chunks_with_alt_sse_and_a_json_array_without() -> None:
    body = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generationConfig": {"maxOutputTokens": 20},
    }
    provider = MockProvider("gemini", context_window=10_000, script=[LONG_TEXT, LONG_TEXT])
    sse = post(provider, GEMINI_PATH + "?alt=sse", body)
    assert sse.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert "\r\n\r\n" in sse.text
    chunks = [json.loads(data) for _, data in sse_data(sse.text)]
    array = post(provider, GEMINI_PATH, body).json()
    for stream in (chunks, array):
        text = "".join(p["text"] for c in stream for p in c["candidates"][0]["content"]["parts"])
        assert text == LONG_TEXT[:80]  # cut at maxOutputTokens (20 tokens × 4 chars)
        assert stream[-1]["candidates"][0]["finishReason"] == "MAX_TOKENS"
        assert "finishReason" not in stream[0]["candidates"][0]
        assert stream[-1]["usageMetadata"]["candidatesTokenCount"] == 20
    assert provider.last_call.outcome == "output_truncated"


def test_bedrock_converse_stream_frames_parse_with_botocore() -> None:
    from botocore import eventstream  # the sdks extra installs it: missing is a broken install, not a skip

    body = {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}
    provider = MockProvider("bedrock-converse", context_window=10_000, script=[Reply(LONG_TEXT, (CALL,))])
    response = post(provider, BEDROCK_PATH, body)
    assert response.headers["content-type"] == "application/vnd.amazon.eventstream"
    buffer = eventstream.EventStreamBuffer()
    buffer.add_data(response.content)
    events = [(m.headers[":event-type"], json.loads(m.payload)) for m in buffer]
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "messageStart" and kinds[-2:] == ["messageStop", "metadata"]
    text = "".join(p["delta"].get("text", "") for k, p in events if k == "contentBlockDelta")
    assert text == LONG_TEXT
    assert events[-2][1] == {"stopReason": "tool_use"}
    assert events[-1][1]["usage"]["outputTokens"] == provider.last_call.usage.output_tokens  # type: ignore[union-attr]


def test_an_eventstream_frame_has_valid_lengths_and_checksums() -> None:
    import binascii
    import struct

    frame = eventstream_frame("messageStop", {"stopReason": "end_turn"})
    total, headers = struct.unpack("!II", frame[:8])
    assert total == len(frame)
    assert struct.unpack("!I", frame[8:12])[0] == binascii.crc32(frame[:8])
    assert struct.unpack("!I", frame[-4:])[0] == binascii.crc32(frame[:-4])
    assert json.loads(frame[12 + headers : -4]) == {"stopReason": "end_turn"}


def test_keep_calls_bounds_the_call_log_while_the_counters_count_everything() -> None:
    provider = MockProvider("anthropic", context_window=10_000, keep_calls=3)
    body = {"model": "claude-sonnet-4", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(10):
        post(provider, "/v1/messages", body)
    assert len(provider.calls) == 3 and provider.call_count == 10
    assert [call.index for call in provider.calls] == [8, 9, 10]
    one = provider.calls[-1].usage
    assert one is not None
    assert provider.total_usage.input_tokens == 10 * one.input_tokens
    assert provider.total_cost == pytest.approx(10 * provider.cost(one))


# -- the official SDKs over a loopback server --------------------------------------------


@pytest.fixture
def openai_server() -> Iterator[Served]:
    service = MockService(
        [
            MockProvider(fmt, context_window=100_000, script=lambda request: LONG_TEXT)
            for fmt in ("openai-chat", "openai-responses")
        ],
        models=["gpt-4o", "gpt-4o-mini"],
    )
    with LoopbackServer(service) as server:
        yield server, service


def test_openai_sdk_streams_chat_completions_with_usage(openai_server: Served) -> None:
    server, service = openai_server
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-test", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == LONG_TEXT
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    usage, served = chunks[-1].usage, service.providers["openai-chat"].last_call.usage
    assert usage is not None and served is not None and usage.completion_tokens == served.output_tokens


def test_openai_sdk_stream_helper_reports_truncation_as_length(openai_server: Served) -> None:
    server, _ = openai_server
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-test", max_retries=0) as client:
        with client.chat.completions.stream(
            model="gpt-4o", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            with pytest.raises(openai.LengthFinishReasonError) as caught:
                stream.get_final_completion()
    final = caught.value.completion
    assert final.choices[0].finish_reason == "length"
    assert final.choices[0].message.content == LONG_TEXT[:20]


def test_openai_sdk_streams_the_responses_api_to_a_final_response(openai_server: Served) -> None:
    server, _ = openai_server
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-test", max_retries=0) as client:
        events = list(client.responses.create(model="gpt-4o", input="hi", stream=True))
        with client.responses.stream(model="gpt-4o", input="hi") as stream:
            final = stream.get_final_response()
        cut = list(client.responses.create(model="gpt-4o", input="hi", stream=True, max_output_tokens=5))
    kinds = [event.type for event in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].response.output_text == final.output_text == LONG_TEXT
    # cut at max_output_tokens the real API ends with response.incomplete, not response.completed
    assert cut[-1].type == "response.incomplete" and cut[-1].response.status == "incomplete"
    details = cut[-1].response.incomplete_details
    assert details is not None and details.reason == "max_output_tokens"
    assert cut[-1].response.output_text == LONG_TEXT[:20]


def test_openai_sdk_lists_the_models_of_mock_openai(openai_server: Served) -> None:
    server, _ = openai_server
    with openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-test", max_retries=0) as client:
        models = [model.id for model in client.models.list()]
        one = client.models.retrieve("gpt-4o")
    assert "gpt-4o" in models and one.id == "gpt-4o"


def test_anthropic_sdk_stream_helper_gets_the_message_its_stop_reason_and_usage() -> None:
    provider = MockProvider(
        "anthropic", context_window=100_000, script=[Reply(LONG_TEXT, (CALL,)), LONG_TEXT]
    )
    with (
        LoopbackServer(provider) as server,
        anthropic.Anthropic(base_url=server.base_url, api_key="sk-test", max_retries=0) as client,
    ):
        messages = [{"role": "user", "content": "read it"}]
        with client.messages.stream(model="claude-sonnet-4", max_tokens=1024, messages=messages) as stream:
            texts = list(stream.text_stream)
            tool_turn = stream.get_final_message()
        with client.messages.stream(model="claude-sonnet-4", max_tokens=8, messages=messages) as stream:
            truncated = stream.get_final_message()
    assert "".join(texts) == LONG_TEXT
    assert tool_turn.stop_reason == "tool_use"
    assert tool_turn.content[1].input == json.loads(CALL.arguments)  # type: ignore[union-attr]
    usage = provider.calls[0].usage
    assert usage is not None
    assert (tool_turn.usage.input_tokens, tool_turn.usage.output_tokens) == (
        usage.input_tokens,
        usage.output_tokens,
    )
    assert truncated.stop_reason == "max_tokens"
    assert truncated.content[0].text == LONG_TEXT[:32]  # type: ignore[union-attr]
