"""Nothing lost, provably (issue 12): the archive under a flapping gateway, sharing, time, crashes, bad disks.

Each case ends with 0 strings the live history's markers point to and the
archive cannot give back — or with an explicit, counted refusal (the session
raised a typed :class:`~ctxrecover.errors.ArchiveError` before the cut that
needed the write, and said so in an ``archive_refused`` notice).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from ctxrecover.archive import DiskArchive, extract_keys, recall
from ctxrecover.errors import ArchiveError, ArchiveIntegrityError, ArchiveWriteError, RecoveryError
from ctxrecover.messages import Message
from ctxrecover.session import Session
from ctxrecover.transport import HttpxSender

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
WORKER = HERE / "archive_worker.py"
MIB = 2**20
DAY = 86_400.0


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


flapping = _load("flapping")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATCLI_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def _recall_failures(history: list[Message], store: Any) -> list[str]:
    keys = {key for msg in history for key in extract_keys(msg.content)}
    return sorted(key for key in keys if recall(store, key).missing)


def _lost(fed: list[Message], history: list[Message], store: Any) -> list[str]:
    """Fed message contents neither in the history nor recallable from its markers (transitively)."""
    texts = [m.content for m in history] + [c.arguments for m in history for c in m.tool_calls]
    frontier, seen = [key for t in texts for key in extract_keys(t)], set()
    while frontier:
        key = frontier.pop()
        if key not in seen:
            seen.add(key)
            found = recall(store, key).found.get(key)
            if found is not None:
                texts.append(found)
                frontier += extract_keys(found)
    haystack = "\n".join(texts)
    return [m.content[:60] for m in fed if m.content not in haystack]


# -- the flapping gateway over a tiny capped archive ----------------------------------------------


def test_300_turns_over_a_flapping_gateway_and_a_1_mib_archive_lose_nothing_silently(
    tmp_path: Path, record_property: Any
) -> None:
    checked: list[tuple[int, int]] = []

    def check(session: Session, run: Any) -> None:
        assert store.total_bytes <= 1 * MIB
        if run.turns % 25 == 0:
            checked.append(flapping.unrecallable(session.history, store, run.shadow))

    with DiskArchive(tmp_path / "ccr.sqlite", max_bytes=1 * MIB) as store:
        run = flapping.run(store, 300, check=check)
        final = flapping.unrecallable(run.history, store, run.shadow)
        record_property("refused_turns", run.refusals)
        record_property("archived_chars", sum(map(len, run.shadow.values())))
        print(f"300 turns, 1 MiB: unrecallable {final}, refused turns {run.refusals}")
        assert final == (0, 0) and set(checked) == {(0, 0)}
        assert run.turns == 300 and run.refusals > 0  # the cap is too small for the whole conversation
        codes = [n.code for n in run.notices]
        # Every refused write is counted and announced; a turn raises only for a cut its request needs
        # (a refused microcompact fold is skipped), so a raised turn may follow a skipped fold.
        assert run.session.stats.archive_refusals == codes.count("archive_refused") >= run.refusals
        # The user heard once, before the first refusal, how full it is and what frees room.
        assert codes.count("archive_pressure") == 1
        assert codes.index("archive_pressure") < codes.index("archive_refused")
        grow = f"open it with a larger max_bytes: DiskArchive({str(tmp_path / 'ccr.sqlite')!r}, max_bytes="
        for error in run.errors:
            assert (
                error.needed + error.pinned_bytes > error.max_bytes == 1 * MIB
            )  # refused only when it had to be
            assert "held: this session " in str(error) and grow in str(error)
        assert _lost(run.fed, run.history, store) == []
        assert store.verify() == []


# -- one file, two sessions ------------------------------------------------------------------------


@pytest.mark.parametrize("separate_namespaces", [True, False], ids=["namespaces", "one-namespace"])
def test_two_sessions_on_one_file_never_evict_each_other(tmp_path: Path, separate_namespaces: bool) -> None:
    path = tmp_path / "shared.sqlite"
    with (
        DiskArchive(path, max_bytes=1 * MIB, namespace="alice") as alice_store,
        alice_store.view("bob" if separate_namespaces else "alice") as bob_store,
    ):
        alice = flapping.run(alice_store, 60, seed=1)
        bob = flapping.run(bob_store, 60, seed=2)  # bob's writes fill the file while alice's history is live
        assert (
            _recall_failures(alice.history, alice_store) == []
            and _recall_failures(bob.history, bob_store) == []
        )
        assert _lost(alice.fed, alice.history, alice_store) == []
        if separate_namespaces:  # and neither can read the other's entries
            alice_keys = {k for m in alice.history for k in extract_keys(m.content)}
            assert alice_keys and not any(key in bob_store for key in alice_keys)
        assert alice_store.verify() == []


def test_interleaved_sessions_on_one_small_file_keep_both_histories_recallable(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    with (
        DiskArchive(path, max_bytes=600_000, namespace="alice") as alice_store,
        alice_store.view("bob") as bob_store,
    ):
        drivers = {
            name: _Stepper(store, seed) for name, store, seed in (("a", alice_store, 1), ("b", bob_store, 2))
        }
        for turn in range(90):
            for driver in drivers.values():
                driver.step(turn)
            for driver in drivers.values():
                assert _recall_failures(driver.session.history, driver.store) == [], f"turn {turn}"
        assert sum(d.refusals for d in drivers.values()) == sum(
            d.session.stats.archive_refusals for d in drivers.values()
        )
        assert alice_store.verify() == []


class _Stepper:
    """One session of a flapping run, advanced one user turn at a time."""

    def __init__(self, store: DiskArchive, seed: int) -> None:
        self.store = store
        self.rng = random.Random(seed)
        transport = httpx.MockTransport(flapping.FlappingGateway(seed))
        sender = HttpxSender("openai-chat", base_url="https://g.test", model="gpt-4o", transport=transport)
        self.session = Session(sender, policy=flapping.POLICY, archive=store, env={}, sleep=lambda _s: None)
        self.session.add(Message.system("You are brief."))
        self.refusals = 0

    def step(self, turn: int) -> None:
        self.session.add(
            Message.user(
                f"turn {turn} " + " ".join(f"w{turn}x{i}" for i in range(self.rng.randint(300, 1500)))
            )
        )
        try:
            self.session.complete()
        except ArchiveError:
            self.refusals += 1
        except RecoveryError:
            pass


# -- time: a TTL older than the conversation -------------------------------------------------------


def test_resuming_after_8_days_with_a_7_day_ttl_recalls_everything_the_history_reaches(
    tmp_path: Path,
) -> None:
    path, clock = tmp_path / "ccr.sqlite", _Clock()
    with DiskArchive(path, ttl_seconds=7 * DAY, clock=clock) as store:
        run = flapping.run(store, 80)
        state = run.session.state()
        live = {key for msg in run.history for key in extract_keys(msg.content)}
    clock.now += 8 * DAY
    with DiskArchive(path, ttl_seconds=7 * DAY, clock=clock) as store:  # opening expires what it may
        resumed = Session(
            run.session.sender, policy=flapping.POLICY, archive=store, env={}, sleep=lambda _s: None
        )
        resumed.restore(state)
        reachable = _reachable(resumed.history, store)
        print(f"8 days later: {len(reachable)} entries reachable from the history, all recallable")
        assert len(live) >= 1 and len(reachable) >= 50
        assert _recall_failures(resumed.history, store) == []
        assert _lost(run.fed, resumed.history, store) == []
        resumed.add(Message.user("where were we?"))
        resumed.complete()
        assert _recall_failures(resumed.history, store) == [] and store.verify() == []


class _Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def _reachable(history: list[Message], store: DiskArchive) -> set[str]:
    frontier, seen = [k for m in history for k in extract_keys(m.content)], set()
    while frontier:
        key = frontier.pop()
        if key not in seen and (content := store.get(key)) is not None:
            seen.add(key)
            frontier += extract_keys(content)
    return seen


# -- kill -9 during writes -------------------------------------------------------------------------

KILLS = 12


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_kill_9_during_writes_leaves_a_consistent_file_with_every_durable_entry(tmp_path: Path) -> None:
    path = tmp_path / "ccr.sqlite"
    rng = random.Random(3)
    durable: set[str] = set()
    for kill in range(KILLS):
        process = subprocess.Popen(
            [sys.executable, str(WORKER), "writer", str(path), str(kill)],
            cwd=REPO_ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None and process.stdout.readline().strip() == "started"
        time.sleep(rng.uniform(0.02, 0.5))  # anywhere: mid-put, mid-pin, mid-commit
        process.send_signal(signal.SIGKILL)
        out, err = process.communicate(timeout=60)
        assert process.returncode == -signal.SIGKILL, err[-2000:]
        durable |= {line.split()[1] for line in out.splitlines() if line.startswith("durable ")}
        with DiskArchive(path, ttl_seconds=None) as store:
            assert store.verify() == [], f"after kill {kill + 1}"
            missing = [key for key in durable if key not in store]
            assert not missing, f"after kill {kill + 1}: {len(missing)} entries a put had returned are gone"
    assert len(durable) > 3 * KILLS, "the writer made too little progress to test anything"


# -- corruption ------------------------------------------------------------------------------------


def test_a_flipped_byte_in_a_session_s_archive_is_a_typed_error_naming_key_and_file(tmp_path: Path) -> None:
    path = tmp_path / "ccr.sqlite"
    with DiskArchive(path, max_bytes=8 * MIB) as store:
        run = flapping.run(store, 40)
        keys = sorted(_reachable(run.history, store))
        victim = max(keys, key=lambda k: len(store.get(k) or ""))
        needle = (store.get(victim) or "")[100:400].encode()
    data = bytearray(path.read_bytes())
    at = data.index(needle)
    data[at + 10] ^= 0x20
    path.write_bytes(bytes(data))
    with DiskArchive(path, max_bytes=8 * MIB) as store:
        with pytest.raises(ArchiveIntegrityError) as info:
            recall(store, victim)
        assert (info.value.key, info.value.path) == (victim, str(path))
        assert store.verify() == [f"entry default/{victim}: content does not match its key"]
        assert all(recall(store, key).found for key in keys if key != victim)


# -- a full disk -----------------------------------------------------------------------------------


def _unshare_available() -> str | None:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare/mount not installed"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--map-root-user", "true"]
        if os.geteuid() != 0
        else ["unshare", "--mount", "--propagation", "private", "true"],
        capture_output=True,
        text=True,
    )
    return None if probe.returncode == 0 else f"cannot make a private mount namespace: {probe.stderr.strip()}"


def _in_private_mounts(script: str) -> subprocess.CompletedProcess[str]:
    command = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        command.append("--map-root-user")
    return subprocess.run(
        [*command, "sh", "-c", script], capture_output=True, text=True, env=_env(), cwd=REPO_ROOT, timeout=300
    )


def test_a_full_tmpfs_refuses_writes_with_a_typed_error_and_reads_keep_working(tmp_path: Path) -> None:
    reason = _unshare_available()
    if reason is not None:
        pytest.skip(f"no small tmpfs here ({reason}); test_injected_enospc covers the same path")
    mount = tmp_path / "small"
    mount.mkdir()
    done = _in_private_mounts(
        f"mount -t tmpfs -o size=2m tmpfs {mount} && {sys.executable} {WORKER} full {mount / 'ccr.sqlite'}"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(report["errors"]) == 3
    assert all(
        e.startswith("ArchiveWriteError: CCR archive ") and "database or disk is full" in e
        for e in report["errors"]
    )
    assert report["refusals_counted"] == report["refusal_notices"] == 3
    assert report["markers"] > 0 and report["recalled"] == report["markers"]  # every read still works
    assert report["recalled_after_reopen"] == report["markers"]
    assert report["unrecallable"] == [0, 0]


class _FullDisk:
    """An sqlite connection whose writes fail as on a full disk (SQLITE_FULL, from ENOSPC)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.startswith("BEGIN IMMEDIATE"):
            error = sqlite3.OperationalError("database or disk is full")
            error.sqlite_errorname = "SQLITE_FULL"  # type: ignore[attr-defined]
            error.__cause__ = OSError(28, "No space left on device")
            raise error
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def test_injected_enospc_refuses_writes_before_any_cut_and_reads_keep_working(tmp_path: Path) -> None:
    with DiskArchive(tmp_path / "ccr.sqlite", max_bytes=8 * MIB) as store:
        run = flapping.run(store, 30)
        session = run.session
        store._file.conn = _FullDisk(store._file.conn)  # type: ignore[assignment]
        assert _recall_failures(session.history, store) == []  # reads: no write transaction needed
        refused_before = session.stats.archive_refusals
        session.add(Message.user("now a turn that must compact " + " ".join(f"z{i}" for i in range(12_000))))
        history = session.history
        with pytest.raises(ArchiveWriteError) as info:
            session.complete()
        assert "database or disk is full" in str(info.value) and info.value.path == str(store.path)
        assert session.history == history  # every write failed: not a single cut happened
        assert session.stats.archive_refusals == refused_before + 1
        assert _recall_failures(session.history, store) == []


