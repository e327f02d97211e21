"""Trim (SPEC §5 Level 1): strip reasoning, shorten tool feedback, keep the last FORMAT ERROR."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from ctxrecover.archive import MemoryArchive, archive_key, archive_range, recall
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.trim import trim_history
from ctxrecover.passes.truncate import recall_suffix
from ctxrecover.sizes import total_weight


def suffix(content: str) -> str:
    return f"\n[full content recoverable via @recall <<ccr:{archive_key(content)}>>]"


THOUGHTS = "step one\n" * 20


# -- assistant messages ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "kept"),
    [
        (f"<reasoning>{THOUGHTS}</reasoning>\nThe fix is in main.py.", "The fix is in main.py."),
        (f"Answer first.\n<EXPLANATION>{THOUGHTS}</Explanation>", "Answer first."),
        (
            f'<reasoning type="plan">\n{THOUGHTS}</reasoning >\n\n\n\nA\n\n\n\n'
            f"B<explanation>{THOUGHTS}</explanation>",
            "A\n\nB",
        ),
        (f"<Reasoning>{THOUGHTS}</REASONING>", ""),
    ],
)
def test_trim_strips_reasoning_and_explanation_blocks(
    content: str, kept: str, assert_nothing_lost_strict: Callable[..., None]
) -> None:
    history = [Message.user("q"), Message.assistant(content, tool_calls=[ToolCall("a", "ls")])]
    snapshot = copy.deepcopy(history)
    store = MemoryArchive()
    out, report = trim_history(history, archive=store)
    assert history == snapshot
    expected = (kept + suffix(content)) if kept else suffix(content).lstrip("\n")
    assert out[1].content == expected
    assert out[1].tool_calls == history[1].tool_calls
    assert store.get(archive_key(content)) == content
    assert report.messages_changed == 1
    assert report.chars_saved == len(content) - len(expected)
    assert_nothing_lost_strict(history, out, store)


def test_trim_collapses_blank_lines_with_a_recall_marker() -> None:
    content = "one" + "\n" * 200 + "two\n\n\nthree"
    store = MemoryArchive()
    out, report = trim_history([Message.assistant(content)], archive=store)
    key = archive_key(content)
    assert out[0].content == "one\n\ntwo\n\nthree" + recall_suffix(key)
    assert store.get(key) == content
    assert report.chars_saved == len(content) - len(out[0].content)


def test_trim_leaves_blank_lines_when_collapsing_would_not_pay_for_the_marker() -> None:
    history = [Message.assistant("one\n\n\n\n\ntwo\n\n\nthree")]
    store = MemoryArchive()
    out, report = trim_history(history, archive=store)
    assert out is history and report.messages_changed == 0 and len(store) == 0


def test_trim_skips_a_strip_that_would_not_save_anything() -> None:
    history = [Message.assistant("<reasoning>ok</reasoning>Short answer.")]
    store = MemoryArchive()
    out, report = trim_history(history, archive=store)
    assert out is history and report.messages_changed == 0
    assert len(store) == 0


def test_trim_leaves_unclosed_tags_alone() -> None:
    history = [Message.assistant("<reasoning>" + "never closed " * 30)]
    out, _ = trim_history(history, archive=MemoryArchive())
    assert out is history


# -- untouchable messages -------------------------------------------------------------------

BIG = f"<reasoning>{THOUGHTS}</reasoning>\n\n\n\n" + "<tool_output>" + "o" * 9000 + "</tool_output>"


@pytest.mark.parametrize(
    "msg",
    [
        Message.system(BIG),
        Message.user(BIG),
        Message.tool("a", BIG),
        Message.user(BIG, agent_feedback=True, is_summary=True, summary_of=3),
        Message.user(BIG, agent_feedback=True, preserve_verbatim=True),
        Message.assistant(BIG, preserve_verbatim=True),
        Message.assistant(BIG, is_summary=True),
    ],
    ids=["system", "real-user", "tool", "summary", "verbatim-feedback", "verbatim-asst", "summary-asst"],
)
def test_trim_never_touches_protected_messages(msg: Message) -> None:
    history = [msg]
    out, report = trim_history(history, archive=MemoryArchive())
    assert out is history and report.messages_changed == 0


# -- tool feedback ---------------------------------------------------------------------------


def test_trim_shortens_long_injected_blocks_in_feedback() -> None:
    body = "h" * 1999 + "\n" + "m" * 3999 + "\n" + "t" * 500  # head and tail end on the lines' ends
    content = f"The tool 'read' returned:\n<tool_output>{body}</tool_output>\nok"
    history = [Message.user(content, agent_feedback=True)]
    store = MemoryArchive()
    out, report = trim_history(history, archive=store)
    assert out[0].content == (
        "The tool 'read' returned:\n<tool_output>"
        + "h" * 1999
        + "\n\n\n... [4000 chars omitted] ...\n\n"
        + "t" * 500
        + "</tool_output>\nok"
        + suffix(content)
    )
    assert out[0].agent_feedback
    assert store.get(archive_key(content)) == content
    assert report.messages_changed == 1


def test_trim_leaves_short_blocks_and_short_feedback_alone() -> None:
    content = "<context>" + "c" * 4000 + "</context>"
    history = [Message.user(content, agent_feedback=True)]
    out, _ = trim_history(history, archive=MemoryArchive())
    assert out is history


def test_trim_cuts_long_feedback_to_the_limit_keeping_head_and_tail(
    assert_nothing_lost_strict: Callable[..., None],
) -> None:
    content = "--- Resultado da Ação\n" + "".join(f"row {i}\n" for i in range(3000))
    history = [Message.user(content, agent_feedback=True)]
    store = MemoryArchive()
    out, _ = trim_history(history, archive=store)
    stub = out[0].content
    assert len(stub) <= 8000
    assert stub.startswith("--- Resultado da Ação\nrow 0\n")
    assert stub.endswith("row 2999\n" + suffix(content))
    assert " chars omitted] ...\n\n" in stub
    assert_nothing_lost_strict(history, out, store)


def test_trim_respects_custom_feedback_limit() -> None:
    content = "x" * 5000
    history = [Message.user(content, agent_feedback=True)]
    out, _ = trim_history(history, archive=MemoryArchive(), feedback_max_chars=2000)
    assert len(out[0].content) <= 2000 and out[0].content.endswith(suffix(content))


def test_trim_leaves_messages_already_cut_by_a_pass() -> None:
    head = "<context>" + "a" * 6000
    stub = head + "\n\n... [9000 chars omitted] ...\n\n" + "b" * 3000 + "</context>" + suffix("original")
    history = [Message.user(stub, agent_feedback=True)]
    out, _ = trim_history(history, archive=MemoryArchive())
    assert out is history


# -- FORMAT ERROR dedup -------------------------------------------------------------------------


def test_trim_keeps_only_the_last_consecutive_format_error(
    assert_nothing_lost_strict: Callable[..., None],
) -> None:
    errors = [
        Message.user(f"FORMAT ERROR: attempt {i} had no tool call", agent_feedback=True) for i in range(3)
    ]
    history = [Message.user("task"), Message.assistant("bad"), *errors, Message.assistant("good")]
    store = MemoryArchive()
    out, report = trim_history(history, archive=store)
    key = archive_range(MemoryArchive(), errors[:2])  # the dropped ones, as one range entry
    assert [m.content for m in out] == [
        "task",
        "bad",
        "FORMAT ERROR: attempt 2 had no tool call\n"
        f"[2 earlier FORMAT ERROR message(s) recoverable via @recall <<ccr:{key}>>]",
        "good",
    ]
    assert recall(store, key).found[key] == (
        "[user]: FORMAT ERROR: attempt 0 had no tool call\n\n"
        "[user]: FORMAT ERROR: attempt 1 had no tool call\n\n"
    )
    assert report.format_errors_dropped == 2 and report.messages_changed == 3
    assert report.chars_saved == total_weight(history) - total_weight(out)
    assert_nothing_lost_strict(history, out, store)
    again, second = trim_history(out, archive=store)
    assert again is out and second.messages_changed == 0


def test_trim_keeps_format_errors_that_are_not_consecutive() -> None:
    history = [
        Message.user("FORMAT ERROR: one"),
        Message.assistant("retry"),
        Message.user("FORMAT ERROR: two"),
        Message.user("FORMAT ERROR: verbatim", preserve_verbatim=True),
    ]
    out, _ = trim_history(history, archive=MemoryArchive())
    assert out is history


# -- whole history ---------------------------------------------------------------------------------


def test_trim_whole_history_is_lossless_and_idempotent(
    assert_nothing_lost_strict: Callable[..., None],
) -> None:
    history = [
        Message.system("You are an agent.\n\n\n\nRules."),
        Message.user("please fix\n\n\n\nthe bug"),
        Message.assistant(f"<reasoning>{THOUGHTS}</reasoning>Reading.", tool_calls=[ToolCall("a", "read")]),
        Message.tool("a", "x" * 12_000),
        Message.user(
            "The tool 'exec' said:\n<tool_output>" + "y" * 12_000 + "</tool_output>", agent_feedback=True
        ),
        Message.user("FORMAT ERROR: no tool call", agent_feedback=True),
        Message.user("FORMAT ERROR: still no tool call", agent_feedback=True),
        Message.assistant("Done.\n\n\n\nBye."),
    ]
    snapshot = copy.deepcopy(history)
    store = MemoryArchive()
    out, report = trim_history(history, archive=store)
    assert history == snapshot
    assert out[0] is history[0] and out[1] is history[1] and out[3] is history[3]
    assert report.messages_changed == 4 and report.format_errors_dropped == 1
    assert report.chars_saved == total_weight(history) - total_weight(out) > 9000
    assert out[-1] is history[-1], "collapsing two blank lines would not pay for a recall marker"
    assert_nothing_lost_strict(history, out, store)
    again, second = trim_history(out, archive=store)
    assert again is out and second == second.__class__()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"feedback_max_chars": 500}, "feedback_max_chars >= 1000"),
        ({"block_max_chars": 2500}, "below block_max_chars"),
        ({"block_head_chars": -1}, "below block_max_chars"),
    ],
)
def test_trim_rejects_bad_limits(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        trim_history([], archive=MemoryArchive(), **kwargs)
