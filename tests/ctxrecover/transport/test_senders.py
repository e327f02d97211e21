"""Senders: the real bodies, paths and auth headers of each wire format, and typed failures.

Every test runs through the sync and the async sender (the ``io`` fixture). The httpx
senders run over ``httpx.MockTransport``; the SDK adapters run real ``openai`` /
``anthropic`` clients (sync and async) over an ``httpx2.MockTransport`` (the SDKs are
built on httpx2, which plain httpx mocks do not intercept). No network.
"""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

import httpx
import pytest

from ctxrecover.classify import FailureKind, classify
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message, ToolCall
from ctxrecover.summarize.context_editing import context_management_request
from ctxrecover.transport import ChatRequest, ChatResponse, SendFailed, header_bytes
from ctxrecover.transport import sdk as senders
from ctxrecover.transport.httpx_sender import ASYNC_JOIN_BELOW_BYTES, AsyncHttpxSender
from ctxrecover.wire import Usage, WireFormat, encode_body, render_request

pytestmark = pytest.mark.anyio

BASE_URL = "http://provider.test/api"
API_KEY = "sk-test-123"
F5_BLOCK_PAGE = (
    "<html><head><title>Request Rejected</title></head><body>The requested URL was rejected. "
    "Please consult with your administrator.<br><br>Your support ID is: 1234567890</body></html>"
)
REQUEST = ChatRequest(
    (
        Message.system("You are terse."),
        Message.user('Read "ça va" — 日本語\nplease'),
        Message.assistant("Reading.", [ToolCall("call_1", "read_file", '{"path": "a.py"}')]),
        Message.tool("call_1", "print('hi')"),
    ),
    max_tokens=512,
)

