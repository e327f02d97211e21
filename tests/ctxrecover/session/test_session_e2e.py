"""End to end over httpx.MockTransport: a Session against a gateway that rejects bodies.

These are the issue's acceptance scenarios (SPEC §6-§8): the 128 KB corporate WAF,
the floor fail-fast, the once-per-session payload notice, the 4 MB assumption and
a rate limit that is never compacted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import pytest

from ctxrecover.archive import MemoryArchive
from ctxrecover.errors import PayloadFloorError, RecoveryExhausted, UnrecoverableFailure
from ctxrecover.events import Notice, PostCompact, PreCompact
from ctxrecover.messages import Message, ToolCall
from ctxrecover.policy import DEFAULT_POLICY, Policy
from ctxrecover.session import Session
from ctxrecover.sizes import format_payload_size
from ctxrecover.transport import ChatRequest, ChatResponse, HttpxSender
from ctxrecover.wire import Usage

KB = 1024
WAF_PAGE = (
    "<html><head><title>403 Forbidden</title></head><body><h1>Request blocked</h1>"
    "<p>Your request was blocked by the corporate web application firewall.</p></body></html>"
)
PAYLOAD_NOTICE_TAG = "[SYSTEM NOTICE — PAYLOAD LIMIT HIT]"


def bedrock_ok(text: str = "ok") -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 100, "outputTokens": 2, "totalTokens": 102},
        },
    )


class Gateway:
    """A corporate gateway in front of Bedrock: HTML 403 for every body >= ``limit``."""

    def __init__(self, limit: int, reject: Callable[[httpx.Request], httpx.Response] | None = None) -> None:
        self.limit = limit
        self.sizes: list[int] = []
        self.bodies: list[bytes] = []
        self._reject = reject
        self._lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            self.sizes.append(len(request.content))
            self.bodies.append(request.content)
        if len(request.content) >= self.limit:
            if self._reject is not None:
                return self._reject(request)
            return httpx.Response(403, text=WAF_PAGE, headers={"content-type": "text/html"})
        return bedrock_ok()


def make_session(gateway: Gateway, **kwargs: object) -> tuple[Session, list[object]]:
    events: list[object] = []
    sender = HttpxSender(
        "bedrock-converse",
        base_url="http://gateway.test",
        model="anthropic.claude-3-5-sonnet",
        transport=httpx.MockTransport(gateway),
    )
    kwargs.setdefault("archive", MemoryArchive())
    session = Session(sender, on_event=events.append, **kwargs)  # type: ignore[arg-type]
    return session, events


def agent_history(system_chars: int, results: int, result_chars: int) -> list[Message]:
    """A system prompt, one small exchange, then one turn of ``results`` parallel file reads.

    The big reads are in the newest turn, so microcompact (which ages old results)
    leaves them whole and the request really is as large as the history.
    """
    history = [
        Message.system("You are a coding agent. " + "R" * system_chars),
        Message.user("Fix the bug."),
        Message.assistant("Looking at the repository layout first."),
        Message.user("Go ahead and read the files."),
    ]
    calls = [ToolCall(f"call_{i}", "read_file", f'{{"path": "src/mod_{i}.py"}}') for i in range(results)]
    history.append(Message.assistant("Reading the files.", calls))
    for i in range(results):
        history.append(Message.tool(f"call_{i}", f"file {i}\n" + ("line of code\n" * (result_chars // 13))))
    return history


def notices(events: list[object]) -> list[str]:
    return [e.text for e in events if isinstance(e, Notice)]


def test_corporate_waf_learns_cap_from_first_rejection_and_succeeds_next() -> None:
    gateway = Gateway(limit=129 * KB)
    session, events = make_session(gateway)
    session.extend(agent_history(system_chars=20 * KB, results=8, result_chars=15 * KB))

    reply = session.complete()

    assert reply.content == "ok"
    # SPEC §12: the first request of a gateway is blocked by a page that does not say why — a one-word
    # probe (the route passes), the base (it passes), blanks as large, nothing of the conversation (refused:
    # size), then the retry under the cap learned from it
    assert len(gateway.sizes) == 5
    rejected, word, base, telling, accepted = gateway.sizes
    assert rejected >= 129 * KB > accepted and word < base < 129 * KB <= telling
    assert session.learned_cap == rejected * 3 // 4
    lines = notices(events)
    assert (
        "⚠ Recoverable failure (proxy/WAF rejection (403 + security signals)) — compacting and retrying"
        in lines
    )
    learned = (
        f"ℹ Gateway rejected a {format_payload_size(rejected)} request — payload cap set to "
        f"{format_payload_size(rejected * 3 // 4)} for this session (export CHATCLI_MAX_PAYLOAD to override)"
    )
    retry = "⚠ Recoverable failure (proxy/WAF rejection (403 + security signals)) — compacting and retrying"
    assert lines.index(retry) < lines.index(learned)  # SPEC §6: the retry line, then what it teaches
    assert lines.count(retry) == 1
    assert session.stats.rejected_requests == 2 and session.stats.block_experiments == 3


def test_a_request_that_is_all_system_prompt_fails_fast_without_spending_an_attempt() -> None:
    # SPEC §11: the diagnosis must be true. The rejected request is the 140 KB system prompt plus a
    # 5-char question: the system prompt alone is (just) under the rejected size, the smallest request
    # compaction can produce is not — so that is what the message names, with its parts.
    gateway = Gateway(limit=129 * KB)
    session, events = make_session(gateway)
    session.extend([Message.system("S" * (140 * KB)), Message.user("hello")])
    before = session.history

    with pytest.raises(PayloadFloorError) as info:
        session.complete()

    # the block; one word alone passes (not the route); blanks as large without the conversation:
    # refused too — a size limit, and no compaction can help
    assert len(gateway.sizes) == 3 and gateway.sizes[2] == gateway.sizes[0] > 100 > gateway.sizes[1]
    assert session.stats.recovery_attempts == 0
    error = info.value
    assert error.over == "smallest_request" and error.over_bytes == gateway.sizes[0] == error.rejected_bytes
    assert str(error).startswith(
        f"✖ The smallest request compaction can produce is {format_payload_size(gateway.sizes[0])} "
        "(system prompt: 140.0 KB, tool definitions: 0 B, newest messages: "
    )
    assert error.failure is not None and error.failure.kind == "waf_rejection"
    assert session.history == before
    assert not any(isinstance(e, PreCompact | PostCompact) for e in events)


def test_a_system_prompt_grown_past_a_rejected_size_gets_the_spec_text_and_no_request() -> None:
    # The seed's incident: the cap was learned from a 60 KB rejection; then skills and MCP docs
    # grew the system prompt to 80 KB. The next turn is known to fail before it is sent, and the
    # system prompt is what is over: SPEC §6.2's text, byte for byte.
    gateway = Gateway(limit=50 * KB)
    session, _ = make_session(gateway)
    session.extend([Message.system("rules"), Message.user("U" * (60 * KB))])
    session.complete()
    rejected = session.gateway.smallest_rejected
    assert rejected is not None and session.stats.rejected_requests == 2  # the block, the telling request
    sent = len(gateway.sizes)
    session.restore(
        {
            **session.state(),
            "history": [Message.system("S" * (80 * KB)).to_dict(), Message.user("next").to_dict()],
        }
    )

    with pytest.raises(PayloadFloorError) as info:
        session.complete()

    assert len(gateway.sizes) == sent  # nothing sent
    assert info.value.over == "system_prompt"
    assert str(info.value) == (
        "✖ The non-compactable request base (system prompt: 80.0 KB — personas, skills, MCP tool docs) "
        f"meets or exceeds the size the gateway rejected ({format_payload_size(rejected)}). History "
        "compaction cannot help — reduce MCP servers, skills or personas, or raise the proxy/WAF "
        "body-size limit"
    )


def test_floor_fails_fast_naming_the_smallest_request_when_no_compaction_could_get_under() -> None:
    # The system part (126 KB) is under the rejected request, but the newest message is a 3 KB
    # verbatim recall result no pass may cut: the least any compaction leaves is the request
    # itself, so the session fails at once — and says so, instead of blaming the system prompt.
    gateway = Gateway(limit=128 * KB)
    session, _ = make_session(gateway)
    task = Message.user("T" * (3 * KB), preserve_verbatim=True)
    session.extend([Message.system("S" * (126 * KB)), task])

    with pytest.raises(PayloadFloorError) as info:
        session.complete()

    # the block; one word alone passes; blanks as large without the conversation: refused too
    assert len(gateway.sizes) == 3 and gateway.sizes[2] == gateway.sizes[0] > 100 > gateway.sizes[1]
    assert session.stats.recovery_attempts == 0
    error = info.value
    assert error.over == "smallest_request" and error.rejected_bytes == gateway.sizes[0]
    assert error.over_bytes >= gateway.sizes[0] * 0.98
    smallest = format_payload_size(error.over_bytes)
    assert str(error).startswith(
        f"✖ The smallest request compaction can produce is {smallest} (system prompt: 126."
    )
    assert "newest messages: 3." in str(error)
    assert str(error).endswith(
        f"rejected ({format_payload_size(gateway.sizes[0])}). "
        + (
            "History compaction cannot help further — shorten the newest messages, reduce MCP servers, "
            "skills or personas, or raise the proxy/WAF body-size limit"
        )
    )


def test_no_false_floor_diagnosis_when_compaction_can_shrink_the_newest_messages() -> None:
    # The same 126 KB system prompt and 3 KB task, not verbatim: the old dry run of the last ladder
    # step (which keeps 4000 chars per message) said "cannot help"; compaction can cut the task to a
    # head, a tail and its recall marker, so the request goes through and the task stays recallable.
    gateway = Gateway(limit=128 * KB)
    session, _ = make_session(gateway)
    session.extend([Message.system("S" * (126 * KB)), Message.user("T" * (3 * KB))])

    assert session.complete().content == "ok"

    # the block, the one-word and base probes, the telling request (size), the compacted retry
    assert len(gateway.sizes) == 5 and gateway.sizes[-1] < 128 * KB
    assert session.stats.rejected_requests == 2


def test_payload_notice_is_added_once_over_three_recoveries() -> None:
    # With cap_strategy="none" nothing is learned, so each turn that grows past the 40 KB gateway is
    # one more payload recovery; the notice message is added on the first only and, once compaction
    # has archived it, never again.
    gateway = Gateway(
        limit=40 * KB,
        reject=lambda request: httpx.Response(
            413, text="<html><center><h1>413 Request Entity Too Large</h1></center></html>"
        ),
    )
    session, _events = make_session(gateway, policy=Policy(cap_strategy="none"))
    session.extend(agent_history(system_chars=1000, results=4, result_chars=12 * KB))
    for turn in range(3):
        session.complete()
        session.add(Message.user(f"next step {turn}: " + "context " * 5200))

    assert session.stats.recoveries == 3
    assert session.learned_cap is None and session.gateway.hard_limit is None  # evidence kept, unused
    carried = [PAYLOAD_NOTICE_TAG.encode() in body for body in gateway.bodies]
    assert all(body.count(PAYLOAD_NOTICE_TAG.encode()) <= 1 for body in gateway.bodies)
    first = carried.index(True)
    assert carried[first:] == sorted(carried[first:], reverse=True)  # once gone, never added back


class EofOnce:
    """A sender whose first request dies with a dropped connection of unknown size."""

    wire_format = "openai-chat"
    model = "gpt-4.1"  # a 1M-token window: no planned compaction below 2.4 MB

    def __init__(self) -> None:
        self.calls = 0

    def send(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        if self.calls == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return ChatResponse(Message.assistant("ok"), "end_turn", False, Usage(), request_bytes=0)


def test_unknown_size_eof_with_large_history_assumes_4mb() -> None:
    events: list[object] = []
    sender = EofOnce()
    session = Session(sender, on_event=events.append, archive=MemoryArchive())  # type: ignore[arg-type]
    session.extend(agent_history(system_chars=1000, results=32, result_chars=19 * KB))  # ~620 KB

    assert session.complete().content == "ok"

    assert sender.calls == 2
    assert session.payload_cap == 4 * 1024 * 1024
    assert "ℹ Assuming 4 MB payload cap — export CHATCLI_MAX_PAYLOAD (e.g. 5MB, 512KB) to adjust" in notices(
        events
    )


def test_rate_limit_is_never_compacted() -> None:
    def rate_limited(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            429,
            json={"message": "Too many requests, please wait before trying again."},
            headers={"x-amzn-errortype": "ThrottlingException"},
        )

    gateway = Gateway(limit=0, reject=rate_limited)
    session, events = make_session(gateway)
    session.extend(agent_history(system_chars=1000, results=3, result_chars=1000))
    before = session.history

    with pytest.raises(UnrecoverableFailure) as info:
        session.complete()

    assert info.value.failure is not None and info.value.failure.kind == "rate_limit"
    assert session.history == before
    assert not any(isinstance(e, PreCompact | PostCompact) for e in events)
    assert session.stats.compactions == 0
    assert len(gateway.sizes) == 1


def test_exhausted_recovery_leaves_history_recoverable(assert_nothing_lost: Callable[..., None]) -> None:
    # a size limit just above the base: every request compaction can make is still over it
    gateway = Gateway(limit=600)
    session, _ = make_session(gateway, policy=Policy(max_recovery_attempts=3))
    original = agent_history(system_chars=100, results=6, result_chars=2 * KB)
    session.extend(original)

    with pytest.raises(RecoveryExhausted) as info:
        session.complete()

    assert info.value.attempts == 3
    assert all(size >= 600 for size in gateway.sizes[3:])  # after the probes, nothing under the cap
    assert_nothing_lost(original, session.history, session.archive)


def test_concurrent_sessions_keep_their_own_learned_caps() -> None:
    results: dict[int, tuple[int | None, int]] = {}
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            gateway = Gateway(limit=(60 + index * 4) * KB)
            session, _ = make_session(gateway)
            session.extend(agent_history(system_chars=2 * KB, results=12, result_chars=19 * KB))
            session.complete()
            rejected = [size for size in gateway.sizes if size >= gateway.limit]
            results[index] = (session.learned_cap, min(rejected))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert not errors
    for learned, smallest_rejected in results.values():
        assert learned == smallest_rejected * 3 // 4
    assert len({learned for learned, _ in results.values()}) > 1
    assert DEFAULT_POLICY == Policy()
    assert DEFAULT_POLICY.tool_result_budget_chars == 200_000
    assert DEFAULT_POLICY.tool_result_max_chars == 20_000