# -- a read-only file ------------------------------------------------------------------------------


@pytest.fixture
def saved_session(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    path = tmp_path / "archive" / "ccr.sqlite"
    path.parent.mkdir()
    with DiskArchive(path) as store:
        run = flapping.run(store, 40)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(run.session.state()), encoding="utf-8")
    yield path, state


def test_a_read_only_mount_still_recalls(saved_session: tuple[Path, Path]) -> None:
    path, state = saved_session
    reason = _unshare_available()
    if reason is not None:
        pytest.skip(f"no read-only mount here ({reason}); read_only=True is tested in tests/ctxrecover")
    directory = path.parent
    done = _in_private_mounts(
        f"mount --bind {directory} {directory} && mount -o remount,ro,bind {directory} && "
        f"{sys.executable} {WORKER} recall {path} {state}"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["read_only"] is True
    assert report["markers"] > 0 and report["recalled"] == report["markers"]
    assert (
        report["put_error"].startswith("ArchiveWriteError: CCR archive")
        and "read-only" in report["put_error"]
    )


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores file permissions")
def test_a_read_only_file_still_recalls(saved_session: tuple[Path, Path]) -> None:
    path, state = saved_session
    path.chmod(0o444)
    path.parent.chmod(0o555)
    try:
        done = subprocess.run(
            [sys.executable, str(WORKER), "recall", str(path), str(state)],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=REPO_ROOT,
            timeout=120,
        )
    finally:
        path.parent.chmod(0o755)
        path.chmod(0o644)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["read_only"] is True and report["recalled"] == report["markers"] > 0