# (format, model, path, auth header, auth value, success body, text, stop reason, usage)
FORMATS: list[tuple[str, str, str, str, str, dict[str, Any], str, str, Usage]] = [
    (
        "openai-chat",
        "gpt-4o",
        "/api/v1/chat/completions",
        "authorization",
        f"Bearer {API_KEY}",
        {
            "choices": [{"message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 2},
        },
        "done",
        "stop",
        Usage(40, 2),
    ),
    (
        "openai-responses",
        "gpt-4.1",
        "/api/v1/responses",
        "authorization",
        f"Bearer {API_KEY}",
        {
            "status": "completed",
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "done"}]}],
            "usage": {"input_tokens": 41, "output_tokens": 3},
        },
        "done",
        "completed",
        Usage(41, 3),
    ),
    (
        "anthropic",
        "claude-sonnet-4-5",
        "/api/v1/messages",
        "x-api-key",
        API_KEY,
        {
            "content": [{"type": "text", "text": "done"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 42, "output_tokens": 4, "cache_read_input_tokens": 7},
        },
        "done",
        "end_turn",
        Usage(42, 4, 7),
    ),
    (
        "gemini",
        "gemini-2.5-pro",
        "/api/v1beta/models/gemini-2.5-pro:generateContent",
        "x-goog-api-key",
        API_KEY,
        {
            "candidates": [{"content": {"parts": [{"text": "done"}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 43, "candidatesTokenCount": 5},
        },
        "done",
        "STOP",
        Usage(43, 5),
    ),
    (
        "bedrock-converse",
        "anthropic.claude-3-5-sonnet",
        "/api/model/anthropic.claude-3-5-sonnet/converse",
        "authorization",
        f"Bearer {API_KEY}",
        {
            "output": {"message": {"role": "assistant", "content": [{"text": "done"}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 44, "outputTokens": 6},
        },
        "done",
        "end_turn",
        Usage(44, 6),
    ),
]


class Recorder:
    """A MockTransport handler that records every request and answers with ``respond``."""

    def __init__(self, respond: Any) -> None:
        self.requests: list[httpx.Request] = []
        self._respond = respond

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self._respond(request)


def sender_for(io: Any, fmt: str, model: str, recorder: Recorder) -> Any:
    return io.httpx(fmt, recorder, base_url=BASE_URL + "/", model=model, api_key=API_KEY)


@pytest.mark.parametrize(
    ("fmt", "model", "path", "auth_header", "auth_value", "answer", "text", "stop", "usage"),
    FORMATS,
    ids=[row[0] for row in FORMATS],
)
async def test_httpx_sender_posts_the_rendered_body_to_the_format_path_with_its_auth(
    io: Any,
    fmt: str,
    model: str,
    path: str,
    auth_header: str,
    auth_value: str,
    answer: dict[str, Any],
    text: str,
    stop: str,
    usage: Usage,
) -> None:
    recorder = Recorder(lambda request: httpx.Response(200, json=answer))
    sender = sender_for(io, fmt, model, recorder)
    response = await io.send(sender, REQUEST)
    expected_body = sender.render(REQUEST)
    await io.close(sender)

    (request,) = recorder.requests
    assert request.method == "POST"
    assert request.url.path == path
    assert request.headers[auth_header] == auth_value
    assert request.headers["content-type"] == "application/json"
    if fmt == "anthropic":
        assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.content == expected_body
    assert "日本語".encode() in request.content  # real UTF-8, not \u escapes
    assert response.request_bytes == len(request.content)
    assert response.message == Message.assistant(text)
    assert response.stop_reason == stop
    assert response.truncated is False
    assert response.usage == usage
    assert response.raw == answer


async def test_httpx_sender_merges_request_headers_and_extra_body_fields(io: Any) -> None:
    headers, extra = context_management_request()
    recorder = Recorder(lambda request: httpx.Response(200, json=FORMATS[2][5]))
    sender = sender_for(io, "anthropic", "claude-sonnet-4-5", recorder)
    await io.send(sender, ChatRequest(REQUEST.messages, max_tokens=100, headers=headers, extra=extra))

    (request,) = recorder.requests
    assert request.headers["anthropic-beta"] == "context-management-2025-06-27"
    assert request.headers["x-api-key"] == API_KEY
    assert json.loads(request.content)["context_management"] == extra["context_management"]


@pytest.mark.parametrize(("fmt", "answer"), [(r[0], r[5]) for r in FORMATS], ids=[r[0] for r in FORMATS])
async def test_httpx_sender_posts_the_encoded_body_byte_for_byte_from_cached_fragments(
    io: Any, fmt: str, answer: dict[str, Any]
) -> None:
    headers, extra = context_management_request()
    tools = [{"name": "read_file", "input_schema": {"type": "object"}}]
    requests = [
        ChatRequest(REQUEST.messages, max_tokens=64, tools=tools, extra={"temperature": 0.5}),
        ChatRequest((*REQUEST.messages, Message.user("and now? é")), headers=headers, extra=extra),
    ]
    recorder = Recorder(lambda request: httpx.Response(200, json=answer))
    sender = sender_for(io, fmt, "m", recorder)
    responses = [await io.send(sender, request) for request in requests]

    for request, sent, response in zip(requests, recorder.requests, responses, strict=True):
        body = render_request(
            request.messages,
            fmt,
            model="m",
            max_tokens=request.max_tokens,
            tools=request.tools,
            extra=request.extra,
        )
        assert sent.content == encode_body(body)
        assert response.request_bytes == len(sent.content)
    assert all(f"wire-bytes:{fmt}" in m._cache for m in requests[1].messages)


async def test_httpx_sender_without_fragment_cache_posts_the_same_bytes_and_stores_none(io: Any) -> None:
    messages = tuple(Message.from_dict(m.to_dict()) for m in REQUEST.messages)  # fresh, uncached
    recorder = Recorder(lambda request: httpx.Response(200, json=FORMATS[0][5]))
    sender = io.httpx("openai-chat", recorder, base_url=BASE_URL, model="gpt-4o", cache_fragments=False)
    await io.send(sender, ChatRequest(messages))
    expected = encode_body(render_request(messages, "openai-chat", model="gpt-4o"))
    assert recorder.requests[0].content == expected
    assert not any(key.startswith("wire-bytes:") for m in messages for key in m._cache)


class _RecordingHandler(http.server.BaseHTTPRequestHandler):
    """Answers every POST with a chat completion; records each request's headers and body."""

    seen: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.seen.append(({k.lower(): v for k, v in self.headers.items()}, body))
        reply = json.dumps(FORMATS[0][5]).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        pass


async def test_httpx_sender_posts_a_long_history_as_chunks_with_its_content_length_over_tcp(io: Any) -> None:
    history = [Message.system("s"), *(Message.user(f"message {i} é " * 900) for i in range(300))]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RecordingHandler)
    _RecordingHandler.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        sender = io.httpx("openai-chat", base_url=url, model="m", headers={"Content-Length": "1"})
        first = ChatRequest(tuple(history))
        second = ChatRequest((*history, Message.user("one more")))
        chunks = [sender.render_chunks(first)]
        responses = [await io.send(sender, first), await io.send(sender, second)]
        chunks.append(sender.render_chunks(second))
        await io.close(sender)
    finally:
        server.shutdown()
        server.server_close()
    assert len(chunks[0]) > 10  # posted in blocks, not one buffer of the whole body
    seen = _RecordingHandler.seen
    for request, (headers, body), response in zip((first, second), seen, responses, strict=True):
        assert body == encode_body(render_request(request.messages, "openai-chat", model="m"))
        assert headers["content-length"] == str(len(body)) == str(response.request_bytes)
        assert "transfer-encoding" not in headers  # a length, not chunked encoding: proxies see a size
    # the second request hands over the first one's full blocks as they were
    assert len({id(c) for c in chunks[0]} & {id(c) for c in chunks[1]}) >= len(chunks[0]) - 3


async def test_truncated_answer_is_parsed_as_truncated(io: Any) -> None:
    answer = {
        "choices": [{"message": {"role": "assistant", "content": "def f(): pa"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 512},
    }
    sender = sender_for(io, "openai-chat", "gpt-4o", Recorder(lambda r: httpx.Response(200, json=answer)))
    response = await io.send(sender, REQUEST)
    assert (response.truncated, response.stop_reason, response.message.content) == (
        True,
        "length",
        "def f(): pa",
    )


async def test_4xx_raises_send_failed_with_status_body_headers_and_the_rejected_size(io: Any) -> None:
    page = "<html><center><h1>413 Request Entity Too Large</h1></center><hr><center>nginx</center></html>"
    recorder = Recorder(
        lambda request: httpx.Response(
            413, text=page, headers={"content-type": "text/html", "server": "nginx"}
        )
    )
    with pytest.raises(SendFailed) as info:
        await io.send(sender_for(io, "openai-chat", "gpt-4o", recorder), REQUEST)

    (request,) = recorder.requests
    error = info.value
    assert str(error) == "HTTP 413 from http://provider.test/api/v1/chat/completions"
    assert error.status_code == 413
    assert error.body == page
    assert error.headers["server"] == "nginx"
    assert error.request_bytes == len(request.content)
    failure = classify(error)
    assert failure.kind is FailureKind.PAYLOAD_TOO_LARGE
    assert failure.rejected_bytes == len(request.content)


async def test_a_rejected_send_reports_the_size_of_the_request_head_it_sent(io: Any) -> None:
    # SPEC §11: a 431 is diagnosed by the request's header size, so the sender measures it.
    recorder = Recorder(lambda request: httpx.Response(431, text=""))
    cookie = "session=" + "c" * 9_000
    sender = io.httpx(
        "openai-chat",
        recorder,
        base_url="http://provider.test",
        model="gpt-4o",
        api_key="sk-test",
        headers={"cookie": cookie},
    )
    with pytest.raises(SendFailed) as info:
        await io.send(sender, REQUEST)

    (request,) = recorder.requests
    line = f"POST {request.url.raw_path.decode()} HTTP/1.1\r\n"
    lines = "".join(f"{k.decode()}: {v.decode()}\r\n" for k, v in request.headers.raw)
    assert info.value.header_bytes == len(line) + len(lines) + 2 > len(cookie)  # head = line + headers + CRLF
    assert header_bytes(None) is None


@pytest.mark.parametrize(
    ("exc_type", "history_chars", "kind"),
    [
        (httpx.ConnectError, 1_000, FailureKind.TRANSIENT_NETWORK),
        (httpx.ReadTimeout, 1_000, FailureKind.TRANSIENT_NETWORK),
        (httpx.RemoteProtocolError, 1_000, FailureKind.TRANSIENT_NETWORK),
        (httpx.RemoteProtocolError, 600_000, FailureKind.SUSPECTED_PAYLOAD),
        (httpx.ReadError, 600_000, FailureKind.SUSPECTED_PAYLOAD),
    ],
)
async def test_transport_error_raises_send_failed_caused_by_the_httpx_error(
    io: Any, exc_type: type[httpx.TransportError], history_chars: int, kind: FailureKind
) -> None:
    def drop(request: httpx.Request) -> httpx.Response:
        raise exc_type("Server disconnected without sending a response.", request=request)

    recorder = Recorder(drop)
    with pytest.raises(SendFailed) as info:
        await io.send(sender_for(io, "bedrock-converse", "m", recorder), REQUEST)

    error = info.value
    assert isinstance(error.__cause__, exc_type)
    assert error.status_code is None
    assert error.request_bytes == len(recorder.requests[0].content)
    failure = classify(error, history_chars=history_chars)
    assert failure.kind is kind
    if kind is FailureKind.SUSPECTED_PAYLOAD:
        assert failure.rejected_bytes == error.request_bytes


async def test_200_with_an_html_block_page_raises_send_failed_read_as_a_waf(io: Any) -> None:
    recorder = Recorder(
        lambda request: httpx.Response(200, text=F5_BLOCK_PAGE, headers={"content-type": "text/html"})
    )
    with pytest.raises(SendFailed) as info:
        await io.send(sender_for(io, "openai-chat", "gpt-4o", recorder), REQUEST)

    assert info.value.status_code == 200
    assert info.value.body == F5_BLOCK_PAGE
    assert isinstance(info.value.__cause__, ValueError)
    assert classify(info.value).kind is FailureKind.WAF_REJECTION


async def test_200_error_object_is_not_taken_for_an_answer(io: Any) -> None:
    recorder = Recorder(lambda request: httpx.Response(200, json={"error": {"message": "overloaded"}}))
    with pytest.raises(SendFailed):
        await io.send(sender_for(io, "anthropic", "claude-sonnet-4-5", recorder), REQUEST)


async def test_injected_client_is_used_and_not_closed(io: Any) -> None:
    recorder = Recorder(lambda request: httpx.Response(200, json=FORMATS[0][5]))
    transport = httpx.MockTransport(recorder)
    client = httpx.AsyncClient(transport=transport) if io.is_async else httpx.Client(transport=transport)
    sender = io.httpx("openai-chat", base_url=BASE_URL, model="gpt-4o", client=client)
    await io.send(sender, REQUEST)
    await io.close(sender)
    assert not client.is_closed
    assert recorder.requests[0].headers.get("authorization") is None  # no key, no auth header
    await io.close(client)


async def test_request_hooks_of_an_injected_client_can_read_the_body(io: Any) -> None:
    seen: list[bytes] = []
    recorder = Recorder(lambda request: httpx.Response(200, json=FORMATS[0][5]))
    transport = httpx.MockTransport(recorder)
    if io.is_async:

        async def read_body(request: httpx.Request) -> None:
            seen.append(request.content)

        client: Any = httpx.AsyncClient(transport=transport, event_hooks={"request": [read_body]})
    else:
        client = httpx.Client(
            transport=transport, event_hooks={"request": [lambda r: seen.append(r.content)]}
        )
    long_request = ChatRequest(tuple(Message.user(f"message {i} " * 3_000) for i in range(40)))
    sender = io.httpx("openai-chat", base_url=BASE_URL, model="gpt-4o", client=client)
    assert len(sender.render_chunks(long_request)) > 1
    response = await io.send(sender, long_request)
    await io.close(client)
    assert seen == [encode_body(render_request(long_request.messages, "openai-chat", model="gpt-4o"))]
    assert response.request_bytes == len(seen[0])


# -- SDK adapters -------------------------------------------------------------------------------

try:
    import httpx2
except ImportError:  # pragma: no cover - httpx2 comes with the openai/anthropic SDKs
    httpx2 = None  # type: ignore[assignment]

requires_httpx2_mock = pytest.mark.skipif(
    httpx2 is None or not hasattr(httpx2, "MockTransport"),
    reason="httpx2 without MockTransport: the SDK senders are covered by the loopback tests in "
    "tests/simulator/proxy/test_transport.py",
)

OPENAI_COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "gpt-4o",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "checking",
                "tool_calls": [
                    {"id": "call_9", "type": "function", "function": {"name": "ls", "arguments": '{"d":"."}'}}
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57},
}
ANTHROPIC_MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "partial"}],
    "stop_reason": "max_tokens",
    "usage": {"input_tokens": 60, "output_tokens": 512},
}


class SdkRecorder:
    def __init__(self, status: int, payload: dict[str, Any]) -> None:
        self.requests: list[Any] = []
        self.status = status
        self.payload = payload

    def __call__(self, request: Any) -> Any:
        self.requests.append(request)
        return httpx2.Response(self.status, json=self.payload)


def sdk_client(io: Any, sdk: str, recorder: SdkRecorder) -> Any:
    """A real ``openai`` / ``anthropic`` client (async for the async driver) over ``httpx2.MockTransport``."""
    http_client = (httpx2.AsyncClient if io.is_async else httpx2.Client)(
        transport=httpx2.MockTransport(recorder)
    )
    base_url = "http://provider.test/v1" if sdk == "openai" else "http://provider.test"
    return io.client(sdk, api_key=API_KEY, base_url=base_url, http_client=http_client)


@requires_httpx2_mock
async def test_openai_sdk_sender_posts_our_body_and_parses_the_completion(io: Any) -> None:
    recorder = SdkRecorder(200, OPENAI_COMPLETION)
    sender = io.sdk("openai", sdk_client(io, "openai", recorder), model="gpt-4o")

    response = await io.send(sender, REQUEST)

    (request,) = recorder.requests
    assert request.url.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    rendered = render_request(REQUEST.messages, "openai-chat", model="gpt-4o", max_tokens=512)
    assert json.loads(request.content) == rendered
    assert response.request_bytes == len(request.content)
    assert isinstance(response, ChatResponse)
    assert response.message == Message.assistant("checking", [ToolCall("call_9", "ls", '{"d":"."}')])
    assert response.stop_reason == "tool_calls"
    assert response.usage == Usage(50, 7)


@requires_httpx2_mock
async def test_anthropic_sdk_sender_carries_context_management_and_reports_truncation(io: Any) -> None:
    recorder = SdkRecorder(200, ANTHROPIC_MESSAGE)
    sender = io.sdk("anthropic", sdk_client(io, "anthropic", recorder), model="claude-test")
    headers, extra = context_management_request()

    response = await io.send(
        sender, ChatRequest(REQUEST.messages, max_tokens=512, headers=headers, extra=extra)
    )

    (request,) = recorder.requests
    assert request.url.path == "/v1/messages"
    # the SDK authenticates as its version does (x-api-key, or a bearer token in anthropic 2.x)
    assert API_KEY in (request.headers.get("x-api-key"), request.headers.get("authorization", "")[7:])
    assert request.headers["anthropic-beta"] == "context-management-2025-06-27"
    body = json.loads(request.content)
    assert body["context_management"] == extra["context_management"]
    assert body["system"] == "You are terse."
    assert response.truncated is True and response.stop_reason == "max_tokens"
    assert response.message.content == "partial"
    assert sender.wire_format is WireFormat.ANTHROPIC


@requires_httpx2_mock
@pytest.mark.parametrize(
    ("sdk", "status", "payload", "kind"),
    [
        (
            "openai",
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 128000 tokens.",
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                }
            },
            FailureKind.CONTEXT_OVERFLOW,
        ),
        ("openai", 413, {"error": {"message": "Request Entity Too Large"}}, FailureKind.PAYLOAD_TOO_LARGE),
        (
            "anthropic",
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 250000 tokens > 200000 maximum",
                },
            },
            FailureKind.CONTEXT_OVERFLOW,
        ),
        (
            "anthropic",
            401,
            {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}},
            FailureKind.AUTH,
        ),
    ],
)
async def test_sdk_errors_become_send_failed_with_the_sdk_error_as_cause(
    io: Any, sdk: str, status: int, payload: dict[str, Any], kind: FailureKind
) -> None:
    recorder = SdkRecorder(status, payload)
    sender = io.sdk(sdk, sdk_client(io, sdk, recorder))

    with pytest.raises(SendFailed) as info:
        await io.send(sender, REQUEST)

    (request,) = recorder.requests  # max_retries=0: the rejected body is not resent
    error = info.value
    assert type(error.__cause__).__module__.split(".")[0] in ("openai", "anthropic")
    assert error.request_bytes == len(request.content)
    assert error.header_bytes == header_bytes(request)
    failure = classify(error)
    assert failure.kind is kind
    assert failure.status == status


