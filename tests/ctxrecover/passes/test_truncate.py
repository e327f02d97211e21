"""Truncation building blocks: head/tail cuts, snapping, emergency truncation, keep-last, caps."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxrecover.archive.ranges as ranges_module
import ctxrecover.archive.store as store_module
from ctxrecover.archive import (
    RANGE_HEADER,
    MemoryArchive,
    archive_key,
    archive_message,
    extract_keys,
    marker,
    recall,
)
from ctxrecover.archive.disk import DiskArchive
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.truncate import (
    cap_assistant_messages,
    emergency_truncate,
    keep_last,
    leading_system_count,
    recall_suffix,
    recall_suffix_key,
    render_transcript,
    snap_to_tool_boundary,
    truncate_head_tail,
)

# -- helpers -------------------------------------------------------------------


def reachable_texts(history: list[Message], store: MemoryArchive) -> list[str]:
    """Every message text of ``history`` plus every archive entry reachable from its markers."""
    texts = [m.content for m in history]
    texts += [c.arguments for m in history for c in m.tool_calls]
    pending = [k for t in texts for k in extract_keys(t)]
    seen: set[str] = set()
    while pending:
        key = pending.pop()
        if key in seen:
            continue
        seen.add(key)
        found = recall(store, f"<<ccr:{key}>>").found
        assert key in found, f"marker {key} points at nothing"
        texts.append(found[key])
        pending += extract_keys(found[key])
    return texts


def assert_nothing_lost(original: list[Message], output: list[Message], store: MemoryArchive) -> None:
    texts = reachable_texts(output, store)
    for msg in original:
        pieces = [msg.content] + [c.arguments for c in msg.tool_calls]
        for piece in pieces:
            assert any(piece in t for t in texts), f"lost: {piece[:60]!r}"


def call(call_id: str, name: str = "read_file") -> ToolCall:
    return ToolCall(call_id, name, f'{{"path": "{call_id}.py"}}')


def agent_history() -> list[Message]:
    return [
        Message.system("You are a coding agent."),
        Message.system("Tool docs."),
        Message.user("fix the bug"),
        Message.assistant("looking", tool_calls=[call("a"), call("b")]),
        Message.tool("a", "A" * 50),
        Message.tool("b", "B" * 50),
        Message.assistant("found it"),
        Message.user("great, now test"),
        Message.assistant("", tool_calls=[call("c")]),
        Message.tool("c", "C" * 50),
        Message.assistant("tests pass"),
    ]


# -- truncate_head_tail ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "limit", "kwargs", "expected"),
    [
        ("short", 10, {}, "short"),
        ("abcdefghijklmnopqrstuvwxyz", 26, {}, "abcdefghijklmnopqrstuvwxyz"),
        ("a b c d e f g h i j k l m n", 24, {}, "a \n... [truncated] ...\nn"),
        ("a b c d e f g h i j k l m n", 25, {"head_ratio": 0.5}, "a \n... [truncated] ...\n n"),
        ("ab cd ef gh ij", 9, {"separator": "<%d>"}, "ab <9>ij"),
        ("a b c d e f", 5, {"separator": "..."}, "a...f"),
        # a cut never splits a word: the head and the tail keep a little less instead
        ("alpha beta gamma delta epsilon zeta", 34, {}, "alpha \n... [truncated] ...\nzeta"),
        ("abcdefghijklmnopqrstuvwxyz", 24, {}, "\n... [truncated] ...\n"),
        ("abcdefghij", 2, {"separator": "..."}, "..."),
    ],
)
def test_truncate_head_tail_keeps_head_and_tail(text: str, limit: int, kwargs: dict, expected: str) -> None:
    assert truncate_head_tail(text, limit, **kwargs) == expected


@given(st.text(max_size=300), st.integers(min_value=21, max_value=400), st.floats(0, 1))
def test_truncate_head_tail_never_exceeds_limit(text: str, limit: int, ratio: float) -> None:
    out = truncate_head_tail(text, limit, head_ratio=ratio)
    assert len(out) <= limit
    if len(text) > limit:
        head, tail = out.split("\n... [truncated] ...\n", 1)
        assert text.startswith(head) and text.endswith(tail)


def test_truncate_head_tail_counted_separator_stays_within_limit() -> None:
    words = " ".join(f"w{n:03d}" for n in range(2000))  # 10999 chars
    out = truncate_head_tail(words, 100, separator="\n[%d chars omitted]\n")
    assert len(out) <= 100
    # rooms of 57 and 20 chars, snapped back to the words' ends: 55 and 17 kept
    assert out == words[:55] + "\n[10927 chars omitted]\n" + words[-17:]


@pytest.mark.parametrize(("limit", "ratio"), [(-1, 0.5), (10, 1.5), (10, -0.1)])
def test_truncate_head_tail_rejects_bad_arguments(limit: int, ratio: float) -> None:
    with pytest.raises(ValueError, match="truncate_head_tail needs"):
        truncate_head_tail("text", limit, head_ratio=ratio)


# -- small helpers ------------------------------------------------------------------


def test_recall_suffix_exact_text() -> None:
    assert recall_suffix("0123456789abcdef") == (
        "\n[full content recoverable via @recall <<ccr:0123456789abcdef>>]"
    )


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("cut\n[full content recoverable via @recall <<ccr:0123456789abcdef>>]", "0123456789abcdef"),
        ("[full content recoverable via @recall <<ccr:0123456789abcdef>>]", None),
        ("cut\n[full content recoverable via @recall <<ccr:0123456789abcdef>>] more", None),
        ("plain text", None),
    ],
)
def test_recall_suffix_key_reads_only_a_trailing_suffix(text: str, key: str | None) -> None:
    assert recall_suffix_key(text) == key


def test_leading_system_count_counts_only_the_prefix() -> None:
    history = [Message.system("a"), Message.system("b"), Message.user("u"), Message.system("c")]
    assert leading_system_count(history) == 2
    assert leading_system_count([]) == 0


def test_render_transcript_lists_roles_tool_calls_and_result_ids() -> None:
    rendered = render_transcript(
        [Message.user("hi"), Message.assistant("ok", tool_calls=[call("a")]), Message.tool("a", "out")]
    )
    assert rendered == (
        "[user]: hi\n\n"
        '[assistant]: ok\n[tool_call a read_file: {"path": "a.py"}]\n\n'
        "[tool]: out\n[tool_result a]\n\n"
    )


# -- snap_to_tool_boundary --------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "expected", "why"),
    [
        (4, 3, "cut on the first result moves back to its assistant"),
        (5, 3, "cut on the second result moves back to its assistant"),
        (3, 3, "cut on the assistant itself stays"),
        (6, 6, "cut after the block stays"),
        (7, 7, "cut on a user message after a plain assistant stays"),
        (9, 8, "cut on the result of a content-less assistant moves back"),
        (0, 0, "start of history stays"),
        (11, 11, "end of history stays"),
    ],
)
def test_snap_moves_back_to_the_owning_assistant(index: int, expected: int, why: str) -> None:
    assert snap_to_tool_boundary(agent_history(), index) == expected, why


def test_snap_covers_a_user_message_interposed_inside_a_block() -> None:
    history = [
        Message.user("go"),
        Message.assistant("", tool_calls=[call("a")]),
        Message.user("feedback in the middle", agent_feedback=True),
        Message.tool("a", "late result"),
        Message.assistant("done"),
    ]
    assert snap_to_tool_boundary(history, 2) == 1


def test_snap_leaves_results_already_orphaned_upstream() -> None:
    history = [Message.user("go"), Message.assistant("plain"), Message.tool("x", "orphan")]
    assert snap_to_tool_boundary(history, 2) == 2


# -- emergency_truncate -------------------------------------------------------------


def test_emergency_truncate_exact_notice_and_structure() -> None:
    history = agent_history()
    snapshot = copy.deepcopy(history)
    store = MemoryArchive()
    out, report = emergency_truncate(history, 3, archive=store)
    assert history == snapshot
    key = report.archive_key
    assert key is not None
    assert out[:2] == history[:2]
    assert out[2].role == "user" and out[2].is_summary and out[2].summary_of == 6
    assert out[2].content == (
        "[CONTEXT TRUNCATED: 6 messages removed due to context window limit. "
        "Recent context preserved below.]\n"
        f"[full transcript of the dropped messages recoverable via @recall <<ccr:{key}>>]"
    )
    # the last 3 non-system messages start on a tool result: snapped back to its assistant
    assert out[3:] == history[8:]
    assert report.messages_dropped == 6 and report.verbatim_kept == 0
    assert recall(store, key).found[key] == render_transcript(history[2:8])
    assert_nothing_lost(history, out, store)


def test_emergency_truncate_reattaches_verbatim_messages_after_the_notice() -> None:
    history = [
        Message.system("sys"),
        Message.user("first"),
        Message.assistant("", tool_calls=[call("r", "recall")]),
        Message.tool("r", "RECALLED ORIGINAL", preserve_verbatim=True),
        Message.user("verbatim user text", preserve_verbatim=True),
        Message.assistant("middle"),
        Message.user("recent question"),
        Message.assistant("recent answer"),
    ]
    store = MemoryArchive()
    out, report = emergency_truncate(history, 2, archive=store)
    assert [m.role for m in out] == ["system", "user", "user", "user", "user", "assistant"]
    assert out[2] == Message.user(
        "[recalled original — tool result r, kept verbatim through compaction]\nRECALLED ORIGINAL",
        preserve_verbatim=True,
        agent_feedback=True,
    )
    assert out[3] is history[4]
    assert out[4:] == history[6:]
    assert report.messages_dropped == 3 and report.verbatim_kept == 2
    assert "[CONTEXT TRUNCATED: 3 messages removed" in out[1].content
    assert_nothing_lost(history, out, store)


def test_emergency_truncate_keeps_mid_history_system_messages_in_the_floor() -> None:
    history = [
        Message.system("floor"),
        Message.user("old"),
        Message.system("skill injected mid-run"),
        Message.assistant("old answer"),
        Message.user("new"),
        Message.assistant("new answer"),
    ]
    out, _ = emergency_truncate(history, 2, archive=MemoryArchive())
    assert [m.content for m in out if m.role == "system"] == ["floor", "skill injected mid-run"]
    assert out[0] is history[0] and out[1] is history[2]
    assert out[2].content.startswith("[CONTEXT TRUNCATED: 2 messages removed")


@pytest.mark.parametrize("keep_recent", [4, 10])
def test_emergency_truncate_with_nothing_to_drop_returns_the_input(keep_recent: int) -> None:
    history = [Message.system("s"), Message.user("a"), Message.assistant("b"), Message.user("c")]
    store = MemoryArchive()
    out, report = emergency_truncate(history, keep_recent, archive=store)
    assert out is history
    assert report.messages_dropped == 0 and report.archive_key is None
    assert len(store) == 0


def test_emergency_truncate_keep_zero_drops_every_non_system_message() -> None:
    history = agent_history()
    store = MemoryArchive()
    out, report = emergency_truncate(history, 0, archive=store)
    assert [m.role for m in out] == ["system", "system", "user"]
    assert report.messages_dropped == 9
    assert_nothing_lost(history, out, store)


def test_emergency_truncate_rejects_negative_keep_recent() -> None:
    with pytest.raises(ValueError, match="keep_recent >= 0"):
        emergency_truncate(agent_history(), -1, archive=MemoryArchive())


# -- cap_assistant_messages ---------------------------------------------------------


def test_cap_assistant_messages_cuts_head_three_quarters_and_tail() -> None:
    lines = [f"reply line {n:05d}\n" for n in range(500)]  # 17 chars each
    long_reply = "".join(lines)
    history = [
        Message.system("s"),
        Message.user("q"),
        Message.assistant(long_reply),
        Message.user("x" * 9000),
    ]
    snapshot = copy.deepcopy(history)
    store = MemoryArchive()
    out, report = cap_assistant_messages(history, archive=store)
    assert history == snapshot
    key = archive_key(long_reply)
    suffix = f"\n[full content recoverable via @recall <<ccr:{key}>>]"
    body_limit = 5000 - len(suffix)
    head = int((body_limit - len("\n... [truncated] ...\n")) * 0.75)
    tail = body_limit - len("\n... [truncated] ...\n") - head
    assert (head, tail) == (3686, 1229)  # rooms; the cut keeps the whole lines within them
    kept_head, kept_tail = "".join(lines[: 3686 // 17]), "".join(lines[-(1229 // 17) :])
    assert out[2].content == kept_head + "\n... [truncated] ...\n" + kept_tail + suffix
    assert len(out[2].content) == 4981
    assert out[3] is history[3], "only assistant messages are capped"
    assert store.get(key) == long_reply
    assert report.messages_capped == 1 and report.chars_saved == 8500 - 4981
    assert_nothing_lost(history, out, store)


def test_cap_assistant_messages_is_idempotent_and_spares_verbatim() -> None:
    history = [
        Message.user("q"),
        Message.assistant("v" * 6000, preserve_verbatim=True),
        Message.assistant("a" * 6000),
    ]
    once, _ = cap_assistant_messages(history, archive=MemoryArchive())
    assert once[1] is history[1]
    twice, report = cap_assistant_messages(once, archive=MemoryArchive())
    assert twice is once and report.messages_capped == 0


def test_cap_assistant_messages_rejects_a_cap_too_small_for_the_marker() -> None:
    with pytest.raises(ValueError, match="max_chars >= 200"):
        cap_assistant_messages([], 100, archive=MemoryArchive())


# -- keep_last ------------------------------------------------------------------------


def test_keep_last_exact_note_and_user_start() -> None:
    history = agent_history()
    snapshot = copy.deepcopy(history)
    store = MemoryArchive()
    out, report = keep_last(history, 4, archive=store)
    assert history == snapshot
    key = report.archive_key
    assert key is not None
    note = (
        f"[full transcript of the messages dropped by context recovery recoverable via @recall <<ccr:{key}>>]"
    )
    assert report.recall_note == note
    # last 4 non-system: user "great, now test", assistant, tool, assistant
    assert out == [history[0], history[1], Message.user(note, is_summary=True, summary_of=5), *history[7:]]
    assert report.messages_dropped == 5 and not report.notice_inserted
    assert recall(store, key).found[key] == render_transcript(history[2:7])
    assert_nothing_lost(history, out, store)


def test_keep_last_drops_leading_non_user_messages_of_the_window() -> None:
    history = agent_history()
    out, report = keep_last(history, 6, archive=MemoryArchive())
    # the window [tool b, assistant, user, assistant, tool, assistant] starts with a user after trimming
    assert out[3] is history[7]
    assert report.messages_dropped == 5


def test_keep_last_inserts_the_compacted_notice_when_nothing_survives() -> None:
    history = [
        Message.system("s"),
        Message.user("only user"),
        Message.assistant("", tool_calls=[call("a")]),
        Message.tool("a", "result"),
        Message.assistant("done"),
    ]
    store = MemoryArchive()
    out, report = keep_last(history, 2, archive=store)
    assert report.notice_inserted and report.messages_dropped == 4
    assert [m.role for m in out] == ["system", "user", "user"]
    assert out[2].content == (
        "[Context was automatically compacted due to size limits. Previous conversation history "
        "has been summarized. Continue from where you left off.]"
    )
    assert out[1].content == report.recall_note
    assert_nothing_lost(history, out, store)


def test_keep_last_per_message_cap_cuts_every_kept_message() -> None:
    big = "x " * 1500 + "y " * 1500
    history = [
        Message.system("S" * 9000),
        Message.user("old"),
        Message.assistant("old reply"),
        Message.user(big),
        Message.assistant(big, preserve_verbatim=True),
    ]
    store = MemoryArchive()
    out, report = keep_last(history, 2, archive=store, per_message_cap=4000)
    assert out[0] is history[0], "system messages are never capped"
    assert report.messages_capped == 2 and report.messages_dropped == 2
    assert out[1].content == report.recall_note
    for msg in out[2:]:
        assert len(msg.content) == 4000  # one-char words: every cut point is a word boundary
        assert msg.content.endswith(f"<<ccr:{archive_key(big)}>>]")
        assert "\n... [truncated] ...\n" in msg.content
    assert not out[3].preserve_verbatim, "a cut message is no longer verbatim"
    assert_nothing_lost(history, out, store)


def test_keep_last_with_nothing_to_do_returns_the_input() -> None:
    history = [Message.system("s"), Message.user("a"), Message.assistant("b")]
    out, report = keep_last(history, 10, archive=MemoryArchive())
    assert out is history
    assert report.messages_dropped == 0 and report.recall_note is None


@pytest.mark.parametrize(("n", "cap", "match"), [(1, None, "n >= 2"), (4, 100, "per_message_cap >= 200")])
def test_keep_last_rejects_bad_arguments(n: int, cap: int | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        keep_last(agent_history(), n, archive=MemoryArchive(), per_message_cap=cap)


# -- property: keep_last on random histories ------------------------------------------------

ROLES = st.sampled_from(["user", "assistant", "tool", "system"])


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    floor = [Message.system(draw(st.text(max_size=20))) for _ in range(draw(st.integers(0, 2)))]
    body: list[Message] = []
    for i in range(draw(st.integers(0, 14))):
        role = draw(ROLES)
        text = draw(st.text(alphabet="abc <>\n", max_size=60)) + f"#{i}"
        if role == "assistant" and draw(st.booleans()):
            body.append(Message.assistant(text, tool_calls=[call(f"id{i}")]))
        elif role == "tool":
            body.append(Message.tool(f"id{i - 1}", text))
        else:
            body.append(Message(role, text, preserve_verbatim=draw(st.booleans())))
    return floor + body


@settings(max_examples=150)
@given(histories(), st.integers(2, 12), st.sampled_from([None, 200, 400]))
def test_keep_last_property(history: list[Message], n: int, cap: int | None) -> None:
    snapshot = copy.deepcopy(history)
    store = MemoryArchive()
    out, report = keep_last(history, n, archive=store, per_message_cap=cap)
    assert history == snapshot
    systems = [m for m in history if m.role == "system"]
    floor = leading_system_count(out)
    assert out[:floor] == systems, "system messages byte-identical and gathered at the front"
    assert all(m.role != "system" for m in out[floor:])
    assert floor < len(out) and out[floor].role == "user", "conversation starts with a user message"
    inserted = (report.recall_note is not None) + report.notice_inserted
    if report.recall_note is not None:
        assert out[floor].content == report.recall_note
    if report.notice_inserted:
        assert out[floor + inserted - 1].content.startswith("[Context was automatically compacted")
    kept = out[floor + inserted :]
    assert len(kept) <= n
    assert not kept or kept[0].role == "user"
    if cap is not None:
        assert all(len(m.content) <= cap for m in out[floor:])
    assert_nothing_lost(history, out, store)


@settings(max_examples=150)
@given(histories(), st.integers(0, 12))
def test_emergency_truncate_property(history: list[Message], keep_recent: int) -> None:
    snapshot = copy.deepcopy(history)
    store = MemoryArchive()
    out, report = emergency_truncate(history, keep_recent, archive=store)
    assert history == snapshot
    floor = leading_system_count(history)
    assert out[:floor] == history[:floor]
    assert sorted(m.content for m in out if m.role == "system") == sorted(
        m.content for m in history if m.role == "system"
    )
    if report.messages_dropped:
        notice_at = next(i for i, m in enumerate(out) if m.content.startswith("[CONTEXT TRUNCATED:"))
        tail = out[notice_at + 1 + report.verbatim_kept :]
        assert tail == history[len(history) - len(tail) :], "the recent tail is kept verbatim"
        if tail and tail[0].role == "tool":
            prior = [m for m in history[: len(history) - len(tail)] if m.role == "assistant"]
            assert not prior or not prior[-1].tool_calls, "snapping never orphans a result"
    else:
        assert out is history
    assert_nothing_lost(history, out, store)


# -- dropped ranges are composite archive entries -------------------------------------------


def test_dropped_ranges_are_range_indexes_recalled_in_full_from_a_disk_archive(tmp_path: Path) -> None:
    history = agent_history()
    with DiskArchive(tmp_path / "ccr.sqlite") as disk:
        truncated, emergency = emergency_truncate(history, 3, archive=disk)
        kept, recovery = keep_last(history, 4, archive=disk)
        for key, dropped in ((emergency.archive_key, history[2:8]), (recovery.archive_key, history[2:7])):
            assert key is not None
            entry = disk.get(key)
            assert entry is not None and entry.startswith(RANGE_HEADER % len(dropped))
            result = recall(disk, marker(key))
            assert result.found == {key: render_transcript(dropped)} and result.missing == ()
    assert truncated[2].content.endswith(f"recoverable via @recall {marker(emergency.archive_key)}]")
    assert recovery.recall_note in kept[2].content


def test_truncating_messages_archived_on_entry_hashes_only_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    history = agent_history()
    store = MemoryArchive()
    for msg in history:
        archive_message(store, msg)  # as each message entered the history
    hashed: list[str] = []
    real = ranges_module.archive_key

    def counted(content: str) -> str:
        hashed.append(content)
        return real(content)

    for module in (ranges_module, store_module):  # range members, and the index a store puts
        monkeypatch.setattr(module, "archive_key", counted)
    _, report = emergency_truncate(history, 3, archive=store)
    assert report.archive_key is not None
    assert hashed == [store.get(report.archive_key)]  # one small index, not the dropped text


# -- property: keep_last's split by slices equals the role filter it replaced --------------------

KEEP_LAST_MESSAGES = st.sampled_from(
    [Message.system("s"), Message.user("u"), Message.assistant("a"), Message.tool("t", "r")]
).map(lambda m: m.replace(content=m.content))  # a fresh object each time: identity matters below


@settings(max_examples=200, deadline=None)
@given(st.lists(KEEP_LAST_MESSAGES, max_size=12), st.integers(2, 5))
def test_keep_last_keeps_every_system_message_in_order_and_the_filtered_tail(
    history: list[Message], n: int
) -> None:
    kept, report = keep_last(history, n, archive=MemoryArchive())
    systems = [m for m in history if m.role == "system"]
    others = [m for m in history if m.role != "system"]
    start = max(0, len(others) - n)
    while start < len(others) and others[start].role != "user":
        start += 1
    assert [id(m) for m in kept[: len(systems)]] == [id(m) for m in systems]
    assert [id(m) for m in kept[len(kept) - len(others) + start :]] == [id(m) for m in others[start:]]
    assert report.messages_dropped == start
