"""The Session turn loop: escalation, malformed history, transient retries, pre-flight,
planned and manual compaction, configuration reports, context editing, calibration,
hooks, persistence and cancellation (SPEC §3, §5-§10).

The gateway scenarios of the issue live in test_session_e2e.py; these tests drive the
loop with scripted fake senders or ``HttpxSender`` over ``httpx.MockTransport``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import pytest

from ctxrecover.archive import archive_key, marker
from ctxrecover.classify import FailureKind
from ctxrecover.errors import CompactionCancelled, RecoveryExhausted, UnrecoverableFailure
from ctxrecover.events import Event, Notice, PostCompact, PreCompact, StatusEvent
from ctxrecover.messages import Message, ToolCall
from ctxrecover.policy import ENV_VARIABLES, ConfigWarning, Policy
from ctxrecover.recovery import RECOVERABLE_FAILURE_CODE
from ctxrecover.session import Session, resolve_summarizer
from ctxrecover.sizes import format_payload_size, total_weight
from ctxrecover.summarize import (
    CancelToken,
    ContextEngineSummarizer,
    HttpSummarizer,
    SummaryResult,
    build_prompt,
)
from ctxrecover.transport import ChatRequest, ChatResponse, HttpxSender, SendFailed
from ctxrecover.wire import Usage, WireFormat, request_size

KB = 1024
CONTINUATION = (
    "Your response was cut off at the token limit. Resume DIRECTLY from where you stopped — do not "
    "repeat any content. Continue the implementation or explanation from the exact point of interruption."
)
MISSING_RESULT = (
    "[Tool result missing — the tool execution was interrupted or failed silently. "
    "Do NOT retry this tool call. Analyze what went wrong and try a different approach.]"
)
OPENAI_DANGLING_CALL_ERROR = {
    "error": {
        "message": "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: call_2",
        "type": "invalid_request_error",
        "param": "messages.[3].role",
        "code": None,
    }
}
ANTHROPIC_ALTERNATION_ERROR = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": 'messages: roles must alternate between "user" and "assistant", '
        'but found multiple "user" roles in a row',
    },
}
OVERFLOW_ERROR = SendFailed(
    "HTTP 400",
    request_bytes=1000,
    status=400,
    body='{"error":{"code":"context_length_exceeded","message":"This model\'s maximum context length '
    'is 128000 tokens. However, your messages resulted in 130000 tokens."}}',
)


# -- helpers --------------------------------------------------------------------------------


def answer(text: str = "ok", *, input_tokens: int = 0, stop: str = "stop") -> ChatResponse:
    return ChatResponse(
        Message.assistant(text), stop, False, Usage(input_tokens=input_tokens), request_bytes=0
    )


Step = ChatResponse | BaseException | Callable[[ChatRequest], ChatResponse]


class ScriptedSender:
    """A fake provider: plays ``script`` in order (the last step repeats) and records requests."""

    def __init__(self, *script: Step, wire_format: str = "openai-chat", model: str = "gpt-4o") -> None:
        self.script = list(script) or [answer()]
        self.wire_format = WireFormat(wire_format)
        self.model = model
        self.requests: list[ChatRequest] = []

    def send(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(step, BaseException):
            raise step
        if callable(step):
            return step(request)
        return step


class Transport:
    """An ``httpx.MockTransport`` handler answering from a script of responses; records requests."""

    def __init__(self, *script: httpx.Response | Callable[[httpx.Request], httpx.Response]) -> None:
        self.script = list(script)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        return step(request) if callable(step) else step

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]


def http_sender(fmt: str, model: str, transport: Transport) -> HttpxSender:
    return HttpxSender(
        fmt, base_url="http://provider.test", model=model, transport=httpx.MockTransport(transport)
    )


def anthropic_reply(text: str, stop: str = "end_turn", **extra: Any) -> httpx.Response:
    usage = {"input_tokens": 10, "output_tokens": 5}
    return httpx.Response(
        200, json={"content": [{"type": "text", "text": text}], "stop_reason": stop, "usage": usage, **extra}
    )


def chat_reply(text: str = "ok") -> httpx.Response:
    return httpx.Response(
        200, json={"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
    )


def conversation(n: int, chars: int, *, system: str | None = "You are helpful.") -> list[Message]:
    """``n`` alternating user/assistant messages of about ``chars`` chars each, all distinct."""
    history = [Message.system(system)] if system else []
    for i in range(n):
        role = Message.user if i % 2 == 0 else Message.assistant
        history.append(role(f"message {i}: " + "abcdefghij " * (chars // 11)))
    return history


def notices(events: Sequence[object], code: str | None = None) -> list[str]:
    return [e.message for e in events if isinstance(e, Notice) and (code is None or e.code == code)]


def statuses(events: Sequence[object]) -> list[StatusEvent]:
    return [e for e in events if isinstance(e, StatusEvent)]


def hooks(events: Sequence[object]) -> list[str]:
    return [e.text for e in events if isinstance(e, PreCompact | PostCompact)]


class FakeSummarizer:
    """A deterministic summarizer recording its prompts."""

    window_tokens = 32_000

    def __init__(
        self, text: str = "## Key Decisions\n- keep the REST API, version it under /v2\n" * 2
    ) -> None:
        self.text = text
        self.prompts: list[str] = []

    def summarize(
        self,
        prompt: str,
        *,
        instruction: str | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> SummaryResult:
        self.prompts.append(prompt)
        return SummaryResult(self.text, input_tokens=len(prompt) // 4, output_tokens=len(self.text) // 4)


# -- output truncation escalation (SPEC §8) ----------------------------------------------------


def test_truncated_answers_escalate_4096_8192_16384_and_continue_in_the_history() -> None:
    transport = Transport(
        anthropic_reply("part one, ", "max_tokens"),
        anthropic_reply("part two, ", "max_tokens"),
        anthropic_reply("the end."),
    )
    session = Session(http_sender("anthropic", "claude-test", transport))
    session.add(Message.user("Write the module."))

    reply = session.complete()

    assert [body["max_tokens"] for body in transport.bodies] == [4096, 8192, 16384]
    assert reply.content == "the end."
    assert [(m.role, m.content) for m in session.history] == [
        ("user", "Write the module."),
        ("assistant", "part one, "),
        ("user", CONTINUATION),
        ("assistant", "part two, "),
        ("user", CONTINUATION),
        ("assistant", "the end."),
    ]
    assert session.stats.escalations == 2
    assert transport.bodies[2]["messages"][-1] == {"role": "user", "content": CONTINUATION}


def test_after_two_escalations_the_partial_answer_is_returned() -> None:
    transport = Transport(anthropic_reply("still cut", "max_tokens"))
    session = Session(http_sender("anthropic", "claude-test", transport))
    session.add(Message.user("Write everything."))

    reply = session.complete()

    assert len(transport.requests) == 3
    assert reply.content == "still cut"
    assert session.history[-1] == reply
    assert sum(m.content == CONTINUATION for m in session.history) == 2


def test_an_escalation_at_the_provider_cap_does_not_consume_an_attempt() -> None:
    transport = Transport(anthropic_reply("cut", "max_tokens"))
    session = Session(
        http_sender("anthropic", "claude-test", transport), policy=Policy(max_output_tokens_cap=8192)
    )
    session.add(Message.user("Write everything."))

    session.complete()

    assert [body["max_tokens"] for body in transport.bodies] == [4096, 8192]
    assert session.escalation.escalations == 1  # 8192 → 8192 could not grow: not counted
    assert session.stats.escalations == 1
    assert not session.escalation.exhausted


def test_a_changed_user_max_tokens_wins_over_the_escalated_value() -> None:
    transport = Transport(anthropic_reply("cut", "max_tokens"), anthropic_reply("done"))
    session = Session(http_sender("anthropic", "claude-test", transport))
    session.add(Message.user("one"))
    session.complete()  # 4096 → 8192
    session.add(Message.user("two"))
    session.complete()  # unchanged user setting: the escalated value stays
    session.add(Message.user("three"))
    session.complete(max_tokens=1000)  # the user changed it: it wins

    assert [body["max_tokens"] for body in transport.bodies] == [4096, 8192, 8192, 1000]


# -- malformed history -------------------------------------------------------------------------


def test_rejected_dangling_tool_call_is_repaired_in_the_history_without_an_identical_resend() -> None:
    # The outgoing copy is pairing-repaired before every send (SPEC §3 order), so repairing the
    # history changes nothing on the wire: resending would only repeat the rejected body.
    transport = Transport(httpx.Response(400, json=OPENAI_DANGLING_CALL_ERROR), chat_reply("fixed"))
    session = Session(http_sender("openai-chat", "gpt-4o", transport))
    calls = [
        ToolCall("call_1", "read_file", '{"path": "a"}'),
        ToolCall("call_2", "read_file", '{"path": "b"}'),
    ]
    session.extend(
        [
            Message.user("Read a and b."),
            Message.assistant("", calls),
            Message.tool("call_1", "contents of a"),
            Message.user("Go on."),
        ]
    )

    with pytest.raises(UnrecoverableFailure) as info:
        session.complete()

    assert info.value.failure is not None and info.value.failure.kind is FailureKind.MALFORMED_HISTORY
    assert len(transport.requests) == 1
    sent = json.loads(transport.requests[0].content)["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    history = session.history
    synthetic = history[3]
    assert (synthetic.role, synthetic.tool_call_id, synthetic.content) == ("tool", "call_2", MISSING_RESULT)
    assert synthetic.is_error and synthetic.error_code == "missing_result"
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "user"]
    assert session.stats.compactions == 0  # repaired, never truncated


def test_malformed_history_is_retried_once_when_the_repair_changes_the_request() -> None:
    transport = Transport(httpx.Response(400, json=OPENAI_DANGLING_CALL_ERROR), chat_reply("fixed"))
    session = Session(http_sender("openai-chat", "gpt-4o", transport))
    # an outgoing copy that skips pairing repair (as custom passes might)
    session.conversation.passes.outgoing = lambda history, **limits: list(history)  # type: ignore[method-assign]
    session.extend(
        [
            Message.user("Read a."),
            Message.assistant("", [ToolCall("call_1", "read_file", '{"path": "a"}')]),
            Message.user("Go on."),
        ]
    )

    assert session.complete().content == "fixed"
    assert len(transport.requests) == 2
    assert [m.role for m in session.history] == ["user", "assistant", "tool", "user", "assistant"]


def test_malformed_history_that_pairing_cannot_fix_fails_without_a_second_identical_request() -> None:
    transport = Transport(httpx.Response(400, json=ANTHROPIC_ALTERNATION_ERROR))
    session = Session(http_sender("anthropic", "claude-test", transport))
    session.extend([Message.user("a"), Message.assistant("b"), Message.user("c")])
    before = session.history

    with pytest.raises(UnrecoverableFailure) as info:
        session.complete()

    assert len(transport.requests) == 1
    assert info.value.failure is not None and info.value.failure.kind is FailureKind.MALFORMED_HISTORY
    assert session.history == before


# -- transient network failures ----------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [httpx.ConnectError("[Errno 111] Connection refused"), httpx.RemoteProtocolError("Server disconnected")],
    ids=["connect", "remote-protocol"],
)
def test_transient_network_failure_is_retried_after_the_injected_sleep_without_compaction(
    error: Exception,
) -> None:
    slept: list[float] = []
    events: list[Event] = []
    sender = ScriptedSender(error, error, answer("back"))
    session = Session(sender, on_event=events.append, sleep=slept.append)
    session.extend(conversation(4, 200))

    assert session.complete().content == "back"

    assert slept == [1.0, 4.0]
    assert len(sender.requests) == 3
    assert not any(isinstance(e, PreCompact | PostCompact) for e in events)
    assert session.stats.recovery_attempts == 0


def test_transient_retries_are_bounded() -> None:
    slept: list[float] = []
    sender = ScriptedSender(httpx.ConnectError("[Errno 111] Connection refused"))
    session = Session(sender, sleep=slept.append, transient_retries=3)
    session.extend(conversation(2, 50))

    with pytest.raises(UnrecoverableFailure) as info:
        session.complete()

    assert info.value.failure is not None and info.value.failure.kind is FailureKind.TRANSIENT_NETWORK
    assert len(sender.requests) == 4
    assert slept == [1.0, 4.0, 4.0]


# -- pre-flight (SPEC §7) ----------------------------------------------------------------------


def test_preflight_near_the_configured_cap_says_so_and_compacts_at_ratio_040() -> None:
    events: list[Event] = []
    sender = ScriptedSender()
    policy = Policy(payload_cap=100_000, context_window=40_000)
    session = Session(sender, policy=policy, on_event=events.append)
    history = conversation(44, 2000)
    session.extend(history)
    size = request_size(history, "openai-chat", model="gpt-4o")
    assert size > 85_000

    session.complete()

    assert notices(events, "preflight")[0] == (
        f"ℹ pre-flight: history {format_payload_size(size)} ≈ {size * 100 // 100_000}% of configured cap "
        "(97.7 KB) — compacting"
    )
    # under the cap: the system prompt + 70% of the room the cap leaves beyond it (SPEC §11 decision)
    system = history[0]
    room = 100_000 - request_size([system], "openai-chat", model="gpt-4o")
    under_cap = len(system.content) + int(room * 0.7)
    assert session.char_budget(0.40) == 64_000 < session.char_budget() == under_cap
    start = statuses(events)[0]
    assert start.message == (
        f"📦 Compacting history ({len(history)} msgs, {format_payload_size(total_weight(history))} → "
        "target 62.5 KB)"
    )
    assert request_size(sender.requests[0].messages, "openai-chat", model="gpt-4o") <= 100_000


def test_uncapped_history_over_2_5mb_is_warned_once_per_session() -> None:
    events: list[Event] = []
    session = Session(ScriptedSender(), policy=Policy(context_window=2_000_000), on_event=events.append)
    history = conversation(27, 100_000)
    session.extend(history)
    size = request_size(history, "openai-chat", model="gpt-4o")

    session.complete()
    session.add(Message.user("and again"))
    session.complete()

    assert notices(events, "uncapped_history") == [
        f"ℹ history {format_payload_size(size)} — if you are behind a proxy/gateway, export "
        "CHATCLI_MAX_PAYLOAD=5MB (adjust to the proxy limit)"
    ]
    assert session.stats.compactions == 0


# -- microcompact (SPEC §3.3) ------------------------------------------------------------------


def test_microcompact_notice_is_emitted_on_a_real_agent_history() -> None:
    events: list[Event] = []
    session = Session(ScriptedSender(), on_event=events.append)
    old_read = "package main\n" + "func f() {}\n" * 599 + "// end"  # summarized: 4 assistant turns old
    newer_read = "line of log output\n" * 400  # previewed: 3 assistant turns old
    session.extend(
        [
            Message.system("agent"),
            Message.user("Investigate."),
            Message.assistant("", [ToolCall("c1", "read_file", '{"path": "main.go"}')]),
            Message.tool("c1", old_read),
            Message.assistant("", [ToolCall("c2", "read_file", '{"path": "app.log"}')]),
            Message.tool("c2", newer_read),
            Message.assistant("Both read."),
            Message.user("And?"),
            Message.assistant("Thinking."),
            Message.user("Conclude."),
            Message.assistant("Almost."),
            Message.user("Now."),
        ]
    )

    session.complete()

    history = session.history
    summarized, previewed = history[3].content, history[5].content
    assert summarized.startswith(f"[Old tool result cleared — 601 lines, {len(old_read)} chars, Go source]")
    assert "\n[... " in previewed and " chars omitted from old tool result ...]\n" in previewed
    freed = len(old_read) - len(summarized) + len(newer_read) - len(previewed)
    assert notices(events, "microcompact") == [
        f"🗜 microcompact: 1 truncated, 1 summarized, {format_payload_size(freed)} freed"
    ]
    assert session.archive.get(archive_key(old_read)) == old_read
    assert marker(archive_key(old_read)) in summarized


def numbered(path: str, lines: int, tag: str) -> str:
    body = "\n".join(f"{n:>6}\t{tag} line {n} of {path}" for n in range(1, lines + 1))
    return f"<<< FILE: {path} >>>\n{body}"


def test_every_archive_write_is_counted_by_its_source_and_recoveries_count_as_compactions() -> None:
    overflow = SendFailed(
        "HTTP 400",
        request_bytes=900_000,
        status=400,
        # the window it states is the one the session assumed: the recovery's rungs do the cutting
        body='{"error":{"code":"context_length_exceeded","message":"This model\'s maximum context length '
        'is 128000 tokens."}}',
    )
    sender = ScriptedSender(answer("first"), overflow, answer("second"), answer("third"))
    session = Session(sender)
    read = ToolCall("r1", "read_file", '{"path": "src/big.py"}')
    reread = ToolCall("r2", "read_file", '{"path": "src/big.py"}')
    session.extend(
        [
            Message.system("agent"),
            Message.user("Investigate."),
            Message.assistant("", [read]),
            Message.tool("r1", numbered("src/big.py", 200, "old")),  # superseded by the re-read: dedup
            Message.assistant("", [reread]),
            Message.tool("r2", numbered("src/big.py", 200, "new")),
            Message.assistant("Read twice.", [ToolCall("log", "run", '{"cmd": "make"}')]),
            Message.tool("log", "build output line\n" * 2_000),  # 36 000 chars: a tool-budget preview
        ]
    )
    session.complete()
    for turn in range(4):  # the early results age: microcompact previews and clears them
        session.add(Message.user(f"step {turn}: " + "context words " * (300 if turn == 1 else 5)))
        session.complete()

    by_source = session.stats.chars_archived_by_source
    assert {"dedup", "tool_budget", "microcompact", "recovery"} <= set(by_source), by_source
    assert all(chars > 0 for chars in by_source.values())
    assert session.stats.chars_archived == sum(by_source.values())
    # the byte-stable preview of the build log is re-archived every turn but counted once
    assert by_source["tool_budget"] < 2 * len("build output line\n" * 2_000)
    assert session.stats.recovery_attempts >= 1 and session.stats.compactions >= 1


# -- planned compaction before the send (SPEC §5, §1.4) ---------------------------------------


def test_planned_compaction_runs_before_the_send_and_fits_the_cap_in_real_bytes(
    assert_nothing_lost: Callable[..., None],
) -> None:
    events: list[Event] = []
    transport = Transport(chat_reply("ok"))
    cap = 64 * KB
    session = Session(
        http_sender("openai-chat", "gpt-4o", transport),
        policy=Policy(payload_cap=cap),
        on_event=events.append,
    )
    original = [Message.system("Answer in Japanese.")]
    for i in range(30):
        text = f'{i}: 「日本語の説明」 "quoted"\n' * 60  # 3-byte chars, escaped quotes and newlines
        original.append(Message.user(text) if i % 2 == 0 else Message.assistant(text))
    session.extend(original)
    assert request_size(original, "openai-chat", model="gpt-4o") > 3 * total_weight(original) // 2
    assert total_weight(original) <= session.char_budget(0.40)  # only the real bytes are over

    session.complete()

    (request,) = transport.requests
    assert len(request.content) <= cap
    phases = [s.phase for s in statuses(events)]
    assert phases[:2] == ["start", "trim"]
    assert statuses(events)[1].message == "🧹 Trim: stripping reasoning/dedup (no LLM)…"
    assert statuses(events)[0].message.startswith(f"📦 Compacting history ({len(original)} msgs, ")
    assert "emergency" in phases and phases.index("start") < phases.index("emergency")
    first_status = next(i for i, e in enumerate(events) if isinstance(e, StatusEvent))
    first_preflight = next(i for i, e in enumerate(events) if isinstance(e, Notice) and e.code == "preflight")
    assert first_preflight < first_status
    assert session.history[0] == original[0]
    assert_nothing_lost(original, session.history, session.archive)


def test_policy_headroom_bounds_the_budget_under_a_cap() -> None:
    session = Session(ScriptedSender(), policy=Policy(payload_cap=100_000, payload_cap_headroom=0.5))
    # the headroom applies to the room beyond the non-compactable base (here an empty request's envelope)
    assert session.char_budget() == int((100_000 - request_size([], "openai-chat", model="gpt-4o")) * 0.5)


def test_a_large_system_prompt_keeps_the_budget_above_it_under_a_cap() -> None:
    # SPEC §11 decision: with §1.3's 70% × cap, a 90 KB system prompt under a 100 KB cap gave a 70 KB
    # budget that no compaction could reach; the headroom now applies to the 10 KB of room.
    system = Message.system("S" * 90_000)
    session = Session(ScriptedSender(), policy=Policy(payload_cap=100_000), history=[system])
    room = 100_000 - request_size([system], "openai-chat", model="gpt-4o")
    assert session.char_budget() == 90_000 + int(room * 0.7) > 90_000


# -- budgets by mode and manual compaction -----------------------------------------------------


@pytest.mark.parametrize(("mode", "ratio", "keep"), [("chat", 0.75, 10), ("agent", 0.60, 8)])
def test_chat_and_agent_modes_use_their_own_ratio_and_keep_recent(mode: str, ratio: float, keep: int) -> None:
    sender = ScriptedSender()
    session = Session(sender, policy=Policy(context_window=2000), mode=mode)  # type: ignore[arg-type]
    assert session.char_budget() == int(2000 * ratio * 4)
    original = conversation(40, 300, system=None)
    session.extend(original)

    session.complete()

    sent = list(sender.requests[0].messages)
    assert sent[0].content.startswith("[CONTEXT TRUNCATED: ")
    assert sent[1:] == original[-keep:]


def test_manual_compact_uses_ratio_050_and_can_be_undone() -> None:
    session = Session(ScriptedSender(), policy=Policy(context_window=2000))
    original = conversation(40, 300)
    session.extend(original)

    report = session.compact()

    assert report.trigger == "manual"
    assert report.budget_chars == session.char_budget(0.50) == 4000
    assert report.chars_after <= 4000 < total_weight(original)
    assert session.undo_compaction() is True
    assert session.history == original
    assert session.undo_compaction() is False


def test_undo_without_any_compaction_returns_false() -> None:
    session = Session(ScriptedSender())
    session.extend(conversation(3, 10))
    assert session.undo_compaction() is False
    assert len(session.history) == 4


def test_guided_compact_sends_the_instruction_and_keeps_the_last_four_messages() -> None:
    summarizer = FakeSummarizer()
    session = Session(ScriptedSender(), summarizer=summarizer)
    original = conversation(12, 100)
    session.extend(original)

    report = session.compact("keep the API decisions")

    (prompt,) = summarizer.prompts
    assert "keep the API decisions" in prompt
    history = session.history
    assert history[0] == original[0]
    assert history[1].is_summary and history[1].summary_of == 8
    assert history[1].content.startswith("[STRUCTURED SUMMARY — covering 8 earlier messages]\n\n")
    assert history[2:] == original[-4:]
    assert report.level == 2 and report.summarizer_calls == 1
    assert session.undo_compaction() and session.history == original


# -- configuration problems are reported once --------------------------------------------------

GARBAGE_ENV = {
    "CHATCLI_CONTEXT_WINDOW": "abc",
    "CHATCLI_MAX_RECOVERY_ATTEMPTS": "abc",
    "CHATCLI_MAX_TOKEN_ESCALATIONS": "-2",
    "CHATCLI_EMERGENCY_KEEP_MESSAGES": "1",
    "CHATCLI_MAX_PAYLOAD": "garbage",
    "CHATCLI_MICROCOMPACT_TRUNCATE_TURNS": "0",
    "CHATCLI_MICROCOMPACT_SUMMARIZE_TURNS": "2.5",
    "CHATCLI_MICROCOMPACT_HEAD_CHARS": "lots",
    "CHATCLI_MICROCOMPACT_TAIL_CHARS": "",
    "CHATCLI_MICROCOMPACT_MIN_CONTENT": "3k",
    "CHATCLI_TOOL_RESULT_BUDGET_CHARS": "1e5",
    "CHATCLI_TOOL_RESULT_MAX_CHARS": "twenty",
    "CHATCLI_COMPACT_MODEL": "gpt-4o-mini",
    "CHATCLI_CONTEXT_ENGINE": "ftp://engine",
    "CHATCLI_SKILL_INJECT_BUDGET": "-1",
    "CHATCLI_SKILL_AGE_TURNS": "never",
    "CHATCLI_MAX_BLOCKED_REQUESTS": "lots",
}


def test_bad_environment_values_run_on_defaults_and_are_reported_once() -> None:
    assert set(GARBAGE_ENV) == set(ENV_VARIABLES)
    with pytest.warns(ConfigWarning) as record:
        policy = Policy.from_env(GARBAGE_ENV)
    assert len(record) == len(GARBAGE_ENV)
    assert policy == Policy()
    events: list[Event] = []
    session = Session(ScriptedSender(), policy=policy, on_event=events.append)
    session.add(Message.user("hi"))

    session.complete()
    first = notices(events, "config")
    session.add(Message.user("again"))
    session.complete()

    assert len(first) == len(GARBAGE_ENV)
    assert sorted(m.split("=", 1)[0] for m in first) == sorted(GARBAGE_ENV)
    assert notices(events, "config") == first
    assert session.policy.max_recovery_attempts == 3


# -- summarizer choice (SPEC §5, §9) -----------------------------------------------------------

SUMMARIZER_ENV = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "sk-x"}


def test_compact_model_builds_a_dedicated_http_summarizer_from_the_env_base_url() -> None:
    built = resolve_summarizer(Policy(compact_model="openai:gpt-4o-mini"), None, env=SUMMARIZER_ENV)

    assert isinstance(built, HttpSummarizer)
    assert (built.model, built.base_url, built.api_key) == ("gpt-4o-mini", "http://127.0.0.1:9/v1", "sk-x")
    session = Session(ScriptedSender(), policy=Policy(compact_model="openai:gpt-4o-mini"), env=SUMMARIZER_ENV)
    assert isinstance(session.compactor.summarizer, HttpSummarizer)


def test_given_summarizer_wins_over_compact_model() -> None:
    mine = FakeSummarizer()
    assert resolve_summarizer(Policy(compact_model="openai:gpt-4o-mini"), mine, env=SUMMARIZER_ENV) is mine
    assert resolve_summarizer(Policy(), None, env={}) is None


def test_http_context_engine_wraps_the_built_in_summarizer() -> None:
    policy = Policy(compact_model="openai:gpt-4o-mini", context_engine="http://engine.test/compact")

    built = resolve_summarizer(policy, None, env=SUMMARIZER_ENV)

    assert isinstance(built, ContextEngineSummarizer)
    assert built.engine == "http://engine.test/compact"
    assert isinstance(built.fallback, HttpSummarizer) and built.fallback.model == "gpt-4o-mini"


def test_provider_context_engine_is_not_a_summarizer() -> None:
    assert resolve_summarizer(Policy(context_engine="provider"), None, env={}) is None


def test_callable_context_engine_goes_first_and_falls_back() -> None:
    calls: list[tuple[str, int, str | None]] = []

    def engine(segment: str, budget: int, instruction: str | None) -> str:
        calls.append((segment, budget, instruction))
        if len(calls) > 1:
            raise RuntimeError("engine down")
        return "engine notes"

    fallback = FakeSummarizer("fallback notes")
    built = resolve_summarizer(Policy(), fallback, engine, env={})
    assert isinstance(built, ContextEngineSummarizer)
    prompt = build_prompt("[user]: hi\n\n")

    first = built.summarize(prompt)
    second = built.summarize(prompt)

    assert (first.text, first.model) == ("engine notes", "engine")
    assert calls[0][0] == "[user]: hi\n\n"
    assert (second.text, second.model) == ("fallback notes", "fallback")
    assert second.fallback_reason is not None and "engine down" in second.fallback_reason
    assert fallback.prompts == [prompt]


# -- Anthropic context editing (SPEC §9) -------------------------------------------------------


def test_provider_context_editing_is_requested_and_mirrored_locally() -> None:
    events: list[Event] = []
    applied = {
        "applied_edits": [
            {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 2, "cleared_input_tokens": 31_000}
        ]
    }
    transport = Transport(anthropic_reply("done", context_management=applied), anthropic_reply("next"))
    session = Session(
        http_sender("anthropic", "claude-test", transport),
        policy=Policy(context_engine="provider"),
        on_event=events.append,
    )
    results = [f"result {i}: " + "data " * 300 for i in range(3)]
    calls = [ToolCall(f"t{i}", "search", f'{{"q": "{i}"}}') for i in range(3)]
    session.extend(
        [
            Message.user("Search three times."),
            Message.assistant("", calls),
            *(Message.tool(f"t{i}", results[i]) for i in range(3)),
        ]
    )

    session.complete()

    request = transport.requests[0]
    assert request.headers["anthropic-beta"] == "context-management-2025-06-27"
    assert transport.bodies[0]["context_management"] == {
        "edits": [
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 100_000},
                "keep": {"type": "tool_uses", "value": 5},
                "clear_at_least": {"type": "input_tokens", "value": 20_000},
            }
        ]
    }
    history = session.history
    for i in (0, 1):
        key = archive_key(results[i])
        assert history[2 + i].content == (
            f"[Tool result cleared by the provider's context editing — {len(results[i])} chars]"
            f"\n[full content recoverable via @recall {marker(key)}]"
        )
        assert session.archive.get(key) == results[i]
    assert history[4].content == results[2]
    assert session.stats.cache_rebuilds_expected == 1
    assert len(notices(events, "context_editing")) == 1

    session.add(Message.user("Go on."))
    session.complete()
    assert results[0].encode() not in transport.requests[1].content


def test_without_the_provider_engine_no_context_editing_is_requested() -> None:
    transport = Transport(anthropic_reply("done"))
    session = Session(http_sender("anthropic", "claude-test", transport))
    session.add(Message.user("hi"))
    session.complete()
    assert "anthropic-beta" not in transport.requests[0].headers
    assert "context_management" not in transport.bodies[0]


# -- chars-per-token calibration ---------------------------------------------------------------


def test_reported_usage_calibrates_chars_per_token_toward_the_observed_ratio() -> None:
    def half_as_many_tokens(request: ChatRequest) -> ChatResponse:
        return answer(input_tokens=total_weight(request.messages) // 2)  # 2 chars per token

    session = Session(ScriptedSender(half_as_many_tokens), policy=Policy(context_window=100_000))
    session.extend(conversation(10, 1000))
    budget_before = session.char_budget()

    session.complete()
    assert session.chars_per_token == pytest.approx(0.7 * 4.0 + 0.3 * 2.0, abs=0.01)
    assert session.char_budget() < budget_before
    for _ in range(20):
        session.add(Message.user("more " * 100))
        session.complete()
    assert session.chars_per_token == pytest.approx(2.0, abs=0.05)


@pytest.mark.parametrize(("tokens_per_char", "bound"), [(1000.0, 1.0), (0.001, 8.0)])
def test_calibration_is_bounded(tokens_per_char: float, bound: float) -> None:
    def skewed(request: ChatRequest) -> ChatResponse:
        return answer(input_tokens=max(200, int(total_weight(request.messages) * tokens_per_char)))

    session = Session(ScriptedSender(skewed))
    session.extend(conversation(4, 100_000 if tokens_per_char < 1 else 100))
    for _ in range(15):
        session.complete()
        session.add(Message.user("next"))
    assert session.chars_per_token == bound


def test_tiny_usage_reports_do_not_calibrate() -> None:
    session = Session(ScriptedSender(answer(input_tokens=50)))
    session.extend(conversation(2, 1000))
    session.complete()
    assert session.chars_per_token == 4.0


# -- memory sink and hooks (SPEC §5) -----------------------------------------------------------


def test_memory_sink_runs_before_every_rewrite_and_hooks_fire_for_each_trigger() -> None:
    log: list[object] = []

    def sink(messages: list[Message]) -> None:
        log.append(("sink", [m.content for m in messages]))

    sender = ScriptedSender(answer("auto done"), answer("manual done"), OVERFLOW_ERROR, answer("recovered"))
    session = Session(sender, policy=Policy(context_window=3000), on_event=log.append, memory_sink=sink)
    original = conversation(30, 400)
    session.extend(original)

    session.complete()  # auto: 30 × 400 chars > 7200
    auto = list(log)
    log.clear()
    session.compact()  # manual, already within budget
    manual = list(log)
    log.clear()
    session.extend([Message.user("List the files."), Message.assistant("", [ToolCall("x", "ls", "{}")])])
    session.complete()  # consumes "manual done"
    session.add(Message.user("Continue."))
    log.clear()
    # context overflow → Level 1 repairs the dangling call in the history, but the request was already
    # repaired on the way out, so Level 1 changes nothing on the wire and Level 2 runs before the resend
    session.complete()
    recovery = list(log)

    assert ("sink", [m.content for m in original[1:]]) in auto
    assert hooks(auto) == ["PreCompact(trigger=auto)", "PostCompact(trigger=auto, outcome=applied)"]
    assert auto.index(("sink", [m.content for m in original[1:]])) < next(
        i for i, e in enumerate(auto) if isinstance(e, PreCompact)
    )
    assert hooks(manual) == ["PreCompact(trigger=manual)", "PostCompact(trigger=manual, outcome=skipped)"]
    assert [e for e in manual if isinstance(e, tuple)] == [("sink", ["auto done"])]  # never flushed before
    assert hooks(recovery) == [
        "PreCompact(trigger=recovery)",
        "PostCompact(trigger=recovery, outcome=applied)",
        "PreCompact(trigger=recovery)",
        "PostCompact(trigger=recovery, outcome=applied)",
    ]
    assert len(sender.requests) == 4  # auto, manual-turn, the rejected one, one resend
    sink_index = next(i for i, e in enumerate(recovery) if isinstance(e, tuple))
    assert sink_index < next(i for i, e in enumerate(recovery) if isinstance(e, PreCompact))
    assert "Continue." in recovery[sink_index][1]  # type: ignore[index]
    retry_notice = "⚠ Recoverable failure (context too long) — compacting and retrying"
    assert notices(recovery) == [retry_notice]  # once for the rejected request, whatever levels it took
    assert recovery.index(Notice(RECOVERABLE_FAILURE_CODE, retry_notice)) < sink_index  # said first
    assert session.history[-1].content == "recovered"


# -- persistence ---------------------------------------------------------------------------------


def test_state_round_trip_keeps_counters_learned_cap_and_the_notice_flag() -> None:
    page = "<html><center><h1>413 Request Entity Too Large</h1></center></html>"
    rejection = httpx.Response(413, text=page, headers={"content-type": "text/html"})

    def gateway(limit: int) -> Transport:
        return Transport(lambda request: rejection if len(request.content) >= limit else chat_reply("ok"))

    def tool_turn(tag: str) -> list[Message]:
        calls = [ToolCall(f"{tag}{i}", "read_file", "{}") for i in range(6)]
        return [
            Message.user(f"Read the {tag} files."),
            Message.assistant("", calls),
            *(Message.tool(f"{tag}{i}", f"{tag} file {i}\n" + "code line\n" * 1500) for i in range(6)),
        ]

    first = Session(http_sender("openai-chat", "gpt-4o", gateway(60 * KB)))
    first.extend([Message.system("agent"), *tool_turn("a")])
    first.complete()
    assert first.learned_cap is not None and first.gateway.payload_notice_sent

    saved = json.loads(json.dumps(first.state()))
    restored = Session(http_sender("openai-chat", "gpt-4o", gateway(60 * KB)))
    restored.restore(saved)

    assert restored.history == first.history
    assert restored.learned_cap == first.learned_cap
    assert restored.stats.to_dict() == first.stats.to_dict()
    assert restored.gateway == first.gateway
    assert restored.chars_per_token == first.chars_per_token

    # A later history without the notice message, larger than anything the gateway accepted but
    # under the learned cap (a budget of the whole cap: no compaction before sending), and a gateway
    # that rejects it: one more recovery, the cap tightens, the once-per-session notice is not added again.
    accepted, cap = first.gateway.largest_accepted, first.gateway.effective_cap
    assert accepted < cap
    base = request_size([Message.system("agent")], "openai-chat", model="gpt-4o")
    later = [Message.system("agent"), Message.user("x" * ((accepted + cap) // 2 - base - 40))]
    saved["history"] = [m.to_dict() for m in later]
    whole_cap = Policy(payload_cap_headroom=1.0, preflight_cap_fraction=1.0)
    transport = Transport(rejection, chat_reply("ok"))
    tighter = Session(http_sender("openai-chat", "gpt-4o", transport), policy=whole_cap)
    tighter.restore(saved)
    tighter.complete()
    assert accepted < len(transport.requests[0].content) < cap
    assert tighter.learned_cap is not None and tighter.learned_cap < first.learned_cap
    assert tighter.stats.recoveries == first.stats.recoveries + 1
    assert not any("[SYSTEM NOTICE — PAYLOAD LIMIT HIT]" in m.content for m in tighter.history)


def test_restored_session_does_not_repeat_the_uncapped_warning() -> None:
    events: list[Event] = []
    policy = Policy(context_window=2_000_000)
    first = Session(ScriptedSender(), policy=policy, on_event=events.append)
    first.extend(conversation(27, 100_000))
    first.complete()
    assert len(notices(events, "uncapped_history")) == 1

    second = Session(ScriptedSender(), policy=policy, on_event=events.append)
    second.restore(first.state())
    second.add(Message.user("more"))
    second.complete()

    assert len(notices(events, "uncapped_history")) == 1


# -- cancellation ----------------------------------------------------------------------------------


class SlowSummarizer(FakeSummarizer):
    """Waits (up to 5 s) for the cancel token, as a long LLM call would."""

    def summarize(
        self,
        prompt: str,
        *,
        instruction: str | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> SummaryResult:
        self.prompts.append(prompt)
        deadline = time.monotonic() + 5
        while cancel is not None and not cancel.cancelled and time.monotonic() < deadline:
            time.sleep(0.005)
        if cancel is not None:
            cancel.raise_if_cancelled()
        return SummaryResult(self.text)


@pytest.mark.parametrize("manual", [False, True], ids=["auto", "manual"])
def test_cancelled_compaction_leaves_the_history_unchanged(manual: bool) -> None:
    events: list[Event] = []
    summarizer = SlowSummarizer()
    sender = ScriptedSender()
    session = Session(
        sender, policy=Policy(context_window=3000), summarizer=summarizer, on_event=events.append
    )
    session.extend(conversation(30, 400))
    before = session.history
    token = CancelToken()
    timer = threading.Timer(0.05, token.cancel)
    timer.start()

    with pytest.raises(CompactionCancelled):
        if manual:
            session.compact(cancel=token)
        else:
            session.complete(cancel=token)
    timer.join()

    assert session.history == before
    assert summarizer.prompts  # the summary was under way
    assert sender.requests == []
    assert statuses(events)[-1].message == "⚠ Compaction cancelled by user"
    assert hooks(events)[-1].endswith("outcome=skipped)")
    assert session.undo_compaction() is False


# -- beyond the reference: what overflows teach ---------------------------------------------------


def test_an_overflow_that_states_the_window_tightens_the_sessions_window_once() -> None:
    overflow = SendFailed(
        "HTTP 400",
        request_bytes=60_000,
        status=400,
        body='{"type":"error","error":{"type":"invalid_request_error",'
        '"message":"prompt is too long: 14000 tokens > 8000 maximum"}}',
    )
    sender = ScriptedSender(overflow, answer("ok"), wire_format="anthropic", model="claude-test")
    events: list[object] = []
    session = Session(sender, on_event=events.append)
    session.extend(conversation(30, 1800))

    session.complete()

    assert session.context_window == 8000
    assert (
        notices(events).count(
            "ℹ Provider reported a context window of 8000 tokens — budget recomputed for this session"
        )
        == 1
    )
    # the budget leaves room for the 4096 tokens Anthropic reserves for the answer
    assert session.char_budget(max_tokens=4096) <= int((8000 - 4096) * session.chars_per_token)


INFERRED_WINDOW = (
    "ℹ Provider refused a request of about %d tokens as too long without stating its context window — "
    "budget recomputed below it for this session"
)


def test_an_overflow_that_states_no_number_bounds_the_window_by_the_refused_request() -> None:
    # Bedrock's "Input is too long for requested model." names no window: the refused request's own
    # estimate is the window's upper bound (issue 26), so the retry and every later turn fit below it.
    overflow = SendFailed(
        "HTTP 400",
        request_bytes=60_000,
        status=400,
        body='{"message":"Input is too long for requested model."}',
    )
    sender = ScriptedSender(overflow, answer("ok"), answer("ok"), wire_format="bedrock-converse", model="m")
    events: list[object] = []
    session = Session(sender, on_event=events.append, policy=Policy(context_window=200_000))
    session.extend(conversation(30, 1800))

    session.complete()

    (told,) = notices(events, "inferred_window")
    refused = int(told.split("about ")[1].split(" tokens")[0])
    assert 10_000 < refused < 200_000 and told == INFERRED_WINDOW % refused
    assert session.context_window == refused * 3 // 4  # ¾ of the refused, nothing accepted before it
    sent = [total_weight(r.messages) / session.chars_per_token for r in sender.requests]
    assert sent[1] < session.context_window * 0.7 < sent[0]  # the retry aims at the budget below it
    session.add(Message.user("and now?"))
    session.complete()
    assert len(sender.requests) == 3 and notices(events, "inferred_window") == [told]


def test_an_overflow_that_states_no_number_never_bounds_the_window_below_an_accepted_prompt() -> None:
    # the evidence interval's floor: the provider accepted a prompt of 12,000 tokens (its usage count),
    # so a later refusal whose ¾ falls below that leaves the window at 12,000
    overflow = SendFailed(
        "HTTP 400",
        request_bytes=60_000,
        status=400,
        body='{"message":"Input is too long for requested model."}',
    )
    sender = ScriptedSender(
        answer("ok", input_tokens=12_000), overflow, answer("ok"), wire_format="bedrock-converse", model="m"
    )
    session = Session(sender, policy=Policy(context_window=200_000))
    session.extend(conversation(30, 1800))
    session.complete()
    session.add(Message.user("more"))

    session.complete()

    estimate = total_weight(sender.requests[1].messages) / session.chars_per_token
    assert estimate * 3 / 4 < 12_000 and session.context_window == 12_000


def test_an_overflow_that_counts_the_refused_request_calibrates_chars_per_token_at_once() -> None:
    # Token-dense text: the provider counts 40,000 tokens where 4 chars per token would say ~14,000.
    text = conversation(30, 1800)
    chars = total_weight(text)
    overflow = SendFailed(
        "HTTP 400",
        request_bytes=60_000,
        status=400,
        body='{"type":"error","error":{"type":"invalid_request_error",'
        '"message":"prompt is too long: 40000 tokens > 30000 maximum"}}',
    )
    sender = ScriptedSender(overflow, answer("ok"), wire_format="anthropic", model="claude-test")
    session = Session(sender)
    session.extend(text)

    session.complete()

    assert session.context_window == 30_000
    assert session.chars_per_token == pytest.approx(chars / 40_000, rel=0.05)
    retry = sender.requests[1]
    assert total_weight(retry.messages) / session.chars_per_token < 30_000 - 4096


def test_a_ladder_level_that_leaves_the_request_unchanged_is_never_resent() -> None:
    sender = ScriptedSender(OVERFLOW_ERROR)
    session = Session(sender)
    session.extend([Message.system("Be brief."), Message.user("hi")])  # nothing any level can cut

    with pytest.raises(RecoveryExhausted) as info:
        session.complete()

    assert len(sender.requests) == 1
    assert info.value.attempts == 3
