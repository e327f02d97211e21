"""The archive file (issue 12): never a fresh archive over a bad one; verified reads; reads never write."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import pytest

import ctxrecover.archive.sqlite_file as sqlite_file
from ctxrecover.archive import DiskArchive, archive_key, archive_range, marker, recall, render_transcript
from ctxrecover.errors import ArchiveCorruptError, ArchiveError, ArchiveIntegrityError, ArchiveWriteError
from ctxrecover.messages import Message

APPLICATION_ID = 0x43435231


def test_a_zero_byte_file_is_an_error_naming_it_and_is_left_alone(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    db_path.touch()
    with pytest.raises(ArchiveCorruptError) as info:
        DiskArchive(db_path)
    assert info.value.path == str(db_path)
    assert f"CCR archive {db_path} cannot be used: it is empty (0 bytes)" in str(info.value)
    assert db_path.stat().st_size == 0


def test_an_sqlite_file_without_the_archive_mark_is_foreign_even_when_empty(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    conn = sqlite3.connect(db_path)
    conn.execute("VACUUM")  # a valid, empty SQLite database of nobody in particular
    conn.close()
    before = db_path.read_bytes()
    with pytest.raises(ArchiveCorruptError, match="an SQLite database of another application"):
        DiskArchive(db_path)
    assert db_path.read_bytes() == before


def test_a_new_archive_is_complete_on_disk_before_the_first_put(db_path: Path) -> None:
    with DiskArchive(db_path):
        pass
    assert db_path.stat().st_size > 0
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    conn.close()
    assert sorted(p.name for p in db_path.parent.iterdir() if not p.name.startswith(db_path.name + "-")) == [
        db_path.name
    ]  # no scratch file left behind


def test_creation_failing_with_a_full_disk_leaves_no_file(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(*_args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sqlite_file.os, "link", no_space)
    monkeypatch.setattr(sqlite_file.os, "replace", no_space)
    with pytest.raises(ArchiveCorruptError, match="No space left on device"):
        DiskArchive(db_path)
    assert not db_path.exists() and list(db_path.parent.iterdir()) == []


def _flip_a_byte_of(path: Path, needle: bytes) -> None:
    data = bytearray(path.read_bytes())
    at = data.index(needle)
    data[at + len(needle) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_flipped_byte_is_an_integrity_error_naming_key_and_file(db_path: Path) -> None:
    damaged, intact = "DAMAGED-" + "d" * 2000, "INTACT-" + "i" * 2000
    with DiskArchive(db_path) as store:
        bad_key, good_key = store.put(damaged), store.put(intact)
    _flip_a_byte_of(db_path, b"d" * 1500)  # the store closed: its WAL is checkpointed into the file
    with DiskArchive(db_path) as store:
        with pytest.raises(ArchiveIntegrityError) as info:
            store.get(bad_key)
        assert (info.value.key, info.value.path) == (bad_key, str(db_path))
        assert f"the entry ccr:{bad_key} (namespace 'default') is damaged" in str(info.value)
        assert store.get(good_key) == intact
        assert store.verify() == [f"entry default/{bad_key}: content does not match its key"]
        with pytest.raises(ArchiveIntegrityError):
            recall(store, marker(bad_key))  # recall never passes altered text off as the original


def test_a_flipped_byte_that_breaks_utf8_is_an_integrity_error_too(db_path: Path) -> None:
    text = "é" * 1500
    with DiskArchive(db_path) as store:
        key = store.put(text)
    data = bytearray(db_path.read_bytes())
    at = data.index("é".encode() * 1000)
    data[at] = 0xFF
    db_path.write_bytes(bytes(data))
    with DiskArchive(db_path) as store, pytest.raises(ArchiveIntegrityError):
        store.get(key)


def test_read_only_opening_recalls_and_refuses_writes(db_path: Path) -> None:
    messages = [Message.user("question " * 40), Message.assistant("answer " * 40)]
    with DiskArchive(db_path) as store:
        key = archive_range(store, messages)
    before = db_path.read_bytes()
    with DiskArchive(db_path, read_only=True) as store:
        assert store.read_only
        assert recall(store, marker(key)).found[key] == render_transcript(messages)
        with pytest.raises(
            ArchiveWriteError, match="is open read-only — nothing was stored and nothing was cut"
        ):
            store.put("new")
        store.pin("session", [key])  # a read-only handle keeps no pins: nothing to do, no error
    assert db_path.read_bytes() == before


def test_a_file_that_cannot_be_written_opens_read_only(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with DiskArchive(db_path) as store:
        key = store.put("recall me")
    real_open = os.open

    def refuse_writing(path: object, flags: int, *args: object) -> int:
        if flags & os.O_RDWR and str(path) == str(db_path):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(sqlite_file.os, "open", refuse_writing)
    with DiskArchive(db_path) as store:
        assert store.read_only and store.get(key) == "recall me"
        with pytest.raises(ArchiveWriteError):
            store.put("x")


def test_a_read_never_waits_for_the_write_lock(db_path: Path) -> None:
    with DiskArchive(db_path, busy_timeout_s=0.05) as store:
        key = store.put("readable while another writer holds the file")
        writer = sqlite3.connect(db_path, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")  # another process mid-write
        try:
            assert store.get(key) == "readable while another writer holds the file"
            assert key in store and store.stats().entries == 1
        finally:
            writer.execute("ROLLBACK")
            writer.close()


V1_SCHEMA = (
    "CREATE TABLE entries (key TEXT PRIMARY KEY, size INTEGER NOT NULL, created REAL NOT NULL,"
    " accessed REAL NOT NULL, access_seq INTEGER NOT NULL, content BLOB NOT NULL)",
    "CREATE INDEX entries_lru ON entries (access_seq, size)",
    "CREATE INDEX entries_ttl ON entries (accessed)",
)


def test_a_schema_1_archive_is_upgraded_into_the_default_namespace(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    member, index = (
        "a member",
        "[ccr range of 1 messages]\n[user]: " + marker(archive_key("a member")) + "\n\n",
    )
    conn = sqlite3.connect(db_path, isolation_level=None)
    for statement in V1_SCHEMA:
        conn.execute(statement)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    for seq, text in enumerate((member, index), 1):
        conn.execute(
            "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)",
            (archive_key(text), len(text), 1e9, 1e9, seq, text.encode()),
        )
    conn.close()
    with DiskArchive(db_path, ttl_seconds=None) as store:
        assert recall(store, archive_key(index)).found[archive_key(index)] == "[user]: a member\n\n"
        assert store.stats().entries == 2 and store.verify() == []
    with pytest.raises(ArchiveCorruptError, match="older"):
        _v1_copy_read_only(db_path.parent / "old.sqlite")


def _v1_copy_read_only(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in V1_SCHEMA:
        conn.execute(statement)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.close()
    DiskArchive(path, read_only=True)


def test_a_newer_schema_is_refused(db_path: Path) -> None:
    with DiskArchive(db_path):
        pass
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(ArchiveCorruptError, match=r"written by a newer ctxrecover \(archive schema 99\)"):
        DiskArchive(db_path)


def test_opening_while_another_writer_holds_the_file_still_reads(db_path: Path) -> None:
    with DiskArchive(db_path) as store:
        key = store.put("there before")
    writer = sqlite3.connect(db_path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # the open's expiry pass cannot write now: it waits for the next write
    try:
        with DiskArchive(db_path, busy_timeout_s=0.05) as store:
            assert store.get(key) == "there before"
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_a_closed_view_refuses_use_while_other_views_keep_the_file(db_path: Path) -> None:
    with DiskArchive(db_path, namespace="a") as alice:
        bob = alice.view("b")
        key = bob.put("bob's")
        bob.close()
        for use in (lambda: bob.get(key), lambda: key in bob, bob.stats, lambda: bob.pin("o", [key])):
            with pytest.raises(ArchiveError, match="is closed"):
                use()
        with alice.view("b") as again:
            assert again.get(key) == "bob's"
