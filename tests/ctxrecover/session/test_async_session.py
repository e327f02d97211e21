"""What only an asyncio program meets: cancelled turns, heavy steps off the event loop, blocking
senders and summarizers in worker threads, the async loops (SPEC §6 for every loop)."""

from __future__ import annotations

import asyncio
import io
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from ctxrecover.archive import DiskArchive, MemoryArchive
from ctxrecover.compaction import DEFAULT_LEVELS, CompactionRun, HistoryCompactor, LevelBase
from ctxrecover.errors import CompactionCancelled, UnrecoverableFailure
from ctxrecover.events import Event, Notice, StatusEvent
from ctxrecover.messages import Message
from ctxrecover.policy import Policy
from ctxrecover.session import AsyncPanel, AsyncSession, aoneshot
from ctxrecover.summarize import CancelToken, SummaryResult
from ctxrecover.transport import ChatRequest, ChatResponse, SendFailed
from ctxrecover.wire import Usage, WireFormat

pytestmark = pytest.mark.anyio

OVERFLOW = SendFailed(
    "HTTP 400",
    request_bytes=1000,
    status=400,
    body='{"error":{"code":"context_length_exceeded","message":"This model\'s maximum context length '
    'is 128000 tokens. However, your messages resulted in 130000 tokens."}}',
)


