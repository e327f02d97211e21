"""Tool-call / tool-result pairing repair (SPEC §3.1)."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover.archive import MemoryArchive, recall
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.pairing import PairingReport, repair_pairing, validate_pairing

SYNTHETIC_TEXT = (
    "[Tool result missing — the tool execution was interrupted or failed silently. "
    "Do NOT retry this tool call. Analyze what went wrong and try a different approach.]"
)


def call(call_id: str, name: str = "web_fetch") -> ToolCall:
    return ToolCall(call_id, name, json.dumps({"id": call_id}))


def asst(*ids: str, content: str = "") -> Message:
    return Message.assistant(content, tool_calls=[call(i) for i in ids])


def result(call_id: str, content: str | None = None) -> Message:
    return Message.tool(call_id, content if content is not None else f"result of {call_id}")


def is_synthetic(msg: Message, call_id: str) -> bool:
    return (
        msg.role == "tool"
        and msg.tool_call_id == call_id
        and msg.content == SYNTHETIC_TEXT
        and msg.is_error
        and msg.error_code == "missing_result"
    )


def repaired(history: list[Message], **kw: object) -> tuple[list[Message], PairingReport]:
    snapshot = copy.deepcopy(history)
    out, report = repair_pairing(history, **kw)  # type: ignore[arg-type]
    assert history == snapshot, "repair_pairing mutated its input"
    assert validate_pairing(out)
    again, second = repair_pairing(out)
    assert again is out and not second.changed, "repair is not idempotent"
    return out, report


def test_valid_history_is_returned_unchanged_as_the_same_object() -> None:
    history = [
        Message.system("sys"),
        Message.user("go"),
        asst("a", "b"),
        result("b"),  # adjacent results out of order are valid
        result("a"),
        Message.assistant("done"),
    ]
    out, report = repair_pairing(history)
    assert out is history
    assert report == PairingReport() and not report.changed
    assert validate_pairing(history)


def test_duplicate_ids_across_turns_with_second_block_dangling_get_two_synthetics() -> None:
    history = [
        Message.user("go"),
        asst("web_fetch:0"),
        result("web_fetch:0"),
        Message.user("more"),
        asst("web_fetch:0", "web_fetch:1"),
    ]
    out, report = repaired(history)
    assert report.synthetic_results == 2
    assert out[:4] == history[:4]
    assert is_synthetic(out[5], "web_fetch:0") and is_synthetic(out[6], "web_fetch:1")
    assert out[5].name == "web_fetch"


def test_dangling_first_block_with_later_block_answered_gets_synthetics_after_the_first_block() -> None:
    history = [
        Message.user("go"),
        asst("x:0", "x:1"),
        Message.user("hm?"),
        asst("x:0"),
        result("x:0"),
    ]
    out, report = repaired(history)
    assert report.synthetic_results == 2 and report.orphans_removed == 0
    assert [m.role for m in out] == ["user", "assistant", "tool", "tool", "user", "assistant", "tool"]
    assert is_synthetic(out[2], "x:0") and is_synthetic(out[3], "x:1")
    assert out[6] == result("x:0")


def test_interposed_user_message_is_moved_after_the_relocated_results() -> None:
    feedback = Message.user("[tool feedback]", agent_feedback=True)
    history = [Message.user("go"), asst("a", "b"), feedback, result("a"), result("b")]
    out, report = repaired(history)
    assert report.relocated == 2 and report.synthetic_results == 0
    assert out == [history[0], history[1], result("a"), result("b"), feedback]


def test_orphan_result_is_archived_first_and_a_note_with_its_marker_takes_its_place() -> None:
    archive = MemoryArchive()
    ghost = result("ghost:0", "ghost output")
    history = [
        Message.user("go"),
        asst("a"),
        result("a"),
        ghost,
        Message.user("next"),
        Message.assistant("ok"),
    ]
    out, report = repaired(history, archive=archive)
    assert report.orphans_removed == 1
    (key,) = report.archived_keys
    note = (
        "[1 unpaired tool item(s) removed by pairing repair — "
        f"full transcript recoverable via @recall <<ccr:{key}>>]"
    )
    # the note follows the block the orphan was in (after its interposed user message)
    assert out[:3] == history[:3] and out[3] == history[4] and out[5] == history[5]
    assert out[4].role == "user" and out[4].content == note and out[4].is_summary and out[4].summary_of == 1
    assert recall(archive, out[4].content).text == "[tool]: ghost output\n[tool_result ghost:0]\n\n"


def test_leading_orphans_are_noted_where_they_were() -> None:
    archive = MemoryArchive()
    history = [Message.system("s"), result("x", "early"), result("y", "output"), Message.user("go")]
    out, report = repaired(history, archive=archive)
    assert [m.content for m in (out[0], out[2])] == ["s", "go"] and report.orphans_removed == 2
    assert recall(archive, out[1].content).text == (
        "[tool]: early\n[tool_result x]\n\n[tool]: output\n[tool_result y]\n\n"
    )


def test_orphan_without_archive_is_still_removed() -> None:
    out, report = repaired([Message.user("go"), result("ghost:0")])
    assert report.orphans_removed == 1 and report.archived_keys == ()
    assert out == [Message.user("go")]


def test_partial_results_get_synthetics_in_call_order() -> None:
    history = [Message.user("go"), asst("a", "b", "c"), result("b")]
    out, report = repaired(history)
    assert report.synthetic_results == 2
    assert is_synthetic(out[2], "a")
    assert out[3] == result("b")
    assert is_synthetic(out[4], "c")


def test_intra_message_duplicate_call_is_pruned_keeping_the_first() -> None:
    archive = MemoryArchive()
    first, duplicate = ToolCall("a", "ls", '{"dir": "/"}'), ToolCall("a", "ls", '{"dir": "/tmp"}')
    history = [
        Message.user("go"),
        Message.assistant("", tool_calls=[first, duplicate]),
        result("a"),
    ]
    out, report = repaired(history, archive=archive)
    assert report.duplicate_calls_pruned == 1 and report.synthetic_results == 0
    assert out[1].tool_calls == (first,) and out[2] == result("a")
    assert recall(archive, out[3].content).text == '[assistant]: \n[tool_call a ls: {"dir": "/tmp"}]\n\n'


def test_result_beyond_the_next_assistant_gives_one_synthetic_and_one_orphan() -> None:
    history = [Message.user("go"), asst("a"), Message.assistant("thinking"), result("a")]
    out, report = repaired(history)
    assert report.synthetic_results == 1 and report.orphans_removed == 1
    assert [m.role for m in out] == ["user", "assistant", "tool", "assistant"]
    assert is_synthetic(out[2], "a")


def test_empty_id_call_is_pruned_and_a_second_pass_reports_nothing() -> None:
    history = [
        Message.user("go"),
        Message.assistant("", tool_calls=[ToolCall("", "ls"), call("a")]),
        result("a"),
    ]
    out, report = repaired(history)
    assert report.empty_ids_pruned == 1 and report.changed
    assert out[1].tool_calls == (call("a"),)
    again, second = repair_pairing(out)
    assert again is out and second == PairingReport()


def test_repair_keeps_tool_call_id_name_and_flags_of_claimed_results() -> None:
    kept = Message.tool("a", "x", name="web_fetch", is_error=True, error_code="timeout")
    history = [Message.user("go"), asst("a"), Message.user("fb"), kept]
    out, _ = repaired(history)
    assert out[2] is kept


@pytest.mark.parametrize(
    ("history", "valid"),
    [
        ([Message.user("hi"), Message.assistant("hello")], True),
        ([result("a")], False),
        ([Message.assistant("no calls"), result("a")], False),
        ([asst("a"), result("a"), result("a")], False),
        ([asst("a", "a"), result("a")], False),
        ([asst(""), result("")], False),
        ([asst("a"), Message.user("x"), result("a")], False),
        ([asst("a", "b"), result("b"), result("a")], True),
    ],
)
def test_validate_pairing_cases(history: list[Message], valid: bool) -> None:
    assert validate_pairing(history) is valid


# -- property: repair is idempotent and always yields a valid history -------------------

IDS = st.sampled_from(["a", "b", "web_fetch:0", ""])
MESSAGES = st.one_of(
    st.builds(lambda ids: asst(*ids), st.lists(IDS, max_size=3)),
    st.builds(lambda i: result(i), IDS),
    st.just(Message.user("u")),
    st.just(Message.user("fb", agent_feedback=True)),
    st.just(Message.assistant("plain")),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(MESSAGES, max_size=12))
def test_repair_is_idempotent_and_valid_for_random_histories(history: list[Message]) -> None:
    snapshot = copy.deepcopy(history)
    store = MemoryArchive()
    once, _ = repair_pairing(history, archive=store)
    assert history == snapshot
    assert validate_pairing(once)
    twice, report = repair_pairing(once)
    assert twice == once and not report.changed
    kept = [m for m in history if m.role in ("user", "system")]
    notes = [m for m in once if m.content.startswith("[") and "removed by pairing repair" in m.content]
    assert [m for m in once if m.role in ("user", "system") and m not in notes] == kept, (
        "repair never drops non-tool messages"
    )
    orphans = [m for m in history if m.role == "tool" and m not in once]
    recalled = "".join(recall(store, note.content).text for note in notes)
    assert all(f"[tool]: {m.content}\n[tool_result {m.tool_call_id}]" in recalled for m in orphans)
    assert sum(m.role == "assistant" for m in once) == sum(m.role == "assistant" for m in history)


# -- property: the one-loop validate_pairing equals the block-scan it replaced ----------------


def block_scan_validate(history: list[Message]) -> bool:
    """The earlier validate_pairing (a scan that consumes each assistant's run of results), kept as
    the reference the faster single loop must equal."""
    n = len(history)
    i = 0
    while i < n:
        msg = history[i]
        if msg.role == "tool":
            return False
        i += 1
        if msg.role != "assistant" or not msg.tool_calls:
            continue
        pending = {c.id for c in msg.tool_calls}
        if "" in pending or len(pending) != len(msg.tool_calls):
            return False
        while i < n and history[i].role == "tool":
            call_id = history[i].tool_call_id
            if call_id not in pending:
                return False
            pending.remove(call_id)
            i += 1
        if pending:
            return False
    return True


EXTRA = st.one_of(MESSAGES, st.just(Message("tool", "no id")), st.just(Message.system("s")))


@st.composite
def nearly_valid_histories(draw: st.DrawFn) -> list[Message]:
    """A repaired (valid) history, then up to two edits that may break it: a message inserted,
    removed or swapped with its neighbour."""
    history = list(repair_pairing(draw(st.lists(MESSAGES, max_size=14)))[0])
    for _ in range(draw(st.integers(0, 2))):
        edit = draw(st.sampled_from(["insert", "remove", "swap"]))
        at = draw(st.integers(0, len(history)))
        if edit == "insert":
            history.insert(at, draw(EXTRA))
        elif history and at < len(history):
            if edit == "remove":
                del history[at]
            elif at + 1 < len(history):
                history[at], history[at + 1] = history[at + 1], history[at]
    return history


@settings(max_examples=400, deadline=None)
@given(st.one_of(nearly_valid_histories(), st.lists(EXTRA, max_size=12)))
def test_validate_pairing_equals_the_block_scan(history: list[Message]) -> None:
    assert validate_pairing(history) is block_scan_validate(history)
