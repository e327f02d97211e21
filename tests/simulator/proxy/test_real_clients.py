"""The official SDKs against the loopback server: real clients, real sockets, real faults.

``openai`` (3.x) and ``anthropic`` (2.x) are built on httpx2, so neither respx nor
``httpx.MockTransport`` sees them: they post to a :class:`LoopbackServer` hosting a
:class:`Middlebox` in front of a :class:`MockProvider`, with ``max_retries=0``.

Sizes: the SDK adapters report ``request_bytes`` from the body they render plus the
extra body fields of ``extra_kwargs``. Measured against the Content-Length the server
received, the difference is 0 bytes: both SDKs serialise compact UTF-8 JSON
(``separators=(",", ":")``, ``ensure_ascii=False``) exactly like ``wire.encode_body``,
only the key order differs. On a failure the adapters take the Content-Length of the
request the SDK error carries, so the learned cap always starts from the real size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ctxrecover.archive import MemoryArchive
from ctxrecover.classify import FailureKind, classify
from ctxrecover.events import Notice
from ctxrecover.messages import Message, ToolCall
from ctxrecover.session import Session
from ctxrecover.sizes import format_payload_size
from ctxrecover.transport import AnthropicSDKSender, ChatRequest, ChatResponse, OpenAISDKSender, SendFailed
from simulator.providers.mock import MockProvider
from simulator.proxy.faults import BodyCap, Fault, ResetAfter, WafBlock
from simulator.proxy.loopback import LoopbackServer
from simulator.proxy.middlebox import Middlebox

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

KB = 1024
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
)
LIMIT = 129 * KB
NGINX_413_TITLE = "<title>413 Request Entity Too Large</title>"
CLOUDFLARE_TITLE = "Attention Required! | Cloudflare"
OVERFLOW_NOTICE = "⚠ Recoverable failure (context too long) — compacting and retrying"
RECOVERY_NOTICES = {
    "body-cap": "⚠ Recoverable failure (proxy/gateway payload limit (413/431)) — compacting and retrying",
    "waf-403-html": "⚠ Recoverable failure (proxy/WAF rejection (403 + security signals)) "
    "— compacting and retrying",
}
CAP_NOTICE = (
    "ℹ Gateway rejected a %s request — payload cap set to %s for this session "
    "(export CHATCLI_MAX_PAYLOAD to override)"
)
SUSPECTED_HISTORY_CHARS = 600_000
# httpx2's names for a connection dropped mid-POST; which one depends on timing (DESIGN.md).
DROPPED_CONNECTION_CLASSES = frozenset({"ReadError", "WriteError", "RemoteProtocolError"})


@dataclass(frozen=True, slots=True)
class Sdk:
    """One official SDK: how to build its client, make a raw call and wrap it in our adapter."""

    fmt: str
    provider: str
    model: str
    client: Callable[[str], Any]
    call: Callable[[Any, str], Any]
    sender: Callable[..., OpenAISDKSender | AnthropicSDKSender]


SDKS = {
    "openai": Sdk(
        "openai-chat",
        "openai",
        "gpt-4o",
        lambda base_url: openai.OpenAI(base_url=base_url + "/v1", api_key="sk-test", max_retries=0),
        lambda client, text: client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": text}]
        ),
        OpenAISDKSender,
    ),
    "anthropic": Sdk(
        "anthropic",
        "anthropic",
        "claude-sonnet-4-6",
        lambda base_url: anthropic.Anthropic(base_url=base_url, api_key="sk-ant-test", max_retries=0),
        lambda client, text: client.messages.create(
            model="claude-sonnet-4-6", max_tokens=256, messages=[{"role": "user", "content": text}]
        ),
        AnthropicSDKSender,
    ),
}


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=sorted(SDKS))
def sdk(request: pytest.FixtureRequest) -> Sdk:
    return SDKS[request.param]


class Stack:
    """Provider, middlebox, loopback server and an SDK client pointed at it."""

    def __init__(self, sdk: Sdk, faults: list[Fault], *, context_window: int = 1_000_000) -> None:
        self.provider = MockProvider(sdk.fmt, context_window=context_window)
        self.box = Middlebox(self.provider, faults, seed=5)
        self.server = LoopbackServer(self.box)
        self.sdk = sdk

    def __enter__(self) -> Stack:
        self.server.start()
        self.client = self.sdk.client(self.server.base_url)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.client.close()
        self.server.stop()

    def call_failing(self, text: str) -> Any:
        """The SDK's own exception for one raw call that must fail."""
        with pytest.raises(Exception) as caught:
            self.sdk.call(self.client, text)
        return caught.value


