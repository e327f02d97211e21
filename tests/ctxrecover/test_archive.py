"""The CCR archive (SPEC §4): keys, markers, lenient recall, the memory store and the durable disk store."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxrecover.archive as archive_module
from ctxrecover.archive import (
    MARKER_RE,
    RANGE_HEADER,
    Archive,
    MemoryArchive,
    archive_key,
    archive_message,
    archive_range,
    extract_keys,
    has_marker,
    marker,
    parse_recall_keys,
    put_entries,
    read_original,
    recall,
    render_transcript,
)
from ctxrecover.disk_archive import DiskArchive
from ctxrecover.errors import ArchiveCorruptError, ArchiveError, ConfigError
from ctxrecover.messages import Image, Message, ToolCall

REPO_ROOT = Path(__file__).resolve().parents[2]
K1 = "0123456789abcdef"
K2 = "fedcba9876543210"
K3 = "00000000deadbeef"
UNKNOWN_TEXT = "[ccr:{key} — unknown or evicted: nothing is archived under this key]"


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "ccr" / "archive.sqlite"


@pytest.fixture
def disk(db_path: Path) -> Iterator[DiskArchive]:
    with DiskArchive(db_path) as store:
        yield store


@pytest.fixture(params=["memory", "disk"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Archive]:
    if request.param == "memory":
        yield MemoryArchive()
    else:
        with DiskArchive(tmp_path / "store.sqlite") as disk_store:
            yield disk_store


# -- keys and markers -----------------------------------------------------------------


@pytest.mark.parametrize(("content", "key"), [("", "e3b0c44298fc1c14"), ("abc", "ba7816bf8f01cfea")])
def test_key_is_first_16_hex_of_sha256(content: str, key: str) -> None:
    assert archive_key(content) == key
    assert key == hashlib.sha256(content.encode()).hexdigest()[:16]


def test_key_of_text_with_lone_surrogate_does_not_raise() -> None:
    assert len(archive_key("broken \ud800 text")) == 16


def test_marker_format_matches_the_marker_regex() -> None:
    assert marker(K1) == "<<ccr:0123456789abcdef>>"
    assert MARKER_RE.fullmatch(marker(K1)).group(1) == K1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<<ccr:0123456789abcdef>>", True),
        ("head [full content recoverable via @recall <<ccr:0123456789abcdef>>] tail", True),
        ("<<ccr:0123456789ABCDEF>>", False),
        ("<<ccr:0123456789abcde>>", False),
        ("<<ccr:0123456789abcdef0>>", False),
        ("<<ccr:0123456789abcdeg>>", False),
        ("ccr:0123456789abcdef", False),
        ("0123456789abcdef", False),
        ("", False),
    ],
)
def test_has_marker(text: str, expected: bool) -> None:
    assert has_marker(text) is expected


def test_extract_keys_in_order_of_first_appearance_without_repeats() -> None:
    text = f"a {marker(K2)} b {marker(K1)} c {marker(K2)} <<ccr:BAD>> {marker(K3)} {marker(K1)}"
    assert extract_keys(text) == [K2, K1, K3]
    assert extract_keys("no markers here") == []


@settings(max_examples=60)
@given(st.lists(st.sampled_from([K1, K2, K3]), max_size=8), st.text(alphabet="ab <>:", max_size=20))
def test_extract_keys_matches_first_appearances(keys: list[str], filler: str) -> None:
    text = filler.join(marker(k) for k in keys)
    assert extract_keys(text) == list(dict.fromkeys(keys))


# -- put / archive / get on both stores ------------------------------------------------------


def test_store_satisfies_the_archive_protocol(store: Archive) -> None:
    assert isinstance(store, Archive)


def test_put_returns_the_content_key_and_get_returns_the_original(store: Archive) -> None:
    content = "a long tool result\n" * 50 + "héllo 🌍"
    key = store.put(content)
    assert key == archive_key(content)
    assert key in store
    assert store.get(key) == content


def test_put_is_idempotent(store: Archive) -> None:
    first = store.put("same content")
    second = store.put("same content")
    assert first == second
    assert len(store) == 1  # type: ignore[arg-type]


def test_archive_refuses_content_that_already_carries_a_marker(store: Archive) -> None:
    key = store.archive("original body")
    assert key == archive_key("original body")
    stub = (
        "[Old tool result cleared — 1 lines, 13 chars, text]\n"
        f"[full content recoverable via @recall {marker(key)}]"
    )
    assert store.archive(stub) is None
    assert archive_key(stub) not in store
    assert len(store) == 1  # type: ignore[arg-type]


def test_put_stores_even_marked_content(store: Archive) -> None:
    content = f"summary mentioning {marker(K1)}"
    assert store.get(store.put(content)) == content


def test_unknown_or_malformed_key_is_absent(store: Archive) -> None:
    assert store.get(K1) is None
    assert K1 not in store
    assert store.get("not-a-key") is None
    assert 42 not in store


def test_memory_archive_keeps_the_very_same_string_object() -> None:
    store = MemoryArchive()
    content = "x" * 10_000
    assert store.get(store.put(content)) is content


@settings(max_examples=40)
@given(st.text(max_size=300))
def test_memory_round_trip_any_text(content: str) -> None:
    store = MemoryArchive()
    key = store.put(content)
    assert store.get(key) == content
    assert (store.archive(content + marker(K1)) is None) is True


# -- lenient recall ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (marker(K1), [K1]),
        (f"ccr:{K1}", [K1]),
        (K1, [K1]),
        (f"@recall {marker(K1)}", [K1]),
        (f"  {K1.upper()}  ", [K1]),
        (f"<<CCR:{K1}>>", [K1]),
        (f"{K1} {K2}", [K1, K2]),
        (f"{marker(K2)}, ccr:{K1}; {K2}", [K2, K1]),
        (json.dumps({"key": K1}), [K1]),
        (json.dumps({"keys": [K1, K2]}), [K1, K2]),
        (json.dumps({"keys": f"{K2}, {K1}"}), [K2, K1]),
        (json.dumps({"marker": marker(K1)}), [K1]),
        (json.dumps({"markers": [marker(K1), marker(K2)]}), [K1, K2]),
        (json.dumps({"ccr": K2}), [K2]),
        (json.dumps({"id": f"ccr:{K1}"}), [K1]),
        (json.dumps([K1, marker(K2)]), [K1, K2]),
        ('{"key": "' + K1 + '", broken json', [K1]),
        (json.dumps({"query": f"@recall {marker(K2)}"}), [K2]),
        (json.dumps({"args": {"key": K1}}), [K1]),
        (f"[full content recoverable via @recall {marker(K1)}]", [K1]),
    ],
)
def test_recall_accepts_every_documented_form(query: str, expected: list[str]) -> None:
    store = MemoryArchive()
    originals = {K1: "first original", K2: "second original"}
    store._entries.update(originals)  # place known content under fixed keys
    result = recall(store, query)
    assert list(result.found) == expected
    assert result.found == {k: originals[k] for k in expected}
    assert result.missing == ()
    assert result.text == "\n\n".join(originals[k] for k in expected)


@pytest.mark.parametrize(
    "query",
    ["", "   ", "{", "[[[[", '{"key": 5}', '{"other": "x"}', "a" * 64, "[" * 5000, "deadbeef", "ccr:"],
)
def test_recall_of_nothing_recognisable_is_empty_and_never_raises(query: str) -> None:
    result = recall(MemoryArchive(), query)
    assert result.found == {}
    assert result.missing == ()
    assert result.text == ""


def test_recall_reports_unknown_keys_with_the_exact_text(store: Archive) -> None:
    key = store.put("kept content")
    result = recall(store, f"{marker(key)} {marker(K3)}")
    assert result.found == {key: "kept content"}
    assert result.missing == (K3,)
    assert result.text == "kept content\n\n" + UNKNOWN_TEXT.format(key=K3)


def test_parse_recall_keys_removes_repeats() -> None:
    assert parse_recall_keys(f"{K1} {marker(K1)} ccr:{K1} {K2}") == [K1, K2]


# -- composite range entries ------------------------------------------------------------------


def dropped_range() -> list[Message]:
    return [
        Message.user("fix the bug in ünïcode — please"),
        Message.assistant("", tool_calls=[ToolCall("c1", "read_file", '{"path": "a.py"}'),
                                          ToolCall("c2", "grep", "{}")]),
        Message.tool("c1", "line 1\n\n\nline 4 <<ccr:0123456789abcdef>> stays a marker"),
        Message.tool("c2", "{}"),
        Message.assistant("see the diagram", images=(Image(url="https://example.com/d.png"),)),
        Message.user("and this one", images=(Image(data="aGk=", media_type="image/jpeg"),)),
        Message.assistant("done", name="coder"),
    ]


class RecordingStore:
    """A plain Archive (no put_keyed) over a MemoryArchive that logs what it is asked to store."""

    def __init__(self) -> None:
        self.inner = MemoryArchive()
        self.puts: list[str] = []

    def put(self, content: str) -> str:
        self.puts.append(content)
        return self.inner.put(content)

    def archive(self, content: str) -> str | None:
        return None if has_marker(content) else self.put(content)

    def get(self, key: str) -> str | None:
        return self.inner.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self.inner


class KeyedRecordingStore(RecordingStore):
    """The same with the pre-keyed fast path: logs each batch."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[tuple[str, str]]] = []

    def put_keyed(self, entries: list[tuple[str, str]]) -> None:
        self.batches.append(list(entries))
        self.puts.append("<batch>")
        self.inner.put_keyed(entries)