@requires_httpx2_mock
@pytest.mark.parametrize(
    ("sdk", "payload", "field"),
    [
        ("openai", OPENAI_COMPLETION, {"temperature": 0.25}),
        ("anthropic", ANTHROPIC_MESSAGE, {"stop_sequences": ["\n\nHuman:"]}),
    ],
)
async def test_sdk_request_bytes_count_the_fields_the_sdk_adds_drops_or_replaces(
    io: Any, sdk: str, payload: dict[str, Any], field: dict[str, Any]
) -> None:
    recorder = SdkRecorder(200, payload)
    extra_kwargs = {
        "max_tokens": 77,
        **field,
        "extra_body": {"é": ["x"]},
        "extra_headers": {"x-trace": "1"},
        "timeout": 30.0,
    }
    sender = io.sdk(sdk, sdk_client(io, sdk, recorder), extra_kwargs=extra_kwargs)
    headers, extra = context_management_request()
    request = (
        ChatRequest(REQUEST.messages, max_tokens=512, headers=headers, extra=extra)
        if sdk == "anthropic"
        else REQUEST
    )

    response = await io.send(sender, request)

    (sent,) = recorder.requests
    assert json.loads(sent.content)["max_tokens"] == 77
    assert response.request_bytes == len(sent.content)


def fake_openai_client(io: Any, create: Any) -> Any:
    """An object with the SDK's ``chat.completions.create`` path calling ``create`` (awaited when async)."""

    class Completions:
        if io.is_async:

            async def create(self, **kwargs: Any) -> Any:
                return create(**kwargs)

        else:

            def create(self, **kwargs: Any) -> Any:
                return create(**kwargs)

    class Client:
        class chat:  # noqa: N801 - mirrors the SDK's attribute path
            completions = Completions()

    return Client()


