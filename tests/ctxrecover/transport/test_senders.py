"""Senders: the real bodies, paths and auth headers of each wire format, and typed failures.

HttpxSender runs over ``httpx.MockTransport``; the SDK adapters run real ``openai.OpenAI``
/ ``anthropic.Anthropic`` clients over an ``httpx2.MockTransport`` (the SDKs are built on
httpx2, which plain httpx mocks do not intercept). No network.
"""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

import httpx
import pytest

from ctxrecover.classify import FailureKind, classify
from ctxrecover.messages import Message, ToolCall
from ctxrecover.summarize.context_editing import context_management_request
from ctxrecover.transport import (
    AnthropicSDKSender,
    ChatRequest,
    ChatResponse,
    HttpxSender,
    OpenAISDKSender,
    Sender,
    SendFailed,
    header_bytes,
)
from ctxrecover.transport import sdk as senders
from ctxrecover.wire import Usage, WireFormat, encode_body, render_request

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


def sender_for(fmt: str, model: str, recorder: Recorder) -> HttpxSender:
    return HttpxSender(
        fmt, base_url=BASE_URL + "/", model=model, api_key=API_KEY, transport=httpx.MockTransport(recorder)
    )


@pytest.mark.parametrize(
    ("fmt", "model", "path", "auth_header", "auth_value", "answer", "text", "stop", "usage"),
    FORMATS,
    ids=[row[0] for row in FORMATS],
)
def test_httpx_sender_posts_the_rendered_body_to_the_format_path_with_its_auth(
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
    with sender_for(fmt, model, recorder) as sender:
        assert isinstance(sender, Sender)
        response = sender.send(REQUEST)
        expected_body = sender.render(REQUEST)

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


def test_httpx_sender_merges_request_headers_and_extra_body_fields() -> None:
    headers, extra = context_management_request()
    recorder = Recorder(lambda request: httpx.Response(200, json=FORMATS[2][5]))
    with sender_for("anthropic", "claude-sonnet-4-5", recorder) as sender:
        sender.send(ChatRequest(REQUEST.messages, max_tokens=100, headers=headers, extra=extra))

    (request,) = recorder.requests
    assert request.headers["anthropic-beta"] == "context-management-2025-06-27"
    assert request.headers["x-api-key"] == API_KEY
    assert json.loads(request.content)["context_management"] == extra["context_management"]


@pytest.mark.parametrize(("fmt", "answer"), [(r[0], r[5]) for r in FORMATS], ids=[r[0] for r in FORMATS])
def test_httpx_sender_posts_the_encoded_body_byte_for_byte_from_cached_fragments(
    fmt: str, answer: dict[str, Any]
) -> None:
    headers, extra = context_management_request()
    tools = [{"name": "read_file", "input_schema": {"type": "object"}}]
    requests = [
        ChatRequest(REQUEST.messages, max_tokens=64, tools=tools, extra={"temperature": 0.5}),
        ChatRequest((*REQUEST.messages, Message.user("and now? é")), headers=headers, extra=extra),
    ]
    recorder = Recorder(lambda request: httpx.Response(200, json=answer))
    with sender_for(fmt, "m", recorder) as sender:
        responses = [sender.send(request) for request in requests]

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


def test_httpx_sender_without_fragment_cache_posts_the_same_bytes_and_stores_none() -> None:
    messages = tuple(Message.from_dict(m.to_dict()) for m in REQUEST.messages)  # fresh, uncached
    recorder = Recorder(lambda request: httpx.Response(200, json=FORMATS[0][5]))
    with HttpxSender(
        "openai-chat",
        base_url=BASE_URL,
        model="gpt-4o",
        cache_fragments=False,
        transport=httpx.MockTransport(recorder),
    ) as sender:
        sender.send(ChatRequest(messages))
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


def test_httpx_sender_posts_a_long_history_as_chunks_with_its_content_length_over_tcp() -> None:
    history = [Message.system("s"), *(Message.user(f"message {i} é " * 900) for i in range(300))]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RecordingHandler)
    _RecordingHandler.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with HttpxSender("openai-chat", base_url=url, model="m", headers={"Content-Length": "1"}) as sender:
            first = ChatRequest(tuple(history))
            second = ChatRequest((*history, Message.user("one more")))
            chunks = [sender.render_chunks(first)]
            responses = [sender.send(first), sender.send(second)]
            chunks.append(sender.render_chunks(second))
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


