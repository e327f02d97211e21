"""A session loop with a durable archive, run as a subprocess and killed at random points.

Used by test_crash_safety.py::

    python crash_worker.py STATE_DIR

resumes the conversation persisted in ``STATE_DIR/state.json`` (or starts it), with
the CCR archive in ``STATE_DIR/archive.sqlite``, and runs turns until it is killed.
After every turn it persists ``{"turn": N, "state": session.state()}`` atomically
(write, fsync, ``os.replace``, fsync of the directory). The conversation is a
pure function of the turn number (:func:`turn_inputs`, :func:`reply_for`), so the
parent knows every message that entered the history before turn N.

``CTXRECOVER_CRASH_AFTER_PUTS=N`` makes the process SIGKILL itself right after its
N-th archive put returned (archived, not yet cut); ``CTXRECOVER_CRASH_BEFORE_PUTS=N``
right before the N-th put. Without either it runs until the parent kills it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import httpx

from ctxrecover.archive.disk import DiskArchive
from ctxrecover.messages import Message, ToolCall
from ctxrecover.policy import Policy
from ctxrecover.session import Session
from ctxrecover.transport import HttpxSender
from simulator.providers.mock import MockProvider, ParsedRequest, Reply
from simulator.proxy.faults import BodyCap
from simulator.proxy.middlebox import Middlebox

T = TypeVar("T")
SEED = 20240611
ARCHIVE_FILE = "archive.sqlite"
STATE_FILE = "state.json"
STARTED = "started"
CRASH_AFTER_ENV = "CTXRECOVER_CRASH_AFTER_PUTS"
CRASH_BEFORE_ENV = "CTXRECOVER_CRASH_BEFORE_PUTS"
MAX_TURNS = 100_000  # the parent always kills the worker first
SYSTEM_PROMPT = "You are a coding agent. Keep answers short."
# A small window so planned compaction cuts every few turns, and a gateway that rejects
# some bodies so the recovery ladder cuts too.
POLICY = Policy(context_window=2500, keep_recent=6)
GATEWAY_LIMIT = 9000
GATEWAY_PROBABILITY = 0.25
TOOL_EVERY = 2  # every other reply asks for a file read; the next turn feeds its result


def _rng(turn: int, what: str) -> random.Random:
    return random.Random(f"{SEED}:{turn}:{what}")


def _text(rng: random.Random, label: str, low: int, high: int) -> str:
    words = [f"{label}-{rng.randrange(10**6):06d}" for _ in range(rng.randint(low, high) // 15)]
    return " ".join(words)


def _call(turn: int) -> ToolCall:
    return ToolCall(f"call_{turn:05d}", "read_file", json.dumps({"path": f"src/module_{turn}.py"}))


def turn_inputs(turn: int) -> list[Message]:
    """What is added before turn ``turn`` (0-based): the system prompt, a tool result, a user task."""
    rng = _rng(turn, "inputs")
    messages = [Message.system(SYSTEM_PROMPT)] if turn == 0 else []
    if turn and (turn - 1) % TOOL_EVERY == 0:
        lines = [f"{n:>6}\t{_text(rng, f'line{n}', 40, 90)}" for n in range(1, rng.randint(30, 90))]
        messages.append(Message.tool(_call(turn - 1).id, "\n".join(lines)))
    else:
        messages.append(Message.user(f"task {turn}: {_text(rng, 'ask', 100, 1200)}"))
    return messages


def reply_for(turn: int) -> Reply:
    """The provider's answer at turn ``turn``."""
    text = f"answer {turn}: {_text(_rng(turn, 'reply'), 'note', 80, 900)}"
    return Reply(text, (_call(turn),) if turn % TOOL_EVERY == 0 else ())


class CrashingArchive(DiskArchive):
    """A DiskArchive that SIGKILLs its own process around the N-th put (a batch counts as one)."""

    def __init__(self, path: Path, *, after: int | None, before: int | None) -> None:
        super().__init__(path)
        self.puts = 0
        self.after = after
        self.before = before

    def _counted(self, store: Callable[[], T]) -> T:
        self.puts += 1
        if self.puts == self.before:
            os.kill(os.getpid(), signal.SIGKILL)
        result = store()
        if self.puts == self.after:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    def put(self, content: str, *, owner: str | None = None) -> str:
        return self._counted(lambda: super(CrashingArchive, self).put(content, owner=owner))

    def put_keyed(self, entries: Sequence[tuple[str, str]], *, owner: str | None = None) -> None:
        self._counted(lambda: super(CrashingArchive, self).put_keyed(entries, owner=owner))


def persist(directory: Path, turn: int, session: Session) -> None:
    """Write the state durably and atomically: a crash leaves the old file or the new one."""
    target = directory / STATE_FILE
    scratch = directory / f"{STATE_FILE}.tmp"
    with open(scratch, "w", encoding="utf-8") as out:
        json.dump({"turn": turn, "state": session.state()}, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(scratch, target)
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def load(directory: Path) -> tuple[int, dict[str, object] | None]:
    """The persisted (turn, session state), or (0, None) before the first turn completed."""
    path = directory / STATE_FILE
    if not path.exists():
        return 0, None
    data = json.loads(path.read_text(encoding="utf-8"))
    return int(data["turn"]), data["state"]


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def main(directory: Path) -> None:
    archive = CrashingArchive(
        directory / ARCHIVE_FILE, after=_env_int(CRASH_AFTER_ENV), before=_env_int(CRASH_BEFORE_ENV)
    )
    turn, state = load(directory)
    current = {"turn": turn}

    def script(_request: ParsedRequest) -> Reply:
        return reply_for(current["turn"])

    provider = MockProvider("openai-chat", context_window=1_000_000, script=script)
    gateway = Middlebox(provider, [BodyCap(GATEWAY_LIMIT, probability=GATEWAY_PROBABILITY)], seed=SEED + turn)
    sender = HttpxSender(
        "openai-chat", base_url="http://gateway.test", model="gpt-4o", transport=httpx.MockTransport(gateway)
    )
    session = Session(sender, policy=POLICY, archive=archive, env={}, sleep=lambda _s: None)
    if state is not None:
        session.restore(state)
    print(STARTED, turn, flush=True)
    for number in range(turn, MAX_TURNS):
        current["turn"] = number
        session.extend(turn_inputs(number))
        session.complete()
        persist(directory, number + 1, session)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
