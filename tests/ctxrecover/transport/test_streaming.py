"""Streaming through the httpx senders, sync and async: the mock providers' real event streams.

For each wire format a streamed answer gives the very ChatResponse the unstreamed one gives
(text, tool calls, stop reason, truncation, usage, raw document), ``on_delta`` sees the text
as it arrives; an error inside a stream, a stream cut mid-way or ended early classifies as
the same failure unstreamed; what is not the provider's answer propagates as itself.
In process, over ``httpx.MockTransport`` (it serves sync and async clients alike).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any

import httpx
import pytest

from ctxrecover.classify import FailureKind, classify
from ctxrecover.messages import Message, ToolCall
from ctxrecover.transport import ChatRequest, SendFailed
from ctxrecover.transport.accumulate import ChatAccumulator
from simulator.providers.mock import FORMATS, MockProvider, Reply, rate_limit_response
from simulator.providers.openai import RESPONSES_CONTEXT_WINDOW
from simulator.providers.stream_errors import error_event, failing_stream, split_events
from simulator.providers.streaming import DELTA_CHARS, sse_event

pytestmark = pytest.mark.anyio

TEXT = "The quick brown fox jumps over the lazy dog; " * 4
CALL = ToolCall("", "read_file", '{"path": "src/app.py", "lines": [1, 40]}')
REPLIES = {
    "text": Reply(TEXT),
    "text-and-call": Reply(TEXT, (CALL,)),
    "only-a-call": Reply("", (CALL,)),
    "truncated": Reply(TEXT * 3),
}
REQUEST = ChatRequest((Message.system("Be brief."), Message.user("Read the file — é 日本")), max_tokens=400)
TRUNCATING = dataclasses.replace(REQUEST, max_tokens=20)
PATHS = {
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/m:streamGenerateContent",
    "bedrock-converse": "/model/m/converse-stream",
}
# Events of each mock stream after which some text has streamed (the place a failure strikes).
TEXT_AFTER = {"openai-chat": 3, "openai-responses": 6, "anthropic": 5, "gemini": 2, "bedrock-converse": 3}
CUT = "peer closed connection without sending complete message body (incomplete chunked read)"


def provider(fmt: str, reply: Reply = REPLIES["text"]) -> MockProvider:
    """A fresh mock: two of them with the same reply answer with the same ids."""
    return MockProvider(fmt, context_window=100_000, script=[reply], seed=11)


def pieces(text: str) -> list[str]:
    return [text[i : i + DELTA_CHARS] for i in range(0, len(text), DELTA_CHARS)]


async def failure(sending: Awaitable[Any]) -> SendFailed:
    with pytest.raises(SendFailed) as info:
        await sending
    return info.value


class DualStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body served in ``chunks`` that ends by raising ``error`` (a cut connection) when given."""

    def __init__(self, chunks: list[bytes], error: Exception | None = None) -> None:
        self.chunks, self.error = chunks, error

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if self.error is not None:
            raise self.error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.error is not None:
            raise self.error


def fresh(answer: httpx.Response) -> httpx.Response:
    """A new response like ``answer`` (a client binds the stream of the one it reads to its own kind)."""
    return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


def reserved(answer: httpx.Response, chunks: list[bytes], error: Exception | None = None) -> httpx.Response:
    """``answer``'s status and headers around another body (``chunks``, then ``error`` raised)."""
    headers = [(k, v) for k, v in answer.headers.multi_items() if k.lower() != "content-length"]
    return httpx.Response(answer.status_code, headers=headers, stream=DualStream(chunks, error))


# -- the same answer, streamed or not --------------------------------------------------------


