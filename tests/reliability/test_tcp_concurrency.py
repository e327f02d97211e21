"""32 sessions at once through ONE loopback middlebox over real TCP: no cross-talk.

A :class:`~simulator.proxy.loopback.LoopbackServer` (asyncio + h11 on 127.0.0.1) hosts
one :class:`~simulator.proxy.middlebox.Middlebox` — an nginx-style 413 for bodies over
64 KB — in front of one :class:`~simulator.providers.mock.MockProvider`. Thirty-two
sessions, each in its own thread with its own HTTP connection, start at the same
moment with histories of different sizes, so each is rejected at a different
size. Each must learn ¾ of ITS OWN smallest rejected request (SPEC §6: the cap is
session state, never process state), recover, and go on under that cap; the
library's process-wide defaults and the environment are unchanged afterwards.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

from ctxrecover.archive import MemoryArchive
from ctxrecover.messages import Message
from ctxrecover.policy import DEFAULT_POLICY, Policy
from ctxrecover.session import Session
from ctxrecover.sizes import total_weight
from ctxrecover.transport import ChatRequest, ChatResponse, HttpxSender, SendFailed
from simulator.providers.mock import MockProvider
from simulator.proxy.faults import BodyCap
from simulator.proxy.loopback import LoopbackServer
from simulator.proxy.middlebox import Middlebox
from simulator.research.retention import chars_lost

SESSIONS = 32
LIMIT = 64 * 1024
STEP_CHARS = 600  # session i's history is (i + 1) steps above the limit: every rejected size differs
MESSAGE_CHARS = 4000
LATER_TURNS = 3
LATER_MESSAGE_CHARS = 2000
PAYLOAD_STATUS = 413
BARRIER_TIMEOUT_S = 60.0


class RecordingSender(HttpxSender):
    """An HttpxSender that remembers the size of every body the gateway rejected with 413."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.rejected: list[int] = []
        self.accepted: list[int] = []

    def send(self, request: ChatRequest) -> ChatResponse:
        try:
            response = super().send(request)
        except SendFailed as exc:
            if exc.status_code == PAYLOAD_STATUS:
                self.rejected.append(exc.request_bytes)
            raise
        self.accepted.append(response.request_bytes)
        return response


@dataclass
class Outcome:
    index: int
    learned_cap: int | None
    rejected: list[int]
    accepted: list[int]
    lost: int
    recoveries: int
    tool_limits: tuple[int, int]
    notices: list[str] = field(default_factory=list)


def _history(index: int) -> list[Message]:
    """A system prompt and user/assistant pairs totalling LIMIT + (index + 1) * STEP_CHARS chars."""
    target = LIMIT + (index + 1) * STEP_CHARS
    messages = [Message.system(f"You are session {index}.")]
    turn = 0
    while total_weight(messages) < target:
        remaining = target - total_weight(messages)
        text = f"s{index} t{turn} " + "x" * max(1, min(MESSAGE_CHARS, remaining) - 12)
        messages += [Message.user(text), Message.assistant(f"noted {index}/{turn}")]
        turn += 1
    return messages


def _run_session(index: int, base_url: str, barrier: threading.Barrier) -> Outcome:
    notices: list[str] = []
    with httpx.Client(trust_env=False, timeout=30.0) as client:
        sender = RecordingSender("openai-chat", base_url=base_url, model="gpt-4o", client=client)
        session = Session(
            sender,
            policy=DEFAULT_POLICY,
            archive=MemoryArchive(),
            env={},
            on_event=lambda e: notices.append(e.text),
            sleep=lambda _s: None,
        )
        fed = _history(index)
        session.extend(fed)
        fed.append(Message.user(f"session {index}: go"))
        session.add(fed[-1])
        barrier.wait(BARRIER_TIMEOUT_S)
        fed.append(session.complete())
        for turn in range(LATER_TURNS):
            msg = Message.user(f"session {index} later {turn} " + "y" * LATER_MESSAGE_CHARS)
            session.add(msg)
            fed.extend([msg, session.complete()])
    return Outcome(
        index=index,
        learned_cap=session.learned_cap,
        rejected=sender.rejected,
        accepted=sender.accepted,
        lost=chars_lost(fed, session.history, session.archive),
        recoveries=session.stats.recoveries,
        tool_limits=(session.tool_result_budget_chars, session.tool_result_max_chars),
        notices=notices,
    )


def test_32_sessions_through_one_loopback_middlebox_each_learn_their_own_cap() -> None:
    environment_before = dict(os.environ)
    provider = MockProvider("openai-chat", context_window=1_000_000)
    box = Middlebox(provider, [BodyCap(LIMIT, response="nginx")])
    barrier = threading.Barrier(SESSIONS)
    with LoopbackServer(box) as server, ThreadPoolExecutor(SESSIONS) as pool:
        futures = [pool.submit(_run_session, i, server.base_url, barrier) for i in range(SESSIONS)]
        outcomes = [f.result() for f in futures]
        records = server.records

    for outcome in outcomes:
        assert outcome.rejected, f"session {outcome.index} was never rejected"
        assert outcome.learned_cap == min(outcome.rejected) * 3 // 4, outcome
        assert all(size <= outcome.learned_cap for size in outcome.accepted[-LATER_TURNS:]), outcome
        assert outcome.recoveries >= 1 and outcome.lost == 0, outcome
    first_rejections = [o.rejected[0] for o in outcomes]
    assert len(set(first_rejections)) == SESSIONS, "sizes must differ, or cross-talk could hide"
    assert len({o.learned_cap for o in outcomes}) == SESSIONS

    # The middlebox saw exactly the rejections the sessions saw, nothing else.
    server_rejected = sorted(r.request_bytes for r in box.rejections)
    assert server_rejected == sorted(size for o in outcomes for size in o.rejected)
    assert sum(r.status == PAYLOAD_STATUS for r in records) == len(server_rejected)
    assert all(size > LIMIT for size in server_rejected)

    # Nothing leaked into process-wide state.
    assert DEFAULT_POLICY == Policy()
    assert DEFAULT_POLICY.payload_cap == 0
    defaults = (DEFAULT_POLICY.tool_result_budget_chars, DEFAULT_POLICY.tool_result_max_chars)
    assert defaults == (200_000, 20_000)
    assert dict(os.environ) == environment_before
    fresh = Session(HttpxSender("openai-chat", base_url="http://unused.test", model="gpt-4o"), env={})
    assert fresh.learned_cap is None and fresh.payload_cap == 0
    assert (fresh.tool_result_budget_chars, fresh.tool_result_max_chars) == (200_000, 20_000)
