"""Composite range entries: a dropped range archived as one index of member markers (SPEC §4, §6)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxrecover.archive.ranges as ranges_module
import ctxrecover.archive.store as store_module
from ctxrecover.archive import (
    RANGE_HEADER,
    Archive,
    MemoryArchive,
    archive_key,
    archive_message,
    archive_range,
    has_marker,
    marker,
    member_keys,
    put_entries,
    read_original,
    recall,
    render_transcript,
)
from ctxrecover.archive.disk import DiskArchive
from ctxrecover.messages import Image, Message, ToolCall

K1 = "0123456789abcdef"


K2 = "fedcba9876543210"


K3 = "00000000deadbeef"


UNKNOWN_TEXT = "[ccr:{key} — unknown or evicted: nothing is archived under this key]"


# -- composite range entries ------------------------------------------------------------------


def dropped_range() -> list[Message]:
    return [
        Message.user("fix the bug in ünïcode — please"),
        Message.assistant(
            "", tool_calls=[ToolCall("c1", "read_file", '{"path": "a.py"}'), ToolCall("c2", "grep", "{}")]
        ),
        Message.tool("c1", "line 1\n\n\nline 4 <<ccr:0123456789abcdef>> stays a marker"),
        Message.tool("c2", "{}"),
        Message.assistant("see the diagram", images=(Image(url="https://example.com/d.png"),)),
        Message.user("and this one", images=(Image(data="aGk=", media_type="image/jpeg"),)),
        Message.assistant("done", name="coder"),
    ]


def member_texts(messages: list[Message]) -> list[str]:
    """What a range stores besides its index: contents, arguments, inline image data (distinct, in order)."""
    texts = [
        text
        for m in messages
        for text in (m.content, *(c.arguments for c in m.tool_calls), *(i.data for i in m.images if i.data))
    ]
    return list(dict.fromkeys(texts))


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
    assert result.text.startswith(
        "[user]: fix the bug in ünïcode — please\n\n[assistant]: \n"
        '[tool_call c1 read_file: {"path": "a.py"}]\n[tool_call c2 grep: {}]\n\n'
    )


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
    assert plain.puts == [*member_texts(messages), plain.get(plain_key)]
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
    members = {archive_key(t) for t in member_texts(messages)}
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
    real = ranges_module.archive_key

    def counted(content: str) -> str:
        hashed.append(content)
        return real(content)

    for module in (ranges_module, store_module):  # range members, and the index a store puts
        monkeypatch.setattr(module, "archive_key", counted)
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


def test_disk_archive_stores_a_range_s_members_in_one_batch(
    disk: DiskArchive, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(disk, Archive) and isinstance(MemoryArchive(), Archive)
    batches: list[int] = []
    real = DiskArchive.put_keyed

    def counted(self: DiskArchive, entries: list[tuple[str, str]], **kw: object) -> None:
        batches.append(len(dict(entries)))
        real(self, entries, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(DiskArchive, "put_keyed", counted)
    messages = dropped_range()
    key = archive_range(disk, messages)
    assert batches == [len(member_texts(messages))]
    assert recall(disk, key).found[key] == render_transcript(messages)


# -- property: the C-level entry fetch stores exactly what the per-message loop stored -----------


def loop_archive_range(store: MemoryArchive, messages: list[Message]) -> str:
    """archive_range as it was (one Python step per message), the reference for the faster fetch."""
    from itertools import chain
    from operator import itemgetter

    cache = ranges_module._RANGE_ENTRY_CACHE
    entries = [m._cache.get(cache) or ranges_module.range_entry(m) for m in messages]
    blocks = list(map(itemgetter(0), entries))
    if None in blocks:
        images = [(archive_key(i.data), i.data) for m in messages for i in m.images if i.data is not None]
        if images:
            store.put_keyed(images)
        return store.put(render_transcript(messages))
    store.put_keyed(list(chain.from_iterable(map(itemgetter(1), entries))))
    return store.put(ranges_module.RANGE_HEADER % len(messages) + "".join(blocks))


RANGE_MESSAGES = st.one_of(
    st.builds(Message.user, st.text(max_size=8)),
    st.builds(
        lambda text, ids: Message.assistant(text, tool_calls=[ToolCall(i, "ls", "{}") for i in ids]),
        st.text(max_size=8),
        st.lists(st.sampled_from(["a", "b", "x\ny", "<<ccr:"]), max_size=2, unique=True),
    ),
    st.builds(lambda i, text: Message.tool(i, text), st.sampled_from(["a", "b\n"]), st.text(max_size=8)),
    st.builds(lambda data: Message.user("img", images=[Image(data=data)]), st.sampled_from(["QUJD", "REVG"])),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(RANGE_MESSAGES, st.booleans()), max_size=10))
def test_archive_range_equals_the_per_message_loop(pairs: list[tuple[Message, bool]]) -> None:
    messages = [msg for msg, _ in pairs]
    for msg, memoized in pairs:  # some keys memoized on append, the others hashed at the cut
        if memoized:
            member_keys(msg)
    fast, slow = MemoryArchive(), MemoryArchive()
    assert archive_range(fast, messages) == loop_archive_range(slow, messages)
    assert {k: fast.get(k) for k in fast.keys()} == {k: slow.get(k) for k in slow.keys()}