def test_truncated_answer_is_parsed_as_truncated() -> None:
    answer = {
        "choices": [{"message": {"role": "assistant", "content": "def f(): pa"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 512},
    }
    with sender_for("openai-chat", "gpt-4o", Recorder(lambda r: httpx.Response(200, json=answer))) as sender:
        response = sender.send(REQUEST)
    assert (response.truncated, response.stop_reason, response.message.content) == (
        True,
        "length",
        "def f(): pa",
    )


def test_4xx_raises_send_failed_with_status_body_headers_and_the_rejected_size() -> None:
    page = "<html><center><h1>413 Request Entity Too Large</h1></center><hr><center>nginx</center></html>"
    recorder = Recorder(
        lambda request: httpx.Response(
            413, text=page, headers={"content-type": "text/html", "server": "nginx"}
        )
    )
    with sender_for("openai-chat", "gpt-4o", recorder) as sender, pytest.raises(SendFailed) as info:
        sender.send(REQUEST)

    (request,) = recorder.requests
    error = info.value
    assert error.status_code == 413
    assert error.body == page
    assert error.headers["server"] == "nginx"
    assert error.request_bytes == len(request.content)
    failure = classify(error)
    assert failure.kind is FailureKind.PAYLOAD_TOO_LARGE
    assert failure.rejected_bytes == len(request.content)


def test_a_rejected_send_reports_the_size_of_the_request_head_it_sent() -> None:
    # SPEC §11: a 431 is diagnosed by the request's header size, so the sender measures it.
    recorder = Recorder(lambda request: httpx.Response(431, text=""))
    cookie = "session=" + "c" * 9_000
    sender = HttpxSender(
        "openai-chat",
        base_url="http://provider.test",
        model="gpt-4o",
        api_key="sk-test",
        headers={"cookie": cookie},
        transport=httpx.MockTransport(recorder),
    )
    with sender, pytest.raises(SendFailed) as info:
        sender.send(REQUEST)

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
def test_transport_error_raises_send_failed_caused_by_the_httpx_error(
    exc_type: type[httpx.TransportError], history_chars: int, kind: FailureKind
) -> None:
    def drop(request: httpx.Request) -> httpx.Response:
        raise exc_type("Server disconnected without sending a response.", request=request)

    recorder = Recorder(drop)
    with sender_for("bedrock-converse", "m", recorder) as sender, pytest.raises(SendFailed) as info:
        sender.send(REQUEST)

    error = info.value
    assert isinstance(error.__cause__, exc_type)
    assert error.status_code is None
    assert error.request_bytes == len(recorder.requests[0].content)
    failure = classify(error, history_chars=history_chars)
    assert failure.kind is kind
    if kind is FailureKind.SUSPECTED_PAYLOAD:
        assert failure.rejected_bytes == error.request_bytes


def test_200_with_an_html_block_page_raises_send_failed_read_as_a_waf() -> None:
    recorder = Recorder(
        lambda request: httpx.Response(200, text=F5_BLOCK_PAGE, headers={"content-type": "text/html"})
    )
    with sender_for("openai-chat", "gpt-4o", recorder) as sender, pytest.raises(SendFailed) as info:
        sender.send(REQUEST)

    assert info.value.status_code == 200
    assert info.value.body == F5_BLOCK_PAGE
    assert isinstance(info.value.__cause__, ValueError)
    assert classify(info.value).kind is FailureKind.WAF_REJECTION


def test_200_error_object_is_not_taken_for_an_answer() -> None:
    recorder = Recorder(lambda request: httpx.Response(200, json={"error": {"message": "overloaded"}}))
    with sender_for("anthropic", "claude-sonnet-4-5", recorder) as sender, pytest.raises(SendFailed):
        sender.send(REQUEST)


def test_injected_client_is_used_and_not_closed() -> None:
    recorder = Recorder(lambda request: httpx.Response(200, json=FORMATS[0][5]))
    client = httpx.Client(transport=httpx.MockTransport(recorder))
    with HttpxSender("openai-chat", base_url=BASE_URL, model="gpt-4o", client=client) as sender:
        sender.send(REQUEST)
    assert not client.is_closed
    assert recorder.requests[0].headers.get("authorization") is None  # no key, no auth header
    client.close()


def test_request_hooks_of_an_injected_client_can_read_the_body() -> None:
    seen: list[bytes] = []
    recorder = Recorder(lambda request: httpx.Response(200, json=FORMATS[0][5]))
    client = httpx.Client(
        transport=httpx.MockTransport(recorder),
        event_hooks={"request": [lambda request: seen.append(request.content)]},
    )
    long_request = ChatRequest(tuple(Message.user(f"message {i} " * 3_000) for i in range(40)))
    with HttpxSender("openai-chat", base_url=BASE_URL, model="gpt-4o", client=client) as sender:
        assert len(sender.render_chunks(long_request)) > 1
        response = sender.send(long_request)
    client.close()
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


def openai_client(recorder: SdkRecorder) -> Any:
    openai = pytest.importorskip("openai")
    return openai.OpenAI(
        api_key=API_KEY,
        base_url="http://provider.test/v1",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(recorder)),
    )


def anthropic_client(recorder: SdkRecorder) -> Any:
    anthropic = pytest.importorskip("anthropic")
    return anthropic.Anthropic(
        api_key=API_KEY,
        base_url="http://provider.test",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(recorder)),
    )


