"""The durable SQLite store: caps, LRU, TTL, corruption, durability, concurrency (SPEC §4)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ctxrecover.archive import marker, recall
from ctxrecover.archive.disk import DiskArchive
from ctxrecover.errors import ArchiveCorruptError, ArchiveError, ConfigError

REPO_ROOT = Path(__file__).resolve().parents[3]


UNKNOWN_TEXT = "[ccr:{key} — unknown or evicted: nothing is archived under this key]"


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- the disk store ---------------------------------------------------------------------------


def test_disk_creates_parent_directories(db_path: Path) -> None:
    assert not db_path.parent.exists()
    with DiskArchive(db_path) as store:
        store.put("x")
    assert db_path.is_file()


def test_disk_entries_survive_reopen(db_path: Path) -> None:
    contents = ["alpha", "béta ✓", "broken \ud800 surrogate", "z" * 50_000]
    with DiskArchive(db_path) as store:
        keys = [store.put(c) for c in contents]
    with DiskArchive(db_path) as reopened:
        assert [reopened.get(k) for k in keys] == contents
        assert reopened.stats().entries == 4
        assert reopened.stats().bytes == sum(len(c.encode("utf-8", "surrogatepass")) for c in contents)


def test_disk_entry_over_the_per_entry_cap_raises_and_stores_nothing(db_path: Path) -> None:
    with DiskArchive(db_path, max_bytes=4000) as store:
        assert store.max_entry_bytes == 1000
        store.put("k" * 1000)  # exactly at the cap is fine
        with pytest.raises(ArchiveError) as info:
            store.put("é" * 501)  # 1002 bytes in UTF-8
        message = str(info.value)
        assert "(1002 bytes)" in message
        assert "per-entry cap is 1000 B (1000 bytes, max_bytes // 4)" in message
        assert str(db_path) in message
        assert "larger max_bytes" in message
        assert store.stats().entries == 1


def test_disk_default_caps() -> None:
    assert DiskArchive.__init__.__kwdefaults__["max_bytes"] == 256 * 1024 * 1024
    assert DiskArchive.__init__.__kwdefaults__["ttl_seconds"] == 168 * 3600


def test_disk_evicts_least_recently_used_first(db_path: Path) -> None:
    with DiskArchive(db_path, max_bytes=4000) as store:
        a, b, c, d = (store.put(letter * 1000) for letter in "abcd")
        assert store.stats().bytes == 4000
        assert store.get(a) == "a" * 1000  # a is now the most recent
        e = store.put("e" * 1000)
        assert b not in store
        assert [k in store for k in (a, c, d, e)] == [True, True, True, True]
        store.put("f" * 1000)
        assert c not in store
        assert [k in store for k in (a, d, e)] == [True, True, True]
        assert store.stats() == type(store.stats())(entries=4, bytes=4000)
        assert recall(store, marker(b)).text == UNKNOWN_TEXT.format(key=b)


def test_disk_never_evicts_the_entry_being_written(db_path: Path) -> None:
    with DiskArchive(db_path, max_bytes=4000) as store:
        for letter in "abcd":
            store.put(letter * 1000)
        big = store.put("n" * 1000)
        assert store.get(big) == "n" * 1000
        assert store.stats().bytes <= 4000


def test_disk_re_put_refreshes_lru(db_path: Path) -> None:
    with DiskArchive(db_path, max_bytes=4000) as store:
        a, b, c, d = (store.put(letter * 1000) for letter in "abcd")
        store.put("a" * 1000)
        store.put("e" * 1000)
        assert [k in store for k in (a, b, c, d)] == [True, False, True, True]


def test_disk_ttl_expires_entries_not_accessed_within_it(db_path: Path) -> None:
    clock = FakeClock()
    with DiskArchive(db_path, ttl_seconds=3600, clock=clock) as store:
        old = store.put("old")
        clock.now += 1800
        fresh = store.put("fresh")
        kept = store.put("kept")
        clock.now += 1000
        assert store.get(kept) == "kept"  # access refreshes the TTL
        clock.now += 900  # old: 3700 s, fresh: 1900 s, kept: 900 s since last access
        assert old not in store
        assert store.get(old) is None
        assert store.stats().entries == 3  # a read never writes: the next write removes it
        store.put("next")
        assert store.stats().entries == 3 and old not in store
        clock.now += 2000  # fresh: 3900 s, kept: 2900 s
        assert store.get(fresh) is None
        assert store.get(kept) == "kept"


def test_disk_ttl_evicts_on_open(db_path: Path) -> None:
    clock = FakeClock()
    with DiskArchive(db_path, ttl_seconds=60, clock=clock) as store:
        store.put("one")
        store.put("two")
    clock.now += 61
    with DiskArchive(db_path, ttl_seconds=60, clock=clock) as reopened:
        assert reopened.stats().entries == 0


def test_disk_ttl_none_never_expires(db_path: Path) -> None:
    clock = FakeClock()
    with DiskArchive(db_path, ttl_seconds=None, clock=clock) as store:
        key = store.put("forever")
        clock.now += 10 * 365 * 86400
        assert store.get(key) == "forever"


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"max_bytes": 3}, "max_bytes must be an integer >= 4 (got 3)"),
        ({"max_bytes": 1.5e9}, "max_bytes must be an integer"),
        ({"ttl_seconds": 0}, "ttl_seconds must be > 0, or None for no expiry (got 0)"),
        ({"busy_timeout_s": -1}, "busy_timeout_s must be >= 0"),
    ],
)
def test_disk_bad_settings_raise_config_error(db_path: Path, kwargs: dict, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        DiskArchive(db_path, **kwargs)
    assert not db_path.exists()


SQLITE_HEADER = b"SQLite format 3\x00"


@pytest.mark.parametrize(
    "payload",
    [
        bytes(range(256)) * 20,
        b"hello, this is a text file and not a database\n",
        SQLITE_HEADER + b"\xff" * 4000,
        b"SQLite for",
    ],
    ids=["garbage", "text", "sqlite-header-then-garbage", "truncated-header"],
)
def test_disk_corrupt_file_raises_naming_the_path_and_is_left_untouched(
    db_path: Path, payload: bytes
) -> None:
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(payload)
    with pytest.raises(ArchiveCorruptError) as info:
        DiskArchive(db_path)
    assert info.value.path == str(db_path)
    assert f"CCR archive {db_path} cannot be used:" in str(info.value)
    assert "move the file aside (nothing was deleted)" in str(info.value)
    assert db_path.read_bytes() == payload
    assert sorted(p.name for p in db_path.parent.iterdir()) == [db_path.name]


def test_disk_damaged_pages_raise_corrupt_error_and_the_file_is_kept(db_path: Path) -> None:
    with DiskArchive(db_path) as store:
        keys = [store.put(f"entry {i} " + "q" * 3000) for i in range(20)]
    data = bytearray(db_path.read_bytes())
    data[4096:] = b"\xff" * (len(data) - 4096)  # keep page 1 (the schema), wreck the rest
    db_path.write_bytes(bytes(data))
    with pytest.raises(ArchiveCorruptError) as info:
        with DiskArchive(db_path) as damaged:
            for key in keys:
                damaged.get(key)
    assert info.value.path == str(db_path)
    assert "malformed" in str(info.value)
    assert db_path.read_bytes() == bytes(data)


def test_disk_directory_path_raises_corrupt_error(tmp_path: Path) -> None:
    with pytest.raises(ArchiveCorruptError, match="it is a directory, not a file") as info:
        DiskArchive(tmp_path)
    assert info.value.path == str(tmp_path)


def test_disk_refuses_another_applications_database(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        conn.execute("INSERT INTO invoices (total) VALUES (9.5)")
    conn.close()
    before = db_path.read_bytes()
    with pytest.raises(ArchiveCorruptError, match="an SQLite database of another application"):
        DiskArchive(db_path)
    assert db_path.read_bytes() == before


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores file permissions")
def test_disk_unreadable_file_raises_corrupt_error(db_path: Path) -> None:
    with DiskArchive(db_path) as store:
        store.put("kept")
    db_path.chmod(0)
    try:
        with pytest.raises(ArchiveCorruptError, match="cannot be opened") as info:
            DiskArchive(db_path)
        assert info.value.path == str(db_path)
    finally:
        db_path.chmod(0o600)


def test_disk_path_under_a_regular_file_raises_corrupt_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("keep me")
    path = blocker / "archive.sqlite"
    with pytest.raises(ArchiveCorruptError, match="cannot be opened for reading and writing") as info:
        DiskArchive(path)
    assert info.value.path == str(path)
    assert blocker.read_text() == "keep me"


def test_disk_corrupt_error_is_an_archive_error() -> None:
    assert issubclass(ArchiveCorruptError, ArchiveError)


def test_disk_closed_store_raises_and_close_is_idempotent(db_path: Path) -> None:
    store = DiskArchive(db_path)
    with store:
        key = store.put("x")
    store.close()
    with pytest.raises(ArchiveError, match="is closed"):
        store.get(key)
    with pytest.raises(ArchiveError, match="is closed"):
        store.put("y")


def test_disk_rejects_non_text_content(disk: DiskArchive) -> None:
    with pytest.raises(TypeError, match="needs a str, got bytes"):
        disk.put(b"raw")  # type: ignore[arg-type]


KILL_AFTER_PUT = """
import os, signal, sys
from ctxrecover.archive.disk import DiskArchive
store = DiskArchive(sys.argv[1])
key = store.put(sys.argv[2])
sys.stdout.write(key + "\\n")
sys.stdout.flush()
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_disk_entry_is_durable_when_the_writer_is_killed_right_after_put(db_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    contents = [f"tool output {i}\n" + "ü" * 20_000 for i in range(2)]
    keys = []
    for content in contents:
        done = subprocess.run(
            [sys.executable, "-c", KILL_AFTER_PUT, str(db_path), content],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO_ROOT,
            timeout=60,
        )
        assert done.returncode == -signal.SIGKILL, done.stderr
        keys.append(done.stdout.strip())
    with DiskArchive(db_path) as reopened:
        assert [reopened.get(k) for k in keys] == contents


def test_disk_concurrent_threads_put_without_loss(disk: DiskArchive) -> None:
    contents = [f"thread {t} item {i} " + "x" * (i * 37) for t in range(8) for i in range(20)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        keys = list(pool.map(disk.put, contents))
    assert disk.stats().entries == len(contents)
    assert [disk.get(k) for k in keys] == contents


def test_disk_two_handles_on_one_file_share_entries(db_path: Path) -> None:
    first, second = DiskArchive(db_path), DiskArchive(db_path)
    barrier = threading.Barrier(2)

    def writer(store: DiskArchive, tag: str) -> Callable[[], list[str]]:
        def run() -> list[str]:
            barrier.wait()
            return [store.put(f"{tag} {i}") for i in range(30)]

        return run

    with first, second, ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(writer(first, "first")), pool.submit(writer(second, "second"))]
        keys = [k for f in futures for k in f.result()]
    with DiskArchive(db_path) as reopened:
        assert reopened.stats().entries == 60
        assert all(k in reopened for k in keys)
