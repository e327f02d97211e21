"""P1 — what one turn costs on the path users run, versus serialising the request once.

A :class:`~ctxrecover.session.Session` holds P1's ~5 MB, 2,000-message agent
history (:func:`bench_sizing.build_history`) and talks to its provider through
:class:`~ctxrecover.transport.HttpxSender` over an instant in-memory transport
(:class:`InstantProvider`, a transport answering a valid OpenAI chat completion, which
takes the body chunk by chunk as a socket transport writes it). In one run:

(a) one ``json.dumps`` of the whole body of the turn's request (the rendered
    request dict, compact separators as sent; median of several), and
(b) a steady-state turn: ``Session.add`` of a new user message, then
    ``Session.complete()`` — the turn-boundary passes, sizing, budget checks,
    rendering and posting the body, parsing the reply (median over many
    consecutive turns, after a few warm-up turns: the session already holds the
    history, as in a long conversation).

It reports (b)/(a); the target is ≤ 0.05 (a turn costs what changed, not the
history). The window and payload cap are large enough that no turn compacts: the
measure is the turn itself. Run it with ``python bench/bench_turn.py``;
``run()`` returns the measures.
"""

from __future__ import annotations

import gc
import json
import random
import statistics
import subprocess
import sys
import time
from typing import Any

import _histories
import httpx
from bench_sizing import MESSAGES, MODEL, SEED, SYSTEM_PROMPT, TARGET_BYTES, WORDS

from ctxrecover.messages import Message, ToolCall
from ctxrecover.policy import DEFAULT_POLICY
from ctxrecover.session import Session
from ctxrecover.transport import ChatRequest, ChatResponse, HttpxSender
from ctxrecover.wire import WireFormat

TARGET_RATIO = 0.05
WARMUP_TURNS = 3
TURNS = 60
DUMPS_REPEATS = 7
WINDOW_TOKENS = 50_000_000  # far above the history: no turn compacts
TOOL_RESULT_CHARS = 2_800  # under microcompact_min_content: the default passes keep the 5 MB in the body
TURN_OVERHEAD_CHARS = 300 + 200 + TOOL_RESULT_CHARS  # a turn's chars besides its final answer
REPLY = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 0,
    "model": MODEL,
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Done: the file is fixed."},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 1_000, "completion_tokens": 8, "total_tokens": 1_008},
}


def _agent_turn(rng: random.Random, index: int, answer_chars: int) -> list[Message]:
    """One agent turn: ask, tool call, a tool result the turn passes leave alone, a long answer."""
    call = ToolCall(f"call_{index}", "read_file", json.dumps({"path": f"src/módulo_{index}.py"}))
    return [
        Message.user(_histories.random_text(rng, 300, WORDS)),
        Message.assistant(_histories.random_text(rng, 200, WORDS), tool_calls=[call]),
        Message.tool(call.id, _histories.random_text(rng, TOOL_RESULT_CHARS, WORDS), name="read_file"),
        Message.assistant(_histories.random_text(rng, answer_chars, WORDS)),
    ]


def build_history(
    *, seed: int = SEED, messages: int = MESSAGES, target_bytes: int = TARGET_BYTES
) -> list[Message]:
    """A seeded agent history of ``messages`` messages weighing about ``target_bytes`` that the
    default turn-boundary passes do not shrink (tool results under the microcompact minimum)."""
    return _histories.build_history(
        _agent_turn,
        system=SYSTEM_PROMPT,
        seed=seed,
        messages=messages,
        target_bytes=target_bytes,
        turn_overhead=TURN_OVERHEAD_CHARS,
    )


class InstantProvider(httpx.BaseTransport):
    """An in-memory OpenAI chat endpoint that answers every request at once.

    It takes the body as a socket transport does, iterating its chunks in order
    (``httpx.MockTransport`` would first join them into one ``bytes``, a copy a
    socket transport never makes; the kernel's own copy into the socket is paid
    by any client and is not part of the measure). It checks the chunks add up
    to the Content-Length, and keeps a body, joined, when asked.
    """

    def __init__(self) -> None:
        self.keep_body = False
        self.last_body = b""
        self.requests = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        chunks = list(request.stream)  # type: ignore[arg-type]  # a sync stream: this is a sync transport
        if sum(map(len, chunks)) != int(request.headers["content-length"]):
            raise AssertionError("the posted chunks do not add up to the Content-Length")
        if self.keep_body:
            self.last_body = b"".join(chunks)
        self.requests += 1
        return httpx.Response(200, json=REPLY)