async def test_sdk_request_bytes_never_encode_the_history(io: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[Any] = []
    real_encode = senders.encode_body
    monkeypatch.setattr(senders, "encode_body", lambda value: encoded.append(value) or real_encode(value))
    sent: list[dict[str, Any]] = []

    def create(**kwargs: Any) -> Any:
        sent.append(kwargs)
        return OPENAI_COMPLETION

    extra_kwargs = {"temperature": 0, "max_tokens": 9, "extra_body": {"seed": 3}, "timeout": 5}
    sender = io.sdk("openai", fake_openai_client(io, create), model="gpt-4o", extra_kwargs=extra_kwargs)
    response = await io.send(sender, REQUEST)

    (kwargs,) = sent
    wire = {k: v for k, v in kwargs.items() if k not in ("extra_body", "timeout")} | kwargs["extra_body"]
    assert response.request_bytes == len(encode_body(wire))
    assert encoded and not any("messages" in value for value in encoded)


async def test_sdk_adapter_lets_programming_errors_through(io: Any) -> None:
    def create(**kwargs: Any) -> Any:
        raise TypeError("create() got an unexpected keyword argument 'temperature'")

    sender = io.sdk("openai", fake_openai_client(io, create), model="gpt-4o")
    with pytest.raises(TypeError, match="unexpected keyword"):
        await io.send(sender, ChatRequest((Message.user("hi"),)))


@pytest.mark.parametrize(
    "answer",
    [
        {"id": "chatcmpl-1", "object": "chat.completion", "choices": []},
        {"error": {"message": "upstream overloaded", "type": "server_error"}},
    ],
    ids=["no-choices", "error-object"],
)
async def test_an_sdk_answer_that_is_not_an_answer_raises_send_failed_with_its_document(
    io: Any, answer: dict[str, Any]
) -> None:
    sender = io.sdk("openai", fake_openai_client(io, lambda **kwargs: answer), model="gpt-4o")
    with pytest.raises(SendFailed) as info:
        await io.send(sender, REQUEST)
    assert json.loads(info.value.body or "") == answer
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value).startswith("unparseable openai-chat response from the ")