def test_range_recall_gives_back_the_rendered_transcript(store: Archive) -> None:
    messages = dropped_range()
    key = archive_range(store, messages)
    result = recall(store, f"@recall {marker(key)}")
    assert result.found == {key: render_transcript(messages)}
    assert result.missing == ()
    assert result.text.startswith("[user]: fix the bug in ünïcode — please\n\n[assistant]: \n"
                                  '[tool_call c1 read_file: {"path": "a.py"}]\n[tool_call c2 grep: {}]\n\n')


def test_range_entry_is_a_small_index_of_member_markers_keyed_by_its_own_sha256() -> None:
    store = MemoryArchive()
    answer = Message.assistant("a" * 50_000, tool_calls=[ToolCall("x", "f", "{}")])
    messages = [Message.user("u" * 100_000), answer]
    key = archive_range(store, messages)
    index = store.get(key)
    assert index == (
        RANGE_HEADER % 2
        + f"[user]: {marker(archive_key('u' * 100_000))}\n\n"
        + f"[assistant]: {marker(archive_key('a' * 50_000))}\n"
        + f"[tool_call x f: {marker(archive_key('{}'))}]\n\n"
    )
    assert index.startswith("[ccr range of 2 messages]\n")
    assert key == archive_key(index) and len(index) < 200
    assert store.get(archive_key("u" * 100_000)) == "u" * 100_000