@pytest.mark.parametrize("reply", REPLIES)
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_streamed_answer_is_the_unstreamed_answer(io: Any, fmt: str, reply: str) -> None:
    request = TRUNCATING if reply == "truncated" else REQUEST
    plain_provider, streamed_provider = provider(fmt, REPLIES[reply]), provider(fmt, REPLIES[reply])
    plain = await io.send(io.httpx(fmt, plain_provider), request)
    deltas: list[str] = []
    sender = io.httpx(fmt, streamed_provider, stream=True, on_delta=deltas.append)

    streamed = await io.send(sender, request)

    assert streamed == dataclasses.replace(plain, request_bytes=streamed.request_bytes)  # raw included
    assert streamed.request_bytes == streamed_provider.last_call.request_bytes == len(sender.render(request))
    assert streamed_provider.last_call.response.headers["content-type"].startswith(
        "application/vnd.amazon.eventstream" if fmt == "bedrock-converse" else "text/event-stream"
    )
    assert deltas == pieces(plain.message.content)  # in order, as they arrived
    assert streamed.truncated is (reply == "truncated")
    assert len(streamed.message.tool_calls) == (0 if reply in ("text", "truncated") else 1)


STREAM_ASKED = {
    "openai-chat": ("/v1/chat/completions", {}, {"stream": True, "stream_options": {"include_usage": True}}),
    "openai-responses": ("/v1/responses", {}, {"stream": True}),
    "anthropic": ("/v1/messages", {}, {"stream": True}),
    "gemini": ("/v1beta/models/m:streamGenerateContent", {"alt": "sse"}, {}),
    "bedrock-converse": ("/model/m/converse-stream", {}, {}),
}


@pytest.mark.parametrize("fmt", FORMATS)
async def test_the_request_asks_for_a_stream_as_the_real_api_does(io: Any, fmt: str) -> None:
    mock = provider(fmt)
    await io.send(io.httpx(fmt, mock, stream=True), ChatRequest(REQUEST.messages, extra={"temperature": 0}))
    path, query, fields = STREAM_ASKED[fmt]
    sent = mock.last_call.request
    body = json.loads(sent.content)
    assert (sent.url.path, dict(sent.url.params)) == (path, query)
    assert {key: body[key] for key in fields} == fields
    assert "stream" in body if fields else "stream" not in body
    assert body["temperature"] == 0  # the request's own fields stay


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_stream_read_one_byte_at_a_time_is_the_same_answer(io: Any, fmt: str) -> None:
    plain = await io.send(io.httpx(fmt, provider(fmt), stream=True), REQUEST)
    mock = provider(fmt)

    def trickle(request: httpx.Request) -> httpx.Response:
        answer = mock(request)
        body = answer.read()
        return reserved(answer, [body[i : i + 1] for i in range(len(body))])

    deltas: list[str] = []
    assert await io.send(io.httpx(fmt, trickle, stream=True, on_delta=deltas.append), REQUEST) == plain
    assert deltas == pieces(TEXT)


async def test_an_answer_that_does_not_stream_though_asked_is_read_whole(io: Any) -> None:
    plain = await io.send(io.httpx("anthropic", provider("anthropic")), REQUEST)
    deltas: list[str] = []
    sender = io.httpx(
        "anthropic", lambda r: httpx.Response(200, json=plain.raw), stream=True, on_delta=deltas.append
    )
    response = await io.send(sender, REQUEST)
    assert response == dataclasses.replace(plain, request_bytes=response.request_bytes)
    assert deltas == [TEXT]  # the whole text at once: the UI still gets it


async def test_a_gemini_stream_sent_as_one_json_array_is_read_as_its_chunks(io: Any) -> None:
    plain = await io.send(io.httpx("gemini", provider("gemini")), REQUEST)
    mock = provider("gemini")

    def without_sse(request: httpx.Request) -> httpx.Response:  # a gateway that drops the query
        return mock(
            httpx.Request(
                "POST", request.url.copy_with(query=None), headers=request.headers, content=request.content
            )
        )

    response = await io.send(io.httpx("gemini", without_sse, stream=True), REQUEST)
    assert mock.last_call.response.headers["content-type"].startswith("application/json")
    assert response == dataclasses.replace(plain, request_bytes=response.request_bytes)


# -- errors inside a stream ------------------------------------------------------------------


def anthropic_error(status: int, kind: str, message: str) -> httpx.Response:
    # https://docs.anthropic.com/en/api/errors
    return httpx.Response(status, json={"type": "error", "error": {"type": kind, "message": message}})


