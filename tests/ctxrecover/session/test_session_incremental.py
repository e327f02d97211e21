"""A Session gives the same results with its incremental passes as with full passes at every turn.

Random agent sessions — user asks, tool calls whose results are file reads (some repeated), long
outputs and skill blocks — run twice over the same mock gateway (a 413 above a random cap) and
provider: once with ``incremental=True`` (the default, O(what changed)) and once with
``incremental=False`` (every pass over the whole history, the reference). What the provider
receives, the histories, the notices the user sees, the stats and the archives must be equal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxrecover import Notice, Policy, Session
from ctxrecover.archive import MemoryArchive
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.floor import SkillBlock
from ctxrecover.transport import HttpxSender

PATHS = ("a.py", "b.py", "src/c.py")
TOO_LARGE = (
    "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n"
    "<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx</center>\r\n"
    "</body>\r\n</html>\r\n"
)


def _read(path: str, first: int, last: int) -> str:
    return f"<<< FILE: {path} >>>\n" + "".join(f"{n}: line {n} of {path}\n" for n in range(first, last + 1))


_RESULTS = st.one_of(
    st.builds(lambda path, n: _read(path, 1, n), st.sampled_from(PATHS), st.integers(5, 400)),
    st.integers(100, 30_000).map(lambda n: ("output line\n" * (n // 12 + 1))[:n]),
    st.sampled_from([SkillBlock("git", "Always rebase. " * 60).envelope, "ok"]),
)
_TURN = st.tuples(st.integers(10, 3_000), st.lists(_RESULTS, max_size=3))


@dataclass
class Gateway:
    """A 413 above ``cap`` bytes, else a short answer; records every body it passes on."""

    cap: int | None
    bodies: list[bytes]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(request.content)
        if self.cap is not None and len(request.content) > self.cap:
            return httpx.Response(413, text=TOO_LARGE, headers={"content-type": "text/html"})
        answer = {"role": "assistant", "content": f"answer {len(self.bodies)}"}
        return httpx.Response(200, json={"choices": [{"message": answer, "finish_reason": "stop"}]})


Turns = list[tuple[int, list[str]]]


def _run(turns: Turns, cap: int | None, window: int, *, incremental: bool) -> dict[str, Any]:
    gateway = Gateway(cap, [])
    sender = HttpxSender(
        "openai-chat", base_url="http://provider.test", model="gpt-4o", transport=httpx.MockTransport(gateway)
    )
    events: list[Any] = []
    archive = MemoryArchive()
    policy = Policy(context_window=window, microcompact_truncate_turns=2, microcompact_summarize_turns=4)
    session = Session(
        sender,
        policy=policy,
        archive=archive,
        on_event=events.append,
        sleep=lambda _: None,
        history=[Message.system("You are a coding agent. " * 20)],
        incremental=incremental,
    )
    outcomes = []
    for n, (ask, results) in enumerate(turns):
        session.add(Message.user(f"turn {n}: " + "please " * (ask // 7)))
        if results:
            calls = tuple(ToolCall(f"c{n}_{i}", "run", json.dumps({"i": i})) for i in range(len(results)))
            session.add(Message.assistant("", tool_calls=calls))
            for call, result in zip(calls, results, strict=True):
                session.add(Message.tool(call.id, result))
        try:
            outcomes.append(session.complete().content)
        except Exception as exc:  # noqa: BLE001 — the same failure both ways is part of the result
            outcomes.append(f"{type(exc).__name__}: {exc}")
    return {
        "outcomes": outcomes,
        "bodies": gateway.bodies,
        "history": session.history,
        "notices": [(e.code, e.message) for e in events if isinstance(e, Notice)],
        "stats": session.stats.to_dict(),
        "archive": sorted(archive.keys()),
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.lists(_TURN, min_size=1, max_size=14),
    cap=st.sampled_from([None, 40_000, 90_000]),
    window=st.sampled_from([8_000, 30_000, 200_000]),
)
def test_an_incremental_session_equals_a_full_one_turn_after_turn(
    turns: Turns, cap: int | None, window: int
) -> None:
    incremental = _run(turns, cap, window, incremental=True)
    full = _run(turns, cap, window, incremental=False)
    for key in full:
        assert incremental[key] == full[key], key