def test_range_members_are_stored_before_the_index() -> None:
    plain, keyed = RecordingStore(), KeyedRecordingStore()
    messages = dropped_range()
    plain_key, keyed_key = archive_range(plain, messages), archive_range(keyed, messages)
    assert plain_key == keyed_key
    # without put_keyed: one put per distinct member ("{}" appears twice), then the index, last
    texts = [t for m in messages for t in (m.content, *(c.arguments for c in m.tool_calls))]
    members = list(dict.fromkeys(texts))
    assert plain.puts == [*members, plain.get(plain_key)]
    # with put_keyed: one batch of (key, content) pairs, then the index
    assert keyed.puts == ["<batch>", keyed.get(keyed_key)]
    assert all(key == archive_key(content) for key, content in keyed.batches[0])


def test_range_members_are_durable_before_the_index_on_disk(tmp_path: Path) -> None:
    messages = dropped_range()
    with DiskArchive(tmp_path / "ccr.sqlite") as disk:
        key = archive_range(disk, messages)
    with sqlite3.connect(tmp_path / "ccr.sqlite") as conn:
        order = [k for (k,) in conn.execute("SELECT key FROM entries ORDER BY access_seq")]
    conn.close()
    members = {archive_key(t) for m in messages for t in (m.content, *(c.arguments for c in m.tool_calls))}
    assert order[-1] == key and set(order[:-1]) == members
    with DiskArchive(tmp_path / "ccr.sqlite") as disk:
        assert recall(disk, key).found[key] == render_transcript(messages)