@pytest.fixture
def stack(sdk: Sdk) -> Iterator[Callable[..., Stack]]:
    stacks: list[Stack] = []

    def make(faults: list[Fault], **kwargs: int) -> Stack:
        stacks.append(Stack(sdk, faults, **kwargs).__enter__())
        return stacks[-1]

    yield make
    for opened in stacks:
        opened.__exit__()


# -- classification of the SDKs' own exceptions ------------------------------------------


def test_context_overflow_from_the_sdk_classifies_as_overflow(sdk: Sdk, stack: Callable[..., Stack]) -> None:
    with_window = stack([], context_window=1_000)

    error = with_window.call_failing("q" * 40 * KB)

    assert error.status_code == 400
    failure = classify(error)
    assert (failure.kind, failure.reason, failure.status, failure.provider) == (
        FailureKind.CONTEXT_OVERFLOW,
        "ctx_too_long",
        400,
        sdk.provider,
    )
    assert failure.notice == OVERFLOW_NOTICE


def test_nginx_413_page_is_read_from_the_sdk_error_body(sdk: Sdk, stack: Callable[..., Stack]) -> None:
    capped = stack([BodyCap(limit=32 * KB, response="nginx")])

    error = capped.call_failing("q" * 40 * KB)

    assert error.status_code == 413
    assert NGINX_413_TITLE in error.body == error.response.text.strip()  # the SDK keeps the page, stripped
    failure = classify(error)
    assert (failure.kind, failure.reason, failure.provider) == (
        FailureKind.PAYLOAD_TOO_LARGE,
        "payload_413",
        "nginx",
    )
    (record,) = capped.server.records  # answered from the Content-Length, before the body was read
    assert (record.outcome, record.status, record.body_bytes) == ("responded", 413, 0)
    assert failure.rejected_bytes == record.content_length > 40 * KB


def test_cloudflare_403_page_is_read_from_the_sdk_error_body(sdk: Sdk, stack: Callable[..., Stack]) -> None:
    waf = stack([WafBlock(min_bytes=32 * KB, page="cloudflare")])

    error = waf.call_failing("q" * 40 * KB)

    assert error.status_code == 403
    assert CLOUDFLARE_TITLE in error.body == error.response.text.strip()  # the SDK keeps the page, stripped
    if sdk.fmt == "openai-chat":  # why classify must read exc.body / exc.response: str() drops HTML
        assert str(error) == "Error code: 403"
    failure = classify(error)
    assert (failure.kind, failure.reason, failure.provider) == (
        FailureKind.WAF_REJECTION,
        "waf_403",
        "cloudflare",
    )
    assert failure.rejected_bytes == waf.server.records[0].body_bytes == waf.server.records[0].content_length
    assert waf.provider.call_count == 0


def test_mid_post_reset_reaches_the_sdk_as_a_dropped_connection(
    sdk: Sdk, stack: Callable[..., Stack]
) -> None:
    resetting = stack([ResetAfter(64 * KB)])

    error = resetting.call_failing("q" * 2 * 1024 * KB)  # beyond the socket buffers: still sending

    assert type(error).__name__ == "APIConnectionError"
    cause = error.__cause__
    assert type(cause).__module__.split(".")[0] == "httpx2"
    assert type(cause).__name__ in DROPPED_CONNECTION_CLASSES
    (record,) = resetting.server.records
    assert record.outcome == "reset-after"
    assert record.body_bytes == 64 * KB < 2 * 1024 * KB < record.content_length
    small_history = classify(error)
    assert (small_history.kind, small_history.reason) == (FailureKind.TRANSIENT_NETWORK, None)
    large_history = classify(error, history_chars=SUSPECTED_HISTORY_CHARS)
    assert (large_history.kind, large_history.reason) == (FailureKind.SUSPECTED_PAYLOAD, "suspected_payload")
    size = format_payload_size(SUSPECTED_HISTORY_CHARS)
    assert large_history.reason_text == f"suspected payload limit (large history {size} + network error)"
    assert large_history.rejected_bytes == record.content_length


# -- a Session on the SDK adapters -------------------------------------------------------


class Recording:
    """Wraps an SDK adapter and keeps the ``request_bytes`` of every attempt."""

    def __init__(self, inner: OpenAISDKSender | AnthropicSDKSender) -> None:
        self.inner = inner
        self.wire_format = inner.wire_format
        self.model = inner.model
        self.sizes: list[int] = []

    def send(self, request: ChatRequest) -> ChatResponse:
        try:
            response = self.inner.send(request)
        except SendFailed as failed:
            self.sizes.append(failed.request_bytes)
            raise
        self.sizes.append(response.request_bytes)
        return response


