"""Crash safety of the durable archive: SIGKILL at random points, restart, nothing lost.

A worker process (crash_worker.py) runs a session whose CCR archive is a
:class:`~ctxrecover.archive.disk.DiskArchive` on an SQLite file and persists the
session state after every turn. It is killed with SIGKILL again and again —
right after an archive put returned (archived, not yet cut), right before one,
or after a random delay (anywhere: mid-transaction, mid-write of the state) —
and restarted from what it persisted. After every kill:

- the archive file opens cleanly (no ArchiveCorruptError) and passes SQLite's
  integrity check;
- every message that entered the conversation before the persisted turn, and
  every message content any persisted history ever held, is in the last
  persisted history or recallable from the archive through its markers
  (followed transitively): write-ahead, the archive is durable before the
  history is cut.
"""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from types import ModuleType

import pytest

from ctxrecover.archive import MemoryArchive, archive_key, extract_keys, has_marker
from ctxrecover.archive.disk import DiskArchive
from ctxrecover.messages import Message
from simulator.research.retention import chars_lost

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
WORKER = HERE / "crash_worker.py"
KILLS = 24
KILL_SEED = 7
MODES = ("after_put", "before_put", "timer")
MAX_PUT_INDEX = 40
TIMER_RANGE_S = (0.0, 0.6)
START_TIMEOUT_S = 30.0
RUN_TIMEOUT_S = 60.0
SAMPLED_GETS = 8


def _load_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("crash_worker", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


worker = _load_worker()


def _environment(mode: str, rng: random.Random) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (worker.CRASH_AFTER_ENV, worker.CRASH_BEFORE_ENV) and not k.startswith("CHATCLI_")
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    if mode == "after_put":
        env[worker.CRASH_AFTER_ENV] = str(rng.randint(1, MAX_PUT_INDEX))
    elif mode == "before_put":
        env[worker.CRASH_BEFORE_ENV] = str(rng.randint(1, MAX_PUT_INDEX))
    return env


def _run_until_killed(directory: Path, mode: str, rng: random.Random) -> int:
    """Start the worker, let it die (or kill it after a random delay); returns the turn it resumed at."""
    process = subprocess.Popen(
        [sys.executable, str(WORKER), str(directory)],
        cwd=REPO_ROOT,
        env=_environment(mode, rng),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith(worker.STARTED):
            process.kill()
            _, err = process.communicate(timeout=START_TIMEOUT_S)
            pytest.fail(f"worker did not start: {line!r}\n{err}")
        resumed = int(line.split()[1])
        if mode == "timer":
            time.sleep(rng.uniform(*TIMER_RANGE_S))
            process.send_signal(signal.SIGKILL)
        _, err = process.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == -signal.SIGKILL, f"worker ended with {process.returncode}: {err[-2000:]}"
    return resumed


def _open_archive(path: Path) -> MemoryArchive:
    """Open the file as the library does (raises ArchiveCorruptError on a damaged file), check its
    integrity, and return a snapshot of every entry (recall through DiskArchive.get is tested in
    tests/ctxrecover; here a read-only snapshot keeps 24 restarts fast)."""
    with DiskArchive(path) as store:
        entries = store.stats().entries
        sample = [store.get(key) for key in _keys(path)[:SAMPLED_GETS]]
    snapshot = MemoryArchive()
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        for (content,) in conn.execute("SELECT content FROM entries"):
            snapshot.put(bytes(content).decode("utf-8", "surrogatepass"))
    assert len(snapshot) == entries
    assert all(text is not None and archive_key(text) in snapshot for text in sample)
    return snapshot


def _keys(path: Path) -> list[str]:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return [key for (key,) in conn.execute("SELECT key FROM entries ORDER BY key")]


def _reachable_keys(history: list[Message], store: MemoryArchive) -> set[str]:
    """Keys recallable from the history's markers, following markers inside entries."""
    frontier = [key for msg in history for key in extract_keys(msg.content)]
    seen: set[str] = set()
    while frontier:
        key = frontier.pop()
        entry = store.get(key)
        if key in seen or entry is None:
            continue
        seen.add(key)
        frontier.extend(extract_keys(entry))
    return seen


def _conversation(turns: int) -> list[Message]:
    """Every message that entered the history before turn ``turns``: inputs and replies."""
    messages: list[Message] = []
    for turn in range(turns):
        messages.extend(worker.turn_inputs(turn))
        reply = worker.reply_for(turn)
        messages.append(Message.assistant(reply.text, reply.tool_calls))
    return messages


def test_sigkill_at_random_points_loses_nothing_the_history_had(tmp_path: Path) -> None:
    rng = random.Random(KILL_SEED)
    ever_persisted: dict[str, Message] = {}
    progress: list[tuple[str, int]] = []
    for kill in range(KILLS):
        mode = MODES[kill % len(MODES)]
        _run_until_killed(tmp_path, mode, rng)
        store = _open_archive(tmp_path / worker.ARCHIVE_FILE)
        turn, state = worker.load(tmp_path)
        progress.append((mode, turn))
        if state is None:
            continue
        history = [Message.from_dict(d) for d in state["history"]]
        for msg in history:
            ever_persisted.setdefault(msg.content, msg)
        assert chars_lost(_conversation(turn), history, store) == 0, f"kill {kill + 1} ({mode}), turn {turn}"
        # A stub (content carrying markers: a preview, a truncation notice) is never archived itself;
        # it is kept when what it points to is. Everything else must still be there verbatim.
        reachable = _reachable_keys(history, store)
        stubs = [m for m in ever_persisted.values() if has_marker(m.content)]
        plain = [m for m in ever_persisted.values() if not has_marker(m.content)]
        dangling = [m.content[:80] for m in stubs if not set(extract_keys(m.content)) <= reachable]
        assert not dangling, f"after kill {kill + 1} ({mode}) at turn {turn}: {dangling}"
        assert chars_lost(plain, history, store) == 0, f"after kill {kill + 1} ({mode}) at turn {turn}"
    turns = [turn for _, turn in progress]
    assert turns == sorted(turns), f"the persisted turn went backwards: {progress}"
    assert turns[-1] >= KILLS, f"the worker made too little progress to test anything: {progress}"
    cut = sum(1 for content in ever_persisted if content not in {m.content for m in _last_history(tmp_path)})
    assert cut > 0, "no message ever left the persisted history: the worker never compacted"


def _last_history(directory: Path) -> list[Message]:
    _, state = worker.load(directory)
    assert state is not None
    return [Message.from_dict(d) for d in state["history"]]