def test_nested_range_keeps_the_inner_marker_and_expands_one_level() -> None:
    store = MemoryArchive()
    older = dropped_range()[:3]
    inner = archive_range(store, older)
    notice = Message.user(f"[CONTEXT TRUNCATED: 3 messages removed] {marker(inner)}", is_summary=True)
    outer_messages = [notice, Message.assistant("later work")]
    outer = archive_range(store, outer_messages)
    outer_text = recall(store, marker(outer)).found[outer]
    assert outer_text == render_transcript(outer_messages)
    assert marker(inner) in outer_text and "fix the bug" not in outer_text  # recalled in turn, not inlined
    assert recall(store, marker(inner)).found[inner] == render_transcript(older)
    # a member whose text is itself an index is given back as stored: expansion stops at one level
    index_text = store.get(inner)
    assert index_text is not None
    holder = [Message.user(index_text)]
    wrapped = archive_range(store, holder)
    assert recall(store, wrapped).found[wrapped] == render_transcript(holder)


def test_range_with_unknown_members_names_them_in_place_and_as_missing() -> None:
    full = MemoryArchive()
    messages = [Message.user("kept"), Message.assistant("evicted"), Message.user("kept too")]
    key = archive_range(full, messages)
    partial = MemoryArchive()
    partial.put(full.get(key) or "")
    partial.put("kept")
    partial.put("kept too")
    gone = archive_key("evicted")
    result = recall(partial, marker(key))
    unknown = UNKNOWN_TEXT.format(key=gone)
    assert result.found == {key: f"[user]: kept\n\n[assistant]: {unknown}\n\n[user]: kept too\n\n"}
    assert result.missing == (gone,)
    assert result.text == f"{result.found[key]}\n\n{unknown}"


def test_range_recall_on_disk_reports_an_evicted_member(tmp_path: Path) -> None:
    path = tmp_path / "ccr.sqlite"
    messages = [Message.user("first"), Message.assistant("second")]
    with DiskArchive(path) as disk:
        key = archive_range(disk, messages)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM entries WHERE key = ?", (archive_key("second"),))
    conn.close()
    with DiskArchive(path) as disk:
        result = recall(disk, key)
    assert result.missing == (archive_key("second"),)
    assert result.found[key].startswith("[user]: first\n\n[assistant]: [ccr:")


@pytest.mark.parametrize(
    "odd",
    [
        Message.assistant("", tool_calls=[ToolCall("id\nwith break", "f", "{}")]),
        Message.assistant("", tool_calls=[ToolCall("c", f"name{marker(K1)}", "{}")]),
        Message.user("look", images=(Image(url=f"https://x/{marker(K2)}.png"),)),
    ],
)
def test_range_with_ambiguous_labels_is_stored_as_a_plain_transcript(odd: Message) -> None:
    store = MemoryArchive()
    messages = [Message.user("before"), odd]
    key = archive_range(store, messages)
    assert store.get(key) == render_transcript(messages)
    assert recall(store, key).found[key] == render_transcript(messages)


@pytest.mark.parametrize(
    "entry",
    [
        f"[ccr range of 1 messages]\nnot an index {marker(K1)}",
        f"[ccr range of 2 messages]\n[user]: {marker(K1)}\n\n",  # the count does not match
        f"[ccr range of 1 messages]\n[user]: {marker(K1)}\n\ntrailing text",
        f"[ccr range of 1 messages]\n[robot]: {marker(K1)}\n\n",
    ],
)
def test_text_that_only_looks_like_an_index_is_recalled_as_is(entry: str) -> None:
    store = MemoryArchive()
    store._entries[K1] = "member"  # place a member under a fixed key
    key = store.put(entry)
    assert recall(store, key).found[key] == entry