def agent_history(system_chars: int, results: int, result_chars: int) -> list[Message]:
    """A system prompt, one small exchange, then one turn of parallel file reads.

    The big reads are in the newest turn, so microcompact leaves them whole.
    """
    history = [
        Message.system("You are a coding agent. " + "R" * system_chars),
        Message.user("Fix the bug in the parser — ünïcödé paths included."),
        Message.assistant("Looking at the repository layout first."),
        Message.user("Go ahead and read the files."),
        Message.assistant(
            "Reading the files.",
            [ToolCall(f"call_{i}", "read_file", f'{{"path": "src/mod_{i}.py"}}') for i in range(results)],
        ),
    ]
    for i in range(results):
        content = f"file {i} ✓\n" + f"line {i} of code\n" * (result_chars // 15)
        history.append(Message.tool(f"call_{i}", content))
    return history


def run_session(opened: Stack, **sender_kwargs: Any) -> tuple[Session, Recording, list[str], list[Message]]:
    sender = Recording(opened.sdk.sender(opened.client, model=opened.sdk.model, **sender_kwargs))
    events: list[object] = []
    original = agent_history(system_chars=20 * KB, results=8, result_chars=15 * KB)
    session = Session(sender, history=original, archive=MemoryArchive(), on_event=events.append)
    reply = session.complete()
    assert reply.content.startswith("Acknowledged turn")
    return session, sender, [e.text for e in events if isinstance(e, Notice)], original


@pytest.mark.parametrize(
    "fault",
    [BodyCap(limit=LIMIT, response="nginx"), WafBlock(min_bytes=LIMIT)],
    ids=["nginx-413", "cloudflare-403"],
)
def test_session_on_the_sdk_learns_the_cap_from_the_rejected_size_and_loses_nothing(
    fault: Fault, stack: Callable[..., Stack], assert_nothing_lost: Callable[..., None]
) -> None:
    gateway = stack([fault])

    session, sender, notices, original = run_session(gateway)

    # a 413 says size. A WAF page on a session's first request is settled by experiments (SPEC §12):
    # one word and the base alone pass (not the route, not the base), blanks as large are refused (size)
    records = gateway.server.records
    refused = [r for r in records if r.status != 200]
    rejected, accepted = refused[0], records[-1]
    assert [r.status for r in records] == (
        [413, 200] if fault.kind == "body-cap" else [403, 200, 200, 403, 200]
    )
    assert all(r.outcome == "responded" for r in refused) and accepted.outcome == "answered"
    # the adapter's sizes are the SDK's bytes on the wire, to the byte
    assert sender.sizes == [r.content_length if r.status != 200 else r.body_bytes for r in records]
    assert gateway.box.rejections[0].request_bytes == rejected.content_length >= LIMIT > accepted.body_bytes
    cap = min(r.content_length for r in refused) * 3 // 4
    assert session.learned_cap == cap
    sizes = (format_payload_size(rejected.content_length), format_payload_size(cap))
    assert notices[:2] == [RECOVERY_NOTICES[fault.kind], CAP_NOTICE % sizes]
    assert session.stats.recoveries == 1
    assert gateway.provider.call_count == len([r for r in records if r.status == 200])  # the experiments too
    assert_nothing_lost(original, session.history, session.archive)


def test_session_on_the_sdk_recovers_from_a_context_overflow(
    stack: Callable[..., Stack], assert_nothing_lost: Callable[..., None]
) -> None:
    provider_window = stack([], context_window=30_000)  # ~38k tokens of history at 4 chars per token

    session, sender, notices, original = run_session(provider_window)

    overflowed, accepted = provider_window.server.records
    assert (overflowed.status, accepted.status) == (400, 200)
    assert sender.sizes == [overflowed.body_bytes, accepted.body_bytes]
    assert [call.outcome for call in provider_window.provider.calls] == ["context_overflow", "ok"]
    assert notices[0] == OVERFLOW_NOTICE
    assert session.learned_cap is None  # a context overflow says nothing about bytes
    assert session.stats.recoveries == 1
    assert_nothing_lost(original, session.history, session.archive)


def test_extra_kwargs_body_fields_are_counted_in_request_bytes(sdk: Sdk, stack: Callable[..., Stack]) -> None:
    extra = {
        "metadata": {"user_id": "u-1"},
        "timeout": 30,
        "extra_body": {"x_trace": "t" * 40},
        "extra_headers": {"x-team": "core"},
    }
    capped = stack([BodyCap(limit=64, until_turn=1)])
    sender = sdk.sender(capped.client, model=sdk.model, extra_kwargs=extra)
    request = ChatRequest((Message.system("Be brief."), Message.user("héllo ✓")), max_tokens=64)

    with pytest.raises(SendFailed) as failed:
        sender.send(request)
    response = sender.send(request)  # the same request, forwarded on turn 2

    rejected, accepted = capped.server.records
    assert failed.value.request_bytes == rejected.content_length
    assert response.request_bytes == accepted.body_bytes == rejected.content_length
    assert capped.provider.last_call.outcome == "ok"
