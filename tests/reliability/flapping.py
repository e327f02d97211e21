"""A long agent session over a flapping gateway and a small capped archive, and what it can still recall.

Used by test_archive_guarantees.py and runnable on its own to measure any
version of the library (it uses only APIs every version has)::

    python tests/reliability/flapping.py TURNS MAX_BYTES   # prints the figures as JSON

The gateway rejects intermittently (nginx 413s above a size, context-length
400s), so recovery and planned compaction cut often; the session's archive is
a :class:`DiskArchive` with a tiny ``max_bytes``. :func:`unrecallable` counts
the strings the live history's markers point to that the archive no longer
gives back — the loss issue 12 measured (685 strings, 2.47 M chars at 300
turns and 1 MiB on the code before it).
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ctxrecover.archive import DiskArchive, extract_keys
from ctxrecover.errors import ArchiveError, RecoveryError
from ctxrecover.events import Event, Notice
from ctxrecover.messages import Message
from ctxrecover.policy import Policy
from ctxrecover.session import Session
from ctxrecover.transport import HttpxSender

SEED = 12
NGINX_413 = "<html><head><title>413 Request Entity Too Large</title></head><body>nginx</body></html>"
OVERFLOW_400 = {
    "error": {"code": "context_length_exceeded", "message": "This model's maximum context length is exceeded"}
}
POLICY = Policy(context_window=16_000, keep_recent=6)
REJECT_ABOVE = 24 * 1024  # the gateway flaps only on bodies above this size
P_413, P_OVERFLOW = 0.35, 0.08


def _words(rng: random.Random, tag: str, chars: int) -> str:
    return " ".join(f"{tag}{rng.randrange(10**7):07d}" for _ in range(max(1, chars // 9)))


class FlappingGateway:
    """An OpenAI-compatible provider behind a gateway that rejects some large bodies (seeded)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.requests = self.rejected = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        roll = self.rng.random()
        if len(request.content) > REJECT_ABOVE and roll < P_413:
            self.rejected += 1
            return httpx.Response(413, text=NGINX_413, headers={"content-type": "text/html"})
        if len(request.content) > REJECT_ABOVE and roll < P_413 + P_OVERFLOW:
            self.rejected += 1
            return httpx.Response(400, json=OVERFLOW_400)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": _words(self.rng, "said", self.rng.randint(200, 1500)),
        }
        if self.rng.random() < 0.5:
            path = f"src/m{self.rng.randrange(40)}.py"
            message["tool_calls"] = [
                {
                    "id": f"call{self.requests}",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
                }
            ]
        return httpx.Response(
            200,
            json={
                "choices": [{"message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": len(request.content) // 4, "completion_tokens": 50},
            },
        )


@dataclass
class Run:
    """What a run did and what it can still recall."""

    turns: int = 0
    refusals: int = 0
    failed_turns: int = 0
    fed: list[Message] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    shadow: dict[str, str] = field(default_factory=dict)  # every entry ever stored, by key
    errors: list[ArchiveError] = field(default_factory=list)  # each refusal the session raised
    unchanged: list[bool] = field(default_factory=list)  # did each refusal leave the history as it was?
    history: list[Message] = field(default_factory=list)  # the session's history at the end
    session: Session | None = None
    session: Session | None = None


def unrecallable(history: list[Message], store: Any, shadow: dict[str, str]) -> tuple[int, int]:
    """(strings, chars) the history's markers reach, transitively, that ``store`` no longer gives back."""
    frontier = [
        key
        for msg in history
        for text in (msg.content, *(c.arguments for c in msg.tool_calls))
        for key in extract_keys(text)
    ]
    seen: set[str] = set()
    lost = chars = 0
    while frontier:
        key = frontier.pop()
        if key in seen:
            continue
        seen.add(key)
        content = store.get(key)
        if content is None:
            lost += 1
            chars += len(shadow.get(key, ""))
            content = shadow.get(key, "")
        frontier += extract_keys(content)
    return lost, chars


class _Shadowed:
    """Records every entry a store is given (to size what it loses later)."""

    def __init__(self, store: DiskArchive, shadow: dict[str, str]) -> None:
        self.store, self.shadow = store, shadow

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def put(self, content: str, *, owner: str | None = None) -> str:
        key = self.store.put(content, owner=owner) if owner else self.store.put(content)
        self.shadow[key] = content
        return key

    def put_keyed(self, entries: Any, *, owner: str | None = None) -> None:
        if not hasattr(self.store, "put_keyed"):  # an older store: one put each
            for _, content in entries:
                self.put(content)
            return
        self.store.put_keyed(entries, owner=owner) if owner else self.store.put_keyed(entries)
        self.shadow.update(entries)

    def archive(self, content: str) -> str | None:
        return self.store.archive(content)

    def get(self, key: str) -> str | None:
        return self.store.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self.store


def run(
    store: DiskArchive,
    turns: int,
    *,
    check: Callable[[Session, Run], None] | None = None,
    stop_after_refusals: int | None = None,
    seed: int = SEED,
) -> Run:
    """Drive ``turns`` user turns over ``store``; ``check(session, run)`` is called after each one."""
    result = Run()
    rng = random.Random(seed)
    gateway = FlappingGateway(seed)
    sender = HttpxSender(
        "openai-chat", base_url="https://gateway.test", model="gpt-4o", transport=httpx.MockTransport(gateway)
    )
    archive = _Shadowed(store, result.shadow)

    def on_event(event: Event) -> None:
        if isinstance(event, Notice):
            result.notices.append(event)

    session = Session(
        sender,
        policy=POLICY,
        archive=archive,
        on_event=on_event,
        env={},  # type: ignore[arg-type]
        sleep=lambda _s: None,
    )
    system = Message.system("You are a coding agent. Be brief.")
    session.add(system)
    result.fed.append(system)
    for turn in range(turns):
        last = session.history[-1]
        if last.role == "assistant" and last.tool_calls:
            new = [
                Message.tool(c.id, _words(rng, f"t{turn}x", rng.randint(2000, 9000))) for c in last.tool_calls
            ]
        else:
            new = [Message.user(_words(rng, f"u{turn}x", rng.randint(300, 2500)))]
        session.extend(new)
        result.fed += new
        before = session.history
        try:
            result.fed.append(session.complete())
        except ArchiveError as exc:
            result.refusals += 1
            result.errors.append(exc)
            result.unchanged.append(session.history == before)
        except RecoveryError:
            result.failed_turns += 1
        result.turns += 1
        if check is not None:
            check(session, result)
        if stop_after_refusals is not None and result.refusals >= stop_after_refusals:
            break
    result.history = session.history
    result.session = session
    return result


def main(argv: list[str]) -> None:
    turns, max_bytes = int(argv[1]), int(argv[2])
    with tempfile.TemporaryDirectory() as directory:
        store = DiskArchive(Path(directory) / "ccr.sqlite", max_bytes=max_bytes)
        result = run(store, turns)
        strings, chars = unrecallable(result.history, store, result.shadow)
        figures = {
            "turns": result.turns,
            "unrecallable_strings": strings,
            "unrecallable_chars": chars,
            "refused_turns": result.refusals,
            "failed_turns": result.failed_turns,
            "history_messages": len(result.history),
            "archived_chars": sum(map(len, result.shadow.values())),
        }
        print(json.dumps(figures))
        store.close()


if __name__ == "__main__":
    main(sys.argv)
