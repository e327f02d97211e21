"""Archive pressure (issue 25): who holds what in a capped file, the warning once past 80 %, the steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxrecover.archive import (
    PRESSURE_WARN_FRACTION,
    ArchiveHolder,
    ArchivePressure,
    DiskArchive,
    SessionArchive,
    archive_range,
)
from ctxrecover.archive.pressure import suggested_max_bytes
from ctxrecover.errors import ArchiveFullError
from ctxrecover.messages import Message
from ctxrecover.sizes import MIB


def test_the_report_counts_what_each_owner_reaches_and_what_only_it_reaches(db_path: Path) -> None:
    with DiskArchive(db_path, max_bytes=100_000) as alice, alice.view("bob") as bob:
        shared = alice.put("s" * 10_000)
        mine = archive_range(alice, [Message.user("m" * 20_000), Message.assistant("n" * 5_000)])
        loose = alice.put("l" * 20_000)  # nobody reaches it: evictable, not held
        theirs = bob.put("b" * 7_000)
        alice.pin("alice", [shared, mine])
        alice.pin("carol", [shared])
        bob.pin("bob", [theirs])

        report = alice.pressure("alice")

    index_bytes = report.session_bytes - 35_000  # the range index itself, besides its two members
    assert 0 < index_bytes < 200 and loose
    assert (report.total_bytes, report.held_bytes) == (62_000 + index_bytes, 42_000 + index_bytes)
    assert (report.session_bytes, report.others_bytes) == (35_000 + index_bytes, 17_000)
    assert report.holders == (
        ArchiveHolder("default", "alice", 35_000 + index_bytes, 25_000 + index_bytes),
        ArchiveHolder("default", "carol", 10_000, 0),
        ArchiveHolder("bob", "bob", 7_000, 7_000),
    )
    assert report.holders_text() == (
        f"this session {report.session_bytes / 1024:.1f} KB, session 'carol' 9.8 KB, session 'bob' 6.8 KB "
        "(namespace 'bob')"
    )
    assert report.advice() == (
        "to make room, release sessions you will not resume — store.view('bob').release('bob') frees "
        f"6.8 KB — or open it with a larger max_bytes: DiskArchive({str(db_path)!r}, max_bytes=1048576) "
        "(1.0 MB)"
    )


def test_a_refusal_names_the_sessions_that_hold_the_file_and_the_steps_that_free_room(db_path: Path) -> None:
    with DiskArchive(db_path, max_bytes=40_000) as store, store.view("other") as other:
        other.pin("squatter", [other.put(f"{i} " + "o" * 9_000) for i in range(3)])  # 27 KB held elsewhere
        store.pin("me", [store.put("m" * 8_000)])
        with pytest.raises(ArchiveFullError) as info:
            store.put("n" * 6_000, owner="me")
    held = 8_000 + 3 * 9_002
    assert info.value.pinned_bytes == held and info.value.needed == 6_000
    assert str(info.value) == (
        f"cannot archive an entry of 5.9 KB (6000 bytes) in {db_path}: it would not fit under max_bytes "
        "(39.1 KB) without evicting entries a live history still reaches (34.2 KB held: session 'squatter' "
        "26.4 KB (namespace 'other'), this session 7.8 KB) — nothing was stored and nothing was cut; to make "
        "room, release sessions you will not resume — store.view('other').release('squatter') frees 26.4 KB "
        f"— or open it with a larger max_bytes: DiskArchive({str(db_path)!r}, max_bytes=1048576) (1.0 MB)"
    )


def test_the_suggested_cap_keeps_what_is_held_under_the_warning_line() -> None:
    assert suggested_max_bytes(1_050_000, 1 * MIB) == 2 * MIB  # 1.05 MB / 0.8 = 1.31 MB → 2 MiB
    assert suggested_max_bytes(100, 4_000) == 1 * MIB  # whole MiB, above the cap in force
    assert suggested_max_bytes(5 * MIB, 8 * MIB) == 9 * MIB  # always larger than the cap in force
    for required in (1, 800_000, 3 * MIB + 1, 40 * MIB):
        cap = suggested_max_bytes(required, 1 * MIB)
        assert cap % MIB == 0 and required <= PRESSURE_WARN_FRACTION * cap


def test_a_session_hears_of_pressure_once_when_held_bytes_pass_the_warning_line(db_path: Path) -> None:
    heard: list[ArchivePressure] = []
    with DiskArchive(db_path, max_bytes=100_000) as store:
        archive = SessionArchive(store, owner="me", on_pressure=heard.append)
        for i in range(7):
            archive.put(f"{i} " + "x" * 9_998)  # held until the next pin: 70 KB
        assert heard == []
        archive.put("8 " + "x" * 9_998)  # 80 KB held: at the line
        archive.put("9 " + "x" * 9_998)  # 90 KB: still only the one notice
    (report,) = heard
    assert (report.held_bytes, report.session_bytes, report.others_bytes) == (80_000, 80_000, 0)
    assert report.held_percent == 80 and report.owner == "me"


def test_a_full_file_of_entries_nobody_reaches_is_no_pressure(db_path: Path) -> None:
    heard: list[ArchivePressure] = []
    with DiskArchive(db_path, max_bytes=100_000) as store:
        for i in range(10):
            store.put(f"{i} " + "e" * 9_998)  # nobody holds these: LRU takes them as needed
        archive = SessionArchive(store, owner="me", on_pressure=heard.append)
        for i in range(3):
            archive.put(f"mine {i} " + "m" * 9_000)
        assert store.total_bytes > PRESSURE_WARN_FRACTION * store.max_bytes
    assert heard == []