class TimedSender(HttpxSender):
    """HttpxSender that adds up the time spent assembling bodies and sending (for the breakdown)."""

    render_s = 0.0
    send_s = 0.0

    def render_chunks(self, request: ChatRequest) -> list[bytes]:
        start = time.perf_counter()
        try:
            return super().render_chunks(request)
        finally:
            self.render_s += time.perf_counter() - start

    def send(self, request: ChatRequest) -> ChatResponse:
        start = time.perf_counter()
        try:
            return super().send(request)
        finally:
            self.send_s += time.perf_counter() - start


def make_session(history: list[Message]) -> tuple[Session, TimedSender, InstantProvider]:
    """A Session holding ``history`` behind an HttpxSender with an instant in-memory provider."""
    provider = InstantProvider()
    sender = TimedSender(
        WireFormat.OPENAI_CHAT, base_url="http://bench.invalid", model=MODEL, transport=provider
    )
    policy = DEFAULT_POLICY.replace(context_window=WINDOW_TOKENS)
    return Session(sender, policy=policy, history=history, model=MODEL), sender, provider


def _turn(session: Session, index: int) -> None:
    session.add(Message.user(f"Turn {index}: now run the tests again and tell me what fails."))
    session.complete()


def run(
    *,
    messages: int = MESSAGES,
    target_bytes: int = TARGET_BYTES,
    turns: int = TURNS,
    dumps_repeats: int = DUMPS_REPEATS,
) -> dict[str, Any]:
    """Time steady-state turns and one ``json.dumps`` of the request body; their ratio."""
    history = build_history(seed=SEED, messages=messages, target_bytes=target_bytes)
    session, sender, provider = make_session(history)
    compactions_before = session.stats.compactions
    for index in range(WARMUP_TURNS):
        _turn(session, index)
    samples: list[float] = []
    renders: list[float] = []
    sends: list[float] = []
    gc.collect()
    for index in range(WARMUP_TURNS, WARMUP_TURNS + turns):
        sender.render_s = sender.send_s = 0.0
        start = time.perf_counter()
        _turn(session, index)
        samples.append(time.perf_counter() - start)
        renders.append(sender.render_s)
        sends.append(sender.send_s)
    provider.keep_body = True  # one more turn, untimed, to see its request as posted
    _turn(session, WARMUP_TURNS + turns)
    body = json.loads(provider.last_body)
    dumps: list[float] = []
    for _ in range(dumps_repeats):
        start = time.perf_counter()
        json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        dumps.append(time.perf_counter() - start)
    sender.close()
    turn_ms, dumps_ms = statistics.median(samples) * 1e3, statistics.median(dumps) * 1e3
    ratio = turn_ms / dumps_ms
    return {
        "benchmark": "P1 Session turn (add + complete, HttpxSender) vs json.dumps of the body",
        "messages": len(body["messages"]),
        "body_bytes": len(provider.last_body),
        "requests": provider.requests,
        "turns_timed": turns,
        "turn_ms": turn_ms,
        "turn_ms_p90": statistics.quantiles(samples, n=10)[-1] * 1e3 if len(samples) > 1 else turn_ms,
        "dumps_ms": dumps_ms,
        # where a turn goes (medians): assembling the body from cached fragments, the rest of
        # HttpxSender.send (httpx, the in-memory transport, parsing the reply), the Session's own work
        "render_ms": statistics.median(renders) * 1e3,
        "post_ms": statistics.median(s - r for s, r in zip(sends, renders, strict=True)) * 1e3,
        "session_ms": statistics.median(t - s for t, s in zip(samples, sends, strict=True)) * 1e3,
        "ratio": ratio,
        "compactions": session.stats.compactions - compactions_before,
        "target_ratio": TARGET_RATIO,
        "passed": ratio <= TARGET_RATIO,
    }


