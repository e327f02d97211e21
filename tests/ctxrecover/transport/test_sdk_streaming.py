"""Streaming through the SDK senders, sync and async: real ``openai`` / ``anthropic`` clients.

The SDKs are built on httpx2, which ``httpx.MockTransport`` does not intercept, so they talk to the
mock providers over a real loopback server (``max_retries=0``); a ``Middlebox`` with a ``CutStream``
fault cuts the connection mid-answer.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from ctxrecover import Session
from ctxrecover.classify import FailureKind, classify
from ctxrecover.messages import Message, ToolCall
from ctxrecover.transport import ChatRequest, OpenAISDKSender, SendFailed
from simulator.providers.mock import MockProvider, Reply, rate_limit_response
from simulator.providers.stream_errors import failing_stream
from simulator.providers.streaming import DELTA_CHARS
from simulator.proxy import CutStream, LoopbackServer, Middlebox

pytestmark = pytest.mark.anyio

TEXT = "The quick brown fox jumps over the lazy dog; " * 4
CALL = ToolCall("", "read_file", '{"path": "src/app.py", "lines": [1, 40]}')
REPLIES = {"text": Reply(TEXT), "text-and-call": Reply(TEXT, (CALL,)), "truncated": Reply(TEXT * 3)}
REQUEST = ChatRequest((Message.system("Be brief."), Message.user("Read the file — é 日本")), max_tokens=400)
TRUNCATING = dataclasses.replace(REQUEST, max_tokens=20)
FORMATS = {"openai": "openai-chat", "anthropic": "anthropic"}
TEXT_AFTER = {"openai": 3, "anthropic": 5}  # events after which some text has streamed


def provider(sdk: str, reply: Reply = REPLIES["text"]) -> MockProvider:
    return MockProvider(FORMATS[sdk], context_window=100_000, script=[reply], seed=11)


def pieces(text: str) -> list[str]:
    return [text[i : i + DELTA_CHARS] for i in range(0, len(text), DELTA_CHARS)]


class InTurn:
    """A handler answering the n-th request with the n-th handler (fresh mocks: the same ids)."""

    def __init__(self, *handlers: Callable[[httpx.Request], httpx.Response]) -> None:
        self.handlers = list(handlers)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        return self.handlers.pop(0)(request)


@contextmanager
def served(handler: Any) -> Iterator[str]:
    with LoopbackServer(handler) as server:
        yield server.base_url


def client(io: Any, sdk: str, base_url: str) -> Any:
    return io.client(sdk, api_key="sk-test", base_url=base_url + ("/v1" if sdk == "openai" else ""))


async def sent(io: Any, sdk: str, base_url: str, request: ChatRequest, **sender: Any) -> Any:
    """Send ``request`` through a new client and sender; the response, or the SendFailed raised."""
    the_client = client(io, sdk, base_url)
    try:
        return await io.send(io.sdk(sdk, the_client, **sender), request)
    except SendFailed as failed:
        return failed
    finally:
        await io.close(the_client)


@pytest.mark.parametrize("how", ["stream=True", "extra_kwargs"])
@pytest.mark.parametrize("reply", REPLIES)
@pytest.mark.parametrize("sdk", FORMATS)
async def test_a_streamed_sdk_answer_is_the_unstreamed_answer(
    io: Any, sdk: str, reply: str, how: str
) -> None:
    request = TRUNCATING if reply == "truncated" else REQUEST
    plain_mock, streamed_mock = provider(sdk, REPLIES[reply]), provider(sdk, REPLIES[reply])
    streaming: dict[str, Any] = (
        {"stream": True} if how == "stream=True" else {"extra_kwargs": {"stream": True}}
    )
    deltas: list[str] = []
    with served(InTurn(plain_mock, streamed_mock)) as base_url:
        plain = await sent(io, sdk, base_url, request)
        streamed = await sent(io, sdk, base_url, request, on_delta=deltas.append, **streaming)

    assert streamed == dataclasses.replace(plain, request_bytes=streamed.request_bytes)  # raw included
    assert streamed.request_bytes == streamed_mock.last_call.request_bytes
    assert plain.request_bytes == plain_mock.last_call.request_bytes
    body = json.loads(streamed_mock.last_call.request.content)
    assert body["stream"] is True
    if sdk == "openai":  # usage is asked for, however the stream was
        assert body["stream_options"] == {"include_usage": True}
    assert deltas == pieces(plain.message.content)
    assert streamed.truncated is (reply == "truncated")


def test_a_session_streaming_through_the_openai_sdk_completes_its_turn() -> None:
    # issue 20: this raised UnrecoverableFailure('other: no known signal') (TypeError: unexpected SDK
    # result type Stream) even for "hi" through a gateway that answered 200.
    openai = pytest.importorskip("openai")
    mock = MockProvider("openai-chat", context_window=100_000, script=["hello back"])
    with (
        served(mock) as base_url,
        openai.OpenAI(base_url=base_url + "/v1", api_key="sk", max_retries=0) as sdk,
    ):
        session = Session(OpenAISDKSender(sdk, model="gpt-4o", extra_kwargs={"stream": True}))
        session.add(Message.user("hi"))
        answer = session.complete()
    assert answer.content == "hello back"
    assert session.history[-1] == answer
    assert json.loads(mock.last_call.request.content)["stream"] is True


def anthropic_error(status: int, kind: str, message: str) -> httpx.Response:
    # https://docs.anthropic.com/en/api/errors
    return httpx.Response(status, json={"type": "error", "error": {"type": kind, "message": message}})


OPENAI_SERVER_ERROR = {  # https://platform.openai.com/docs/guides/error-codes (500)
    "error": {
        "message": "The server had an error while processing your request. Sorry about that!",
        "type": "server_error",
        "param": None,
        "code": None,
    }
}
ERRORS: list[tuple[str, Callable[[], httpx.Response], int | None, FailureKind]] = [
    (
        "anthropic",
        lambda: anthropic_error(529, "overloaded_error", "Overloaded"),
        529,
        FailureKind.RATE_LIMIT,
    ),
    (
        "anthropic",
        lambda: anthropic_error(500, "api_error", "Internal server error"),
        500,
        FailureKind.TRANSIENT_NETWORK,
    ),
    ("anthropic", lambda: rate_limit_response("anthropic"), 429, FailureKind.RATE_LIMIT),
    ("openai", lambda: httpx.Response(500, json=OPENAI_SERVER_ERROR), None, FailureKind.TRANSIENT_NETWORK),
    ("openai", lambda: rate_limit_response("openai-chat"), None, FailureKind.RATE_LIMIT),
]


@pytest.mark.parametrize(
    ("sdk", "error", "status", "kind"),
    ERRORS,
    ids=[f"{sdk}-{status}-{kind.value}" for sdk, _, status, kind in ERRORS],
)
async def test_an_error_the_sdk_raises_inside_a_stream_classifies_as_the_same_error_unstreamed(
    io: Any, sdk: str, error: Callable[[], httpx.Response], status: int | None, kind: FailureKind
) -> None:
    mock = provider(sdk)
    fmt = FORMATS[sdk]
    failing = InTurn(
        lambda request: error(), lambda r: failing_stream(fmt, mock(r), error(), after=TEXT_AFTER[sdk])
    )
    deltas: list[str] = []
    with served(failing) as base_url:
        unstreamed = await sent(io, sdk, base_url, REQUEST)
        streamed = await sent(io, sdk, base_url, REQUEST, stream=True, on_delta=deltas.append)

    assert isinstance(unstreamed, SendFailed) and isinstance(streamed, SendFailed)
    assert classify(streamed).kind is classify(unstreamed).kind is kind
    assert streamed.status_code == status  # the status the error states, never the stream's 200
    assert str(streamed) == f"the {fmt} stream from the {sdk} client reported an error"
    document = json.loads(error().content)
    assert json.loads(streamed.body or "") == (document if sdk == "anthropic" else document["error"])
    assert type(streamed.__cause__).__module__.split(".")[0] == sdk
    assert streamed.request_bytes == mock.last_call.request_bytes
    assert deltas and TEXT.startswith("".join(deltas))


@pytest.mark.parametrize(
    ("history_chars", "kind"),
    [(1_000, FailureKind.TRANSIENT_NETWORK), (600_000, FailureKind.SUSPECTED_PAYLOAD)],
)
@pytest.mark.parametrize("sdk", FORMATS)
async def test_an_sdk_stream_cut_mid_way_classifies_as_an_answer_cut_mid_way(
    io: Any, sdk: str, history_chars: int, kind: FailureKind
) -> None:
    long = Reply(TEXT * 6)  # both answers longer than the cut: the unstreamed JSON is cut too
    plain_mock, streamed_mock = provider(sdk, long), provider(sdk, long)
    deltas: list[str] = []
    with served(Middlebox(InTurn(plain_mock, streamed_mock), [CutStream(n_bytes=900)])) as base_url:
        unstreamed = await sent(io, sdk, base_url, REQUEST)
        streamed = await sent(io, sdk, base_url, REQUEST, stream=True, on_delta=deltas.append)

    assert isinstance(unstreamed, SendFailed) and isinstance(streamed, SendFailed)
    expected = classify(unstreamed, history_chars=history_chars).kind
    assert classify(streamed, history_chars=history_chars).kind is expected is kind
    assert streamed.status_code is None
    assert streamed.request_bytes == streamed_mock.last_call.request_bytes
    assert deltas and long.text.startswith("".join(deltas))  # the text before the cut reached the UI


@pytest.mark.parametrize("sdk", FORMATS)
async def test_an_error_of_on_delta_propagates_through_the_sdk_stream_as_itself(io: Any, sdk: str) -> None:
    error = TypeError("the UI's bug")

    def on_delta(text: str) -> None:
        raise error

    with served(provider(sdk)) as base_url:
        the_client = client(io, sdk, base_url)
        sender = io.sdk(sdk, the_client, stream=True, on_delta=on_delta)
        with pytest.raises(TypeError) as info:
            await io.send(sender, REQUEST)
        await io.close(the_client)
    assert info.value is error