OPENAI_SERVER_ERROR = httpx.Response(  # https://platform.openai.com/docs/guides/error-codes (500)
    500,
    json={
        "error": {
            "message": "The server had an error while processing your request. Sorry about that!",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    },
)
GEMINI_INTERNAL = httpx.Response(  # https://ai.google.dev/gemini-api/docs/troubleshooting (500 INTERNAL)
    500,
    json={"error": {"code": 500, "message": "An internal error has occurred.", "status": "INTERNAL"}},
)
BEDROCK_INTERNAL = httpx.Response(  # ConverseStream API reference: InternalServerException, 500
    500,
    json={"message": "The server encountered an internal error while processing the request."},
    headers={
        "x-amzn-errortype": "InternalServerException:http://internal.amazon.com/coral/com.amazon.bedrock/"
    },
)


def overflow(fmt: str) -> httpx.Response:
    """The mock provider's own context-overflow answer of ``fmt``."""
    answer = provider(fmt).wire.overflow(200_000, 100_000, None)
    assert answer is not None
    return answer


ERRORS = [
    ("anthropic", anthropic_error(529, "overloaded_error", "Overloaded"), 529, FailureKind.RATE_LIMIT),
    (
        "anthropic",
        anthropic_error(500, "api_error", "Internal server error"),
        500,
        FailureKind.TRANSIENT_NETWORK,
    ),
    ("anthropic", rate_limit_response("anthropic"), 429, FailureKind.RATE_LIMIT),
    ("anthropic", overflow("anthropic"), 400, FailureKind.CONTEXT_OVERFLOW),
    ("openai-chat", OPENAI_SERVER_ERROR, None, FailureKind.TRANSIENT_NETWORK),
    ("openai-chat", rate_limit_response("openai-chat"), None, FailureKind.RATE_LIMIT),
    ("openai-responses", OPENAI_SERVER_ERROR, None, FailureKind.TRANSIENT_NETWORK),
    ("openai-responses", overflow("openai-responses"), None, FailureKind.CONTEXT_OVERFLOW),
    ("gemini", rate_limit_response("gemini"), 429, FailureKind.RATE_LIMIT),
    ("gemini", GEMINI_INTERNAL, 500, FailureKind.TRANSIENT_NETWORK),
    ("bedrock-converse", rate_limit_response("bedrock-converse"), 429, FailureKind.RATE_LIMIT),
    ("bedrock-converse", overflow("bedrock-converse"), 400, FailureKind.CONTEXT_OVERFLOW),
    ("bedrock-converse", BEDROCK_INTERNAL, 500, FailureKind.TRANSIENT_NETWORK),
]


def in_stream_document(fmt: str, error: httpx.Response) -> Any:
    """The JSON document the provider streams for ``error`` (an SSE event's data; an exception's payload)."""
    event = error_event(fmt, error, sequence_number=TEXT_AFTER[fmt])
    if fmt == "bedrock-converse":
        return json.loads(error.content)
    return json.loads(event.split(b"data: ", 1)[1])


@pytest.mark.parametrize(
    ("fmt", "error", "status", "kind"),
    ERRORS,
    ids=[f"{fmt}-{error.status_code}-{kind.value}" for fmt, error, _, kind in ERRORS],
)
async def test_an_error_inside_a_stream_classifies_as_the_same_error_unstreamed(
    io: Any, fmt: str, error: httpx.Response, status: int | None, kind: FailureKind
) -> None:
    unstreamed = await failure(io.send(io.httpx(fmt, lambda request: fresh(error)), REQUEST))
    mock = provider(fmt)
    deltas: list[str] = []
    sender = io.httpx(
        fmt,
        lambda request: failing_stream(fmt, mock(request), error, after=TEXT_AFTER[fmt]),
        stream=True,
        on_delta=deltas.append,
    )

    streamed = await failure(io.send(sender, REQUEST))

    assert classify(streamed).kind is classify(unstreamed).kind is kind
    assert str(streamed) == f"the {fmt} stream from http://provider.test{PATHS[fmt]} reported an error"
    assert streamed.status_code == status  # the status the error states, never the stream's 200
    assert json.loads(streamed.body or "") == in_stream_document(fmt, error)
    assert streamed.request_bytes == mock.last_call.request_bytes
    assert deltas and TEXT.startswith("".join(deltas))  # what streamed before the error reached the UI


OPENROUTER_OVERFLOW = (  # https://github.com/OpenHands/OpenHands/issues/8149
    "This endpoint's maximum context length is 40960 tokens. However, you requested about 42988 tokens "
    "(38892 of text input, 4096 in the output). Please reduce the length of either one, or use the "
    '"middle-out" transform to compress your prompt automatically.'
)


def openrouter_error_chunk(code: int, message: str) -> bytes:
    """OpenRouter's mid-stream error: a chunk with ``error`` and ``finish_reason: "error"``
    (https://openrouter.ai/docs/api-reference/streaming, "Handling Errors During Streaming")."""
    chunk = {
        "id": "gen-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "qwen/qwen3-30b-a3b",
        "provider": "Chutes",
        "error": {"code": code, "message": message},
        "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
    }
    return sse_event(chunk)


FAILED_RESPONSE = (
    sse_event(  # https://platform.openai.com/docs/api-reference/responses-streaming/response/failed
        {
            "type": "response.failed",
            "sequence_number": 6,
            "response": {
                "id": "resp_1",
                "object": "response",
                "status": "failed",
                "error": {"code": "context_length_exceeded", "message": RESPONSES_CONTEXT_WINDOW},
                "incomplete_details": None,
            },
        },
        "response.failed",
    )
)


@pytest.mark.parametrize(
    ("fmt", "events", "tail", "unstreamed", "status", "kind"),
    [
        (
            "openai-chat",
            -2,  # every event through the finish_reason "length" chunk (then usage and [DONE] would come)
            openrouter_error_chunk(400, OPENROUTER_OVERFLOW),
            httpx.Response(400, json={"error": {"code": 400, "message": OPENROUTER_OVERFLOW}}),
            400,
            FailureKind.CONTEXT_OVERFLOW,
        ),
        (
            "openai-chat",
            -2,
            openrouter_error_chunk(502, "Provider returned error"),
            httpx.Response(502, json={"error": {"code": 502, "message": "Provider returned error"}}),
            502,
            FailureKind.TRANSIENT_NETWORK,
        ),
        (
            "openai-responses",
            6,
            FAILED_RESPONSE,
            overflow("openai-responses"),
            None,
            FailureKind.CONTEXT_OVERFLOW,
        ),
    ],
    ids=["openrouter-overflow-after-length", "openrouter-502-after-length", "responses-failed"],
)
async def test_a_provider_specific_error_event_classifies_as_the_same_error_unstreamed(
    io: Any,
    fmt: str,
    events: int,
    tail: bytes,
    unstreamed: httpx.Response,
    status: int | None,
    kind: FailureKind,
) -> None:
    mock = provider(fmt, REPLIES["truncated"])

    def answer(request: httpx.Request) -> httpx.Response:
        streamed = mock(request)
        return reserved(streamed, [*split_events(fmt, streamed.read())[:events], tail])

    plain = await failure(io.send(io.httpx(fmt, lambda request: fresh(unstreamed)), TRUNCATING))
    streamed = await failure(io.send(io.httpx(fmt, answer, stream=True), TRUNCATING))

    assert classify(streamed).kind is classify(plain).kind is kind
    assert streamed.status_code == status
    assert json.loads(streamed.body or "") == json.loads(tail.split(b"data: ", 1)[1])


# -- streams cut or ended early --------------------------------------------------------------


@pytest.mark.parametrize(
    ("history_chars", "kind"),
    [(1_000, FailureKind.TRANSIENT_NETWORK), (600_000, FailureKind.SUSPECTED_PAYLOAD)],
)
@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_stream_cut_mid_way_classifies_as_a_connection_dropped_before_the_answer(
    io: Any, fmt: str, history_chars: int, kind: FailureKind
) -> None:
    def drop(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError(CUT, request=request)

    unstreamed = await failure(io.send(io.httpx(fmt, drop), REQUEST))
    mock = provider(fmt)

    def cut(request: httpx.Request) -> httpx.Response:
        answer = mock(request)
        body = answer.read()
        return reserved(answer, [body[: len(body) // 2]], httpx.RemoteProtocolError(CUT, request=request))

    deltas: list[str] = []
    streamed = await failure(io.send(io.httpx(fmt, cut, stream=True, on_delta=deltas.append), REQUEST))

    assert isinstance(streamed.__cause__, httpx.RemoteProtocolError)
    assert str(streamed) == f"RemoteProtocolError: {CUT}"
    assert streamed.status_code is None
    expected = classify(unstreamed, history_chars=history_chars).kind
    assert classify(streamed, history_chars=history_chars).kind is expected is kind
    assert streamed.request_bytes == mock.last_call.request_bytes
    assert deltas and TEXT.startswith("".join(deltas))


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_stream_that_ends_before_its_last_event_is_an_unexpected_eof(io: Any, fmt: str) -> None:
    mock = provider(fmt)

    def ended(request: httpx.Request) -> httpx.Response:
        answer = mock(request)
        return reserved(answer, split_events(fmt, answer.read())[: TEXT_AFTER[fmt]])

    error = await failure(io.send(io.httpx(fmt, ended, stream=True), REQUEST))

    assert str(error) == (
        f"unexpected EOF: the {fmt} stream from http://provider.test{PATHS[fmt]} ended before its last event"
    )
    assert (error.status_code, error.body, error.request_bytes) == (None, None, mock.last_call.request_bytes)
    assert classify(error, history_chars=1_000).kind is FailureKind.TRANSIENT_NETWORK
    assert classify(error, history_chars=600_000).kind is FailureKind.SUSPECTED_PAYLOAD


@pytest.mark.parametrize(
    ("fmt", "spoil", "message", "body"),
    [
        (
            "openai-chat",
            lambda events: [events[0], b"data: {not json\n\n"],
            "event data is not JSON",
            "{not json",
        ),
        ("anthropic", lambda events: [events[0], b"event: error\ndata: Overloaded\n\n"], None, "Overloaded"),
        (
            "bedrock-converse",
            lambda events: [events[0][:-1] + bytes([events[0][-1] ^ 1])],
            "event-stream message checksum mismatch",
            None,
        ),
    ],
    ids=["data-not-json", "error-event-not-json", "bad-checksum"],
)
async def test_a_stream_that_cannot_be_read_is_a_send_failed_with_the_offending_data(
    io: Any, fmt: str, spoil: Any, message: str | None, body: str | None
) -> None:
    mock = provider(fmt)

    def spoiled(request: httpx.Request) -> httpx.Response:
        answer = mock(request)
        return reserved(answer, spoil(split_events(fmt, answer.read())))

    error = await failure(io.send(io.httpx(fmt, spoiled, stream=True), REQUEST))
    source = f"http://provider.test{PATHS[fmt]}"
    if message is None:  # an error event whose data is text: an error all the same
        assert str(error) == f"the {fmt} stream from {source} reported an error"
    else:
        assert str(error) == f"unreadable {fmt} stream from {source}: {message}"
    assert (error.status_code, error.body) == (None, body)


# -- what is not the provider's answer ------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize(
    "error",
    [TypeError("the UI's bug"), httpx.ConnectError("the UI's own server is down")],
    ids=["bug", "ui-http"],
)
async def test_an_error_of_on_delta_propagates_as_itself(io: Any, stream: bool, error: Exception) -> None:
    def on_delta(text: str) -> None:
        raise error

    sender = io.httpx("anthropic", provider("anthropic"), stream=stream, on_delta=on_delta)
    with pytest.raises(type(error)) as info:
        await io.send(sender, REQUEST)
    assert info.value is error


async def test_a_bug_while_reading_a_stream_propagates_as_itself(
    io: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: ChatAccumulator, name: str | None, data: Any) -> str:
        raise AttributeError("'NoneType' object has no attribute 'get'")

    monkeypatch.setattr(ChatAccumulator, "feed", broken)
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'get'"):
        await io.send(io.httpx("openai-chat", provider("openai-chat"), stream=True), REQUEST)