# A minimal HTTP/1.1 server for the loopback measure, in its own process: it reads each request's head
# and Content-Length bytes and answers REPLY (keep-alive, a thread per connection).
_LOOPBACK_SERVER = r"""
import json, socket, sys, threading
reply = json.dumps(json.loads(sys.argv[1])).encode()
head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(reply)

def serve(conn):
    stream = conn.makefile("rb")
    while line := stream.readline():
        length = 0
        while line not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            line = stream.readline()
        stream.read(length)
        conn.sendall(head + reply)
    conn.close()

server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
while True:
    threading.Thread(target=serve, args=(server.accept()[0],), daemon=True).start()
"""


class JoinedBodySender(HttpxSender):
    """HttpxSender posting each body as one joined buffer (what it did before posting chunks)."""

    def render_chunks(self, request: ChatRequest) -> list[bytes]:
        return [b"".join(super().render_chunks(request))]


def _alternated_turns(url: str, *, turns: int, messages: int, target_bytes: int) -> dict[str, list[float]]:
    """Turn times of two sessions on the same history, chunked and joined bodies, alternated."""
    policy = DEFAULT_POLICY.replace(context_window=WINDOW_TOKENS)
    history = build_history(messages=messages, target_bytes=target_bytes)
    senders = {
        "chunks": HttpxSender(WireFormat.OPENAI_CHAT, base_url=url, model=MODEL),
        "joined": JoinedBodySender(WireFormat.OPENAI_CHAT, base_url=url, model=MODEL),
    }
    sessions = {
        name: Session(sender, policy=policy, history=list(history), model=MODEL)
        for name, sender in senders.items()
    }
    samples: dict[str, list[float]] = {name: [] for name in sessions}
    for index in range(WARMUP_TURNS + turns):
        for name, session in sessions.items():
            start = time.perf_counter()
            _turn(session, index)
            if index >= WARMUP_TURNS:
                samples[name].append(time.perf_counter() - start)
    for sender in senders.values():
        sender.close()
    return samples


def run_loopback(
    *, turns: int = TURNS, messages: int = MESSAGES, target_bytes: int = TARGET_BYTES
) -> dict[str, Any]:
    """The same steady-state turns over real loopback TCP, chunked body vs one joined buffer, alternated.

    The server runs in its own process and only reads what it is sent, so the
    figures are the client's: rendering, httpx/httpcore writing the body into the
    socket, reading the reply.
    """
    with subprocess.Popen(
        [sys.executable, "-c", _LOOPBACK_SERVER, json.dumps(REPLY)], stdout=subprocess.PIPE, text=True
    ) as server:
        try:
            assert server.stdout is not None
            samples = _alternated_turns(
                f"http://127.0.0.1:{int(server.stdout.readline())}",
                turns=turns,
                messages=messages,
                target_bytes=target_bytes,
            )
        finally:
            server.kill()
    chunks_ms, joined_ms = (statistics.median(samples[name]) * 1e3 for name in ("chunks", "joined"))
    return {
        "chunks_ms": chunks_ms,
        "joined_ms": joined_ms,
        "ratio": chunks_ms / joined_ms,
        "turns_timed": turns,
    }


def main() -> int:
    r = run()
    print(
        f"P1 — {r['messages']} messages, {r['body_bytes'] / 1e6:.1f} MB body, {r['turns_timed']} turns, "
        f"{r['compactions']} compactions"
    )
    print(
        f"turn (add + complete) {r['turn_ms']:.2f} ms (p90 {r['turn_ms_p90']:.2f}) vs json.dumps "
        f"{r['dumps_ms']:.2f} ms: ratio {r['ratio']:.4f} (target ≤ {TARGET_RATIO}) — "
        f"{'PASS' if r['passed'] else 'FAIL'}"
    )
    print(
        f"per turn: body assembly {r['render_ms']:.2f} ms, httpx post + reply {r['post_ms']:.2f} ms, "
        f"session passes {r['session_ms']:.2f} ms"
    )
    loop = run_loopback()
    print(
        f"over loopback TCP: turn {loop['chunks_ms']:.2f} ms posting chunks vs {loop['joined_ms']:.2f} ms "
        f"posting one joined buffer: ratio {loop['ratio']:.2f}"
    )
    return 0 if r["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