safe_label = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n<"), max_size=12)
messages_strategy = st.lists(
    st.builds(
        Message,
        role=st.sampled_from(["system", "user", "assistant", "tool"]),
        content=st.text(max_size=80) | st.sampled_from(["", marker(K1), "\n\n", RANGE_HEADER % 1]),
    ).flatmap(
        lambda m: st.lists(st.builds(ToolCall, safe_label, safe_label, st.text(max_size=40)), max_size=2).map(
            lambda calls: m.replace(tool_calls=tuple(calls)) if m.role == "assistant" else m
        )
    ),
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(messages_strategy)
def test_range_round_trip_equals_the_rendered_transcript(messages: list[Message]) -> None:
    store = MemoryArchive()
    key = archive_range(store, messages)
    result = recall(store, key)
    assert result.found == {key: render_transcript(messages)} and result.missing == ()


def counting_hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    hashed: list[str] = []
    real = archive_module.archive_key

    def counted(content: str) -> str:
        hashed.append(content)
        return real(content)

    monkeypatch.setattr(archive_module, "archive_key", counted)
    return hashed


def test_archive_message_hashes_once_per_message_object(monkeypatch: pytest.MonkeyPatch) -> None:
    hashed = counting_hashes(monkeypatch)
    msg = Message.assistant("a long answer", tool_calls=[ToolCall("c", "f", '{"x": 1}')])
    first, second = MemoryArchive(), MemoryArchive()
    key = archive_message(first, msg)
    assert key == archive_key("a long answer") and first.get(key) == "a long answer"
    assert hashed == ["a long answer", '{"x": 1}']
    assert archive_message(first, msg) == key and archive_message(second, msg) == key
    assert second.get(key) == "a long answer"
    assert len(hashed) == 2  # the cached keys served both stores
    range_key = archive_range(first, [msg])
    assert hashed[2:] == [first.get(range_key)]  # only the small index is hashed
    archive_message(first, msg.replace(name="copy"))  # a new message object: hashed anew
    assert hashed[3:] == ["a long answer", '{"x": 1}']


def test_cutting_messages_archived_on_entry_hashes_only_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryArchive()
    messages = [Message.user("x" * 10_000 + str(i)) for i in range(50)]
    for msg in messages:
        archive_message(store, msg)  # when each message entered the history
    hashed = counting_hashes(monkeypatch)
    key = archive_range(store, messages)
    assert hashed == [store.get(key)]
    assert recall(store, key).found[key] == render_transcript(messages)


def test_read_original_expands_a_range_and_returns_plain_entries_as_stored(store: Archive) -> None:
    messages = dropped_range()
    range_key = archive_range(store, messages)
    plain_key = store.put("plain text with a marker " + marker(range_key))
    assert read_original(store, range_key) == render_transcript(messages)
    assert read_original(store, plain_key) == "plain text with a marker " + marker(range_key)
    assert read_original(store, K3) is None


def test_put_entries_uses_put_keyed_or_falls_back_to_put(store: Archive) -> None:
    entries = [(archive_key("one"), "one"), (archive_key("two"), "two"), (archive_key("one"), "one")]
    put_entries(store, entries)
    assert store.get(archive_key("one")) == "one" and store.get(archive_key("two")) == "two"
    plain = RecordingStore()
    put_entries(plain, entries)
    assert plain.puts == ["one", "two"]


def test_disk_archive_still_satisfies_the_protocol_without_put_keyed(disk: DiskArchive) -> None:
    assert isinstance(disk, Archive) and not hasattr(disk, "put_keyed")
    assert isinstance(MemoryArchive(), Archive)


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
        assert store.stats().entries == 2  # the lazy get removed it
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
from ctxrecover.disk_archive import DiskArchive
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