def conversation(n: int, chars: int) -> list[Message]:
    history = [Message.system("You are helpful.")]
    for i in range(n):
        role = Message.user if i % 2 == 0 else Message.assistant
        history.append(role(f"message {i}: " + "abcdefghij " * (chars // 11)))
    return history


class AsyncScripted:
    """An AsyncSender playing a script (the last step repeats); it can wait on an event first."""

    wire_format = WireFormat.OPENAI_CHAT
    model = "gpt-4o"

    def __init__(self, *script: ChatResponse | BaseException, gate: asyncio.Event | None = None) -> None:
        self.script = list(script)
        self.gate = gate
        self.requests: list[ChatRequest] = []
        self.threads: list[int] = []

    async def send(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        self.threads.append(threading.get_ident())
        if self.gate is not None:
            await self.gate.wait()
        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(step, BaseException):
            raise step
        return step


def stored(archive: DiskArchive) -> dict[str, str | None]:
    """Every entry of the store, by key (read straight from its file)."""
    with sqlite3.connect(archive.path) as conn:
        keys = [key for (key,) in conn.execute("SELECT key FROM entries")]
    return {key: archive.get(key) for key in keys}


def answer(text: str = "ok") -> ChatResponse:
    return ChatResponse(Message.assistant(text), "stop", False, Usage(), request_bytes=0)


async def test_a_cancelled_turn_leaves_the_history_the_archive_and_the_gateway_as_they_were(
    tmp_path: Path,
) -> None:
    sender = AsyncScripted(OVERFLOW, answer())
    archive = DiskArchive(tmp_path / "ccr.sqlite")
    session = AsyncSession(sender, archive=archive, policy=Policy(context_window=3000))
    session.extend(conversation(30, 400))
    await session.complete()  # planned compaction and a recovery ran: undo levels, archived entries
    session.add(Message.user("and now?"))
    before = session.history
    state = session.state()
    undo_levels = session.compactor.undo_levels
    live = session.archive.live_keys
    entries = stored(archive)
    sent = len(sender.requests)
    hang = asyncio.Event()  # never set: the resend after this turn's recovery hangs until cancelled

    async def hanging(request: ChatRequest) -> ChatResponse:
        sender.requests.append(request)
        if len(sender.requests) == sent + 1:
            raise OVERFLOW  # rejected: the turn compacts (archiving) before it resends
        await hang.wait()
        raise AssertionError("unreachable")

    sender.send = hanging  # type: ignore[method-assign]
    task = asyncio.create_task(session.complete())
    while len(sender.requests) < sent + 2:
        await asyncio.sleep(0)
    assert session.history != before  # the recovery had rewritten it
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert session.history == before
    after = session.state()
    assert after["stats"]["requests"] == state["stats"]["requests"] + 2  # they were sent: counted
    assert {k: v for k, v in after.items() if k != "stats"} == {
        k: v for k, v in state.items() if k != "stats"
    }
    assert session.compactor.undo_levels == undo_levels
    assert session.archive.live_keys == live
    assert stored(archive) == entries  # what the turn archived for its rewrite is gone again
    del sender.send  # the scripted send again
    sender.script = [answer("fine")]
    assert (await session.complete()).content == "fine"  # still usable


class ThreadRecordingLevel(LevelBase):
    """A compaction level that records the thread it ran on, then applies the default levels."""

    def __init__(self) -> None:
        self.threads: list[int] = []

    def __call__(self, history: list[Message], run: CompactionRun) -> Any:
        self.threads.append(threading.get_ident())
        return DEFAULT_LEVELS(history, run)


async def test_a_compaction_of_a_large_history_runs_off_the_event_loop_and_its_events_arrive_on_it() -> None:
    level = ThreadRecordingLevel()
    events: list[tuple[Event, int]] = []
    policy = Policy(context_window=200_000)
    archive = MemoryArchive()
    compactor = HistoryCompactor(policy, archive, levels=level)
    session = AsyncSession(
        AsyncScripted(answer()),
        policy=policy,
        archive=archive,
        compactor=compactor,
        on_event=lambda event: events.append((event, threading.get_ident())),
        thread_above_chars=100_000,
    )
    compactor.events = session.events  # the compactor reports through the session's bus
    session.extend(conversation(120, 8_000))  # ≈ 960,000 chars: over the 480,000-char budget

    await session.complete()

    loop_thread = threading.get_ident()
    assert level.threads and all(t != loop_thread for t in level.threads)
    statuses = [(e, t) for e, t in events if isinstance(e, StatusEvent)]
    assert statuses and all(t == loop_thread for _, t in statuses)
    assert statuses[0][0].message.startswith("📦 Compacting history")


async def test_a_small_history_is_advanced_on_the_loop_and_a_blocking_sender_runs_in_a_thread() -> None:
    class Blocking:
        wire_format = WireFormat.OPENAI_CHAT
        model = "gpt-4o"

        def __init__(self) -> None:
            self.threads: list[int] = []

        def send(self, request: ChatRequest) -> ChatResponse:
            self.threads.append(threading.get_ident())
            return answer("from a thread")

    sender = Blocking()
    session = AsyncSession(sender)
    session.add(Message.user("hi"))
    assert (await session.complete()).content == "from a thread"
    assert sender.threads and sender.threads[0] != threading.get_ident()


async def test_a_summarizer_with_asummarize_is_awaited_and_one_without_runs_in_a_thread() -> None:
    class Summaries:
        window_tokens = 32_000

        def __init__(self) -> None:
            self.threads: list[int] = []

        def summarize(self, prompt: str, **options: Any) -> SummaryResult:
            self.threads.append(threading.get_ident())
            return SummaryResult("## Key Decisions\n- kept the plan, dropped the rest\n" * 3)

    class AsyncSummaries(Summaries):
        async def asummarize(self, prompt: str, **options: Any) -> SummaryResult:
            self.threads.append(-1)
            return SummaryResult("## Key Decisions\n- kept the plan, dropped the rest\n" * 3)

    for summarizer, expected in ((Summaries(), "thread"), (AsyncSummaries(), "awaited")):
        session = AsyncSession(
            AsyncScripted(answer()), summarizer=summarizer, policy=Policy(context_window=3000)
        )
        session.extend(conversation(30, 400))
        await session.complete()
        assert any(m.is_summary for m in session.history)
        if expected == "awaited":
            assert summarizer.threads == [-1]
        else:
            assert summarizer.threads and threading.get_ident() not in summarizer.threads


async def test_a_bug_in_an_async_sender_is_raised_as_itself() -> None:
    session = AsyncSession(AsyncScripted(KeyError("choices")))
    session.add(Message.user("hi"))
    with pytest.raises(KeyError):
        await session.complete()


async def test_aoneshot_prints_notices_to_the_stream_and_returns_the_answer() -> None:
    stream = io.StringIO()
    sender = AsyncScripted(OVERFLOW, answer("answered"))
    assert await aoneshot(sender, "question " * 1_000, system="be brief", stream=stream) == "answered"
    assert "⚠ Recoverable failure (context too long) — compacting and retrying" in stream.getvalue()


async def test_an_async_panel_answers_concurrently_and_keeps_each_failure_its_own() -> None:
    gate = asyncio.Event()
    slow = AsyncScripted(answer("slow"), gate=gate)
    fast = AsyncScripted(answer("fast"))
    failing = AsyncScripted(SendFailed("HTTP 401", request_bytes=10, status=401, body="invalid api key"))
    panel = AsyncPanel(
        {"slow": AsyncSession(slow), "failing": AsyncSession(failing), "fast": AsyncSession(fast)}
    )

    asking = asyncio.create_task(panel.ask("Review the plan"))
    while not fast.requests or not slow.requests:
        await asyncio.sleep(0)
    gate.set()  # the slow participant was waiting while the others answered
    answers = await asking

    assert list(answers) == ["slow", "failing", "fast"]
    assert answers["slow"].message is not None and answers["slow"].message.content == "slow"
    assert answers["fast"].message is not None and answers["fast"].message.content == "fast"
    assert isinstance(answers["failing"].error, UnrecoverableFailure)


async def test_a_cancel_token_stops_an_async_compaction_and_leaves_the_history() -> None:
    class Waiting:
        window_tokens = 32_000

        async def asummarize(
            self, prompt: str, *, cancel: CancelToken | None = None, **options: Any
        ) -> SummaryResult:
            while cancel is not None and not cancel.cancelled:
                await asyncio.sleep(0.001)
            assert cancel is not None
            cancel.raise_if_cancelled()
            raise AssertionError("unreachable")

    token = CancelToken()
    events: list[Event] = []
    session = AsyncSession(
        AsyncScripted(answer()),
        summarizer=Waiting(),
        policy=Policy(context_window=3000),
        on_event=events.append,
    )
    session.extend(conversation(30, 400))
    before = session.history
    turn = asyncio.create_task(session.complete(cancel=token))
    await asyncio.sleep(0.01)
    token.cancel()
    with pytest.raises(CompactionCancelled):
        await turn
    assert session.history == before
    assert [e.message for e in events if isinstance(e, StatusEvent)][-1] == "⚠ Compaction cancelled by user"
    assert not [e for e in events if isinstance(e, Notice)]  # nothing was sent, nothing rejected
