"""Every loop recovers (SPEC §6): one-shot prompts and multi-participant panels."""

from __future__ import annotations

import io

import httpx
import pytest

from ctxrecover.archive import MemoryArchive
from ctxrecover.classify import FailureKind
from ctxrecover.errors import ArchiveError, UnrecoverableFailure
from ctxrecover.messages import Message
from ctxrecover.session import Session
from ctxrecover.session.loops import Panel, PanelAnswer, oneshot
from ctxrecover.transport import ChatRequest, ChatResponse, HttpxSender, SendFailed
from ctxrecover.wire import Usage, WireFormat

OVERFLOW_BODY = (
    '{"error":{"message":"This model\'s maximum context length is 128000 tokens. However, your messages '
    'resulted in 130000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}'
)
RECOVERY_NOTICE = "⚠ Recoverable failure (context too long) — compacting and retrying"
# A prompt that only the last ladder level can shorten (real user text is capped at 4000 chars there):
# a request no level changes is never resent.
LONG_PROMPT = "What is the answer? " + "Some pasted context. " * 1000


class OverflowOnce:
    """Rejects its first request as a context overflow, then answers ``text``."""

    wire_format = WireFormat.OPENAI_CHAT
    model = "gpt-4o"

    def __init__(self, text: str) -> None:
        self.text = text
        self.requests: list[ChatRequest] = []

    def send(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        if len(self.requests) == 1:
            raise SendFailed("HTTP 400", request_bytes=200_000, status=400, body=OVERFLOW_BODY)
        return ChatResponse(Message.assistant(self.text), "stop", False, Usage(), request_bytes=0)


def test_oneshot_prints_notices_to_stderr_and_keeps_stdout_clean(capsys: pytest.CaptureFixture[str]) -> None:
    sender = OverflowOnce("42")

    assert oneshot(sender, LONG_PROMPT, system="Be brief.") == "42"

    out, err = capsys.readouterr()
    assert out == ""
    assert RECOVERY_NOTICE in err.splitlines()
    assert len(sender.requests) == 2
    assert [m.role for m in sender.requests[1].messages] == ["system", "user"]
    assert len(sender.requests[1].messages[1].content) < len(LONG_PROMPT)


def test_one_rejection_retried_once_prints_one_recovery_notice_whatever_levels_it_took() -> None:
    # Levels 1 and 2 leave this request unchanged, so the session moves on to level 3 without
    # sending; the user sees one notice for the one rejection and the one retry.
    stream = io.StringIO()
    sender = OverflowOnce("42")

    assert oneshot(sender, LONG_PROMPT, stream=stream) == "42"

    assert len(sender.requests) == 2
    assert stream.getvalue().splitlines().count(RECOVERY_NOTICE) == 1


def test_oneshot_prints_to_the_given_stream() -> None:
    stream = io.StringIO()

    assert oneshot(OverflowOnce("fine"), LONG_PROMPT, stream=stream) == "fine"

    assert stream.getvalue().splitlines()[0] == RECOVERY_NOTICE


def test_oneshot_raises_the_typed_error_when_the_turn_cannot_complete() -> None:
    def unauthorized(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": {"message": "Incorrect API key provided"}})

    sender = HttpxSender(
        "openai-chat", base_url="http://p.test", model="gpt-4o", transport=httpx.MockTransport(unauthorized)
    )
    with pytest.raises(UnrecoverableFailure) as info:
        oneshot(sender, "hi", stream=io.StringIO())
    assert info.value.failure is not None and info.value.failure.kind is FailureKind.AUTH


def test_panel_recovers_one_participant_and_reports_another_participants_failure() -> None:
    def unauthorized(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            401,
            json={"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}},
        )

    critic_sender = OverflowOnce("the plan is risky")
    critic = Session(critic_sender)
    critic.extend([Message.system("You are the critic."), Message.user("Earlier context " * 500)])
    critic.add(Message.assistant("Noted."))
    author = Session(
        HttpxSender(
            "anthropic",
            base_url="http://p.test",
            model="claude-test",
            transport=httpx.MockTransport(unauthorized),
        )
    )
    editor = Session(OverflowOnce("typo on line 3"))
    draft = "Draft: " + "a sentence of the draft. " * 400
    editor.extend([Message.user(draft), Message.assistant("Read it.")])
    panel = Panel({"critic": critic, "author": author, "editor": editor})

    answers = panel.ask("Review the plan")

    assert list(answers) == ["critic", "author", "editor"]
    assert answers["critic"].ok and answers["critic"].message is not None
    assert answers["critic"].message.content == "the plan is risky"
    assert critic.stats.recoveries == 1 and len(critic_sender.requests) == 2
    failed = answers["author"]
    assert not failed.ok and failed.message is None
    assert isinstance(failed.error, UnrecoverableFailure)
    assert failed.error.failure is not None and failed.error.failure.kind is FailureKind.AUTH
    assert answers["editor"] == PanelAnswer("editor", editor.history[-1], None)
    # each participant keeps its own thread: the prompt went to each, the critic's recovery stayed its own
    assert editor.stats.recoveries == 1
    assert [m.content for m in author.history] == ["Review the plan"]
    assert critic.history[0].content == "You are the critic."


class FailingArchive(MemoryArchive):
    """An archive whose writes fail: the participant's recovery cannot archive what it cuts."""

    def put(self, content: str) -> str:
        raise ArchiveError("archive volume is read-only")

    def put_keyed(self, entries: object) -> None:
        raise ArchiveError("archive volume is read-only")


class BrokenSender:
    """A participant's own sender with a bug: the session raises it as itself (it is no provider's answer)."""

    wire_format = WireFormat.OPENAI_CHAT
    model = "gpt-4o"

    def send(self, request: ChatRequest) -> ChatResponse:
        raise KeyError("choices")


class Answers:
    """Answers every request with ``text``."""

    wire_format = WireFormat.OPENAI_CHAT
    model = "gpt-4o"

    def __init__(self, text: str) -> None:
        self.text = text

    def send(self, request: ChatRequest) -> ChatResponse:
        return ChatResponse(Message.assistant(self.text), "stop", False, Usage(), request_bytes=0)


def test_panel_contains_any_participant_error_and_every_participant_gets_the_prompt() -> None:
    first = Session(Answers("first answer"))
    archiving = Session(OverflowOnce("never seen"), archive=FailingArchive())
    archiving.extend([Message.user("Earlier context " * 2_000), Message.assistant("Noted.")])
    broken = Session(BrokenSender())
    last = Session(Answers("last answer"))
    panel = Panel({"first": first, "archiving": archiving, "broken": broken, "last": last})

    answers = panel.ask("Review the plan")

    assert list(answers) == ["first", "archiving", "broken", "last"]
    assert isinstance(answers["archiving"].error, ArchiveError) and answers["archiving"].message is None
    assert isinstance(answers["broken"].error, KeyError) and not answers["broken"].ok
    assert answers["first"].ok and answers["last"].ok
    assert answers["last"].message is not None and answers["last"].message.content == "last answer"
    for session in (first, archiving, broken, last):
        assert any(m.role == "user" and m.content == "Review the plan" for m in session.history)


def test_panel_needs_a_participant() -> None:
    with pytest.raises(ValueError, match="at least one participant"):
        Panel({})