@requires_httpx2_mock
def test_openai_sdk_sender_posts_our_body_and_parses_the_completion() -> None:
    recorder = SdkRecorder(200, OPENAI_COMPLETION)
    sender = OpenAISDKSender(openai_client(recorder), model="gpt-4o")

    response = sender.send(REQUEST)

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
def test_anthropic_sdk_sender_carries_context_management_and_reports_truncation() -> None:
    recorder = SdkRecorder(200, ANTHROPIC_MESSAGE)
    sender = AnthropicSDKSender(anthropic_client(recorder), model="claude-test")
    headers, extra = context_management_request()

    response = sender.send(ChatRequest(REQUEST.messages, max_tokens=512, headers=headers, extra=extra))

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
    ("make_client", "sender_type", "status", "payload", "kind"),
    [
        (
            openai_client,
            OpenAISDKSender,
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
        (
            openai_client,
            OpenAISDKSender,
            413,
            {"error": {"message": "Request Entity Too Large"}},
            FailureKind.PAYLOAD_TOO_LARGE,
        ),
        (
            anthropic_client,
            AnthropicSDKSender,
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
            anthropic_client,
            AnthropicSDKSender,
            401,
            {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}},
            FailureKind.AUTH,
        ),
    ],
)
def test_sdk_errors_become_send_failed_with_the_sdk_error_as_cause(
    make_client: Any, sender_type: type[Any], status: int, payload: dict[str, Any], kind: FailureKind
) -> None:
    recorder = SdkRecorder(status, payload)
    sender = sender_type(make_client(recorder), model="m")

    with pytest.raises(SendFailed) as info:
        sender.send(REQUEST)

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
    ("make_client", "sender_type", "payload", "field"),
    [
        (openai_client, OpenAISDKSender, OPENAI_COMPLETION, {"temperature": 0.25}),
        (anthropic_client, AnthropicSDKSender, ANTHROPIC_MESSAGE, {"stop_sequences": ["\n\nHuman:"]}),
    ],
)
def test_sdk_request_bytes_count_the_fields_the_sdk_adds_drops_or_replaces(
    make_client: Any, sender_type: type[Any], payload: dict[str, Any], field: dict[str, Any]
) -> None:
    recorder = SdkRecorder(200, payload)
    extra_kwargs = {
        "max_tokens": 77,
        **field,
        "extra_body": {"é": ["x"]},
        "extra_headers": {"x-trace": "1"},
        "timeout": 30.0,
    }
    sender = sender_type(make_client(recorder), model="m", extra_kwargs=extra_kwargs)
    headers, extra = context_management_request()
    request = (
        ChatRequest(REQUEST.messages, max_tokens=512, headers=headers, extra=extra)
        if sender_type is AnthropicSDKSender
        else REQUEST
    )

    response = sender.send(request)

    (sent,) = recorder.requests
    assert json.loads(sent.content)["max_tokens"] == 77
    assert response.request_bytes == len(sent.content)


def test_sdk_request_bytes_never_encode_the_history(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[Any] = []
    real_encode = senders.encode_body
    monkeypatch.setattr(senders, "encode_body", lambda value: encoded.append(value) or real_encode(value))
    sent: list[dict[str, Any]] = []

    class Completions:
        def create(self, **kwargs: Any) -> Any:
            sent.append(kwargs)
            return OPENAI_COMPLETION

    class Client:
        class chat:  # noqa: N801 - mirrors the SDK's attribute path
            completions = Completions()

    extra_kwargs = {"temperature": 0, "max_tokens": 9, "extra_body": {"seed": 3}, "timeout": 5}
    response = OpenAISDKSender(Client(), model="gpt-4o", extra_kwargs=extra_kwargs).send(REQUEST)

    (kwargs,) = sent
    wire = {k: v for k, v in kwargs.items() if k not in ("extra_body", "timeout")} | kwargs["extra_body"]
    assert response.request_bytes == len(encode_body(wire))
    assert encoded and not any("messages" in value for value in encoded)


def test_sdk_adapter_lets_programming_errors_through() -> None:
    from ctxrecover.transport import OpenAISDKSender

    class Completions:
        def create(self, **kwargs: Any) -> Any:
            raise TypeError("create() got an unexpected keyword argument 'temperature'")

    class Client:
        class chat:  # noqa: N801 - mirrors the SDK's attribute path
            completions = Completions()

    sender = OpenAISDKSender(Client(), model="gpt-4o")
    with pytest.raises(TypeError, match="unexpected keyword"):
        sender.send(ChatRequest((Message.user("hi"),)))