async def test_a_client_of_the_other_kind_is_the_callers_error_raised_as_itself(io: Any) -> None:
    other = type(io)(is_async=not io.is_async)
    sender = io.sdk("openai", fake_openai_client(other, lambda **kwargs: OPENAI_COMPLETION), model="gpt-4o")
    if io.is_async:  # a sync client's answer cannot be awaited: Python's own TypeError
        with pytest.raises(TypeError, match="can't be used in 'await' expression"):
            await io.send(sender, REQUEST)
    else:
        with pytest.raises(ConfigError) as info:
            await io.send(sender, REQUEST)
        assert str(info.value) == (
            "OpenAISDKSender: the client's create() returned a coroutine, neither an answer nor a stream; "
            "give the sync senders a sync client and the Async… senders an async one"
        )


class _StreamKinds(httpx.AsyncBaseTransport):
    """Records whether each body arrived as one buffer (``ByteStream``) or as chunks, then answers."""

    def __init__(self) -> None:
        self.joined: list[bool] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.joined.append(isinstance(request.stream, httpx.ByteStream))
        await request.aread()
        return httpx.Response(200, json=FORMATS[0][5])


async def test_the_async_sender_posts_a_gateway_sized_body_as_one_buffer_and_a_long_one_as_chunks() -> None:
    transport = _StreamKinds()
    sender = AsyncHttpxSender("openai-chat", base_url=BASE_URL, model="m", transport=transport)
    small = ChatRequest(tuple(Message.user(f"message {i} " * 400) for i in range(40)))
    large = ChatRequest(tuple(Message.user(f"message {i} " * 400) for i in range(400)))
    sizes = [sum(map(len, sender.render_chunks(r))) for r in (small, large)]
    assert sizes[0] <= ASYNC_JOIN_BELOW_BYTES < sizes[1]
    responses = [await sender.send(small), await sender.send(large)]
    await sender.aclose()
    assert transport.joined == [True, False]
    assert [r.request_bytes for r in responses] == sizes
