"""Microcompact (SPEC §3.3)."""

from __future__ import annotations

import copy

import pytest

from ctxrecover.archive import MemoryArchive, archive_key, extract_keys, marker, recall
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.microcompact import MicrocompactReport, apply_microcompact
from ctxrecover.passes.tool_budget import enforce_tool_result_budget
from ctxrecover.sizes import format_payload_size

SUMMARY = "[Old tool result cleared — %d lines, %d chars, %s]"
TRUNCATION = "\n[... %d chars omitted from old tool result ...]\n"
RECALL = "\n[full content recoverable via @recall %s]"

BIG = "".join(f"row {n:05d} {'x' * 30}\n" for n in range(200))  # 200 lines, each ending in "\n"; 8200 chars


def aged(message: Message, age: int) -> list[Message]:
    """``message`` answering a call, followed by ``age`` assistant messages (so it has that age)."""
    history = [Message.user("go"), Message.assistant("", tool_calls=[ToolCall("t1", "run")]), message]
    for n in range(age):
        history += [Message.assistant(f"step {n}"), Message.user(f"next {n}")]
    return history


def run(
    history: list[Message], archive: MemoryArchive | None = None, **kw: object
) -> tuple[list[Message], MicrocompactReport, MemoryArchive]:
    archive = archive if archive is not None else MemoryArchive()
    snapshot = copy.deepcopy(history)
    out, report = apply_microcompact(history, archive=archive, **kw)  # type: ignore[arg-type]
    assert history == snapshot, "microcompact mutated its input"
    again, second = apply_microcompact(out, archive=archive, **kw)  # type: ignore[arg-type]
    assert again is out and second == MicrocompactReport(), "microcompact is not idempotent"
    return out, report, archive


def test_no_op_before_turn_two() -> None:
    history = aged(Message.tool("t1", BIG), 1)
    out, report, archive = run(history)
    assert out is history and report == MicrocompactReport() and len(archive) == 0


@pytest.mark.parametrize("age", [2, 3])
def test_result_two_turns_old_becomes_head_tail_preview(age: int) -> None:
    out, report, archive = run(aged(Message.tool("t1", BIG, name="run"), age))
    stub = out[2]
    # head room 2000, tail room 500, each snapped to whole 41-char lines: 48 and 12 of them
    head, tail = BIG[: 48 * 41], BIG[-12 * 41 :]
    omitted = len(BIG) - len(head) - len(tail)
    expected = head + TRUNCATION % omitted + tail + RECALL % marker(archive_key(BIG))
    assert stub.content == expected
    assert (stub.tool_call_id, stub.name) == ("t1", "run")
    assert report == MicrocompactReport(truncated=1, summarized=0, chars_freed=len(BIG) - len(expected))
    assert recall(archive, stub.content).text == BIG


PAD = "\n" + "\n".join(["." * 60] * 60)  # 61 lines of padding, no type keywords


@pytest.mark.parametrize(
    ("start", "kind"),
    [
        ('{"items": [1, 2, 3]}', "JSON"),
        ("  [1, 2, 3]", "JSON"),
        ("// main.go\npackage main", "Go source"),
        ("#!/usr/bin/env python\nimport os", "source code"),
        ("# util.py\ndef helper():", "Python source"),
        ("// app.js\nfunction main() {}", "JavaScript source"),
        ("diff --git a/x b/x", "diff"),
        ("--- a/x\n+++ b/x", "diff"),
        ("commit 0123abcd\nAuthor: me", "git log"),
        ("hello world", "text"),
    ],
)
def test_result_four_turns_old_becomes_one_line_summary_with_its_type(start: str, kind: str) -> None:
    content = start + PAD * 2
    out, report, archive = run(aged(Message.tool("t1", content), 4))
    lines = len(content.splitlines())
    expected = SUMMARY % (lines, len(content), kind) + RECALL % marker(archive_key(content))
    assert out[2].content == expected
    assert report.summarized == 1 and report.truncated == 0
    assert recall(archive, out[2].content).text == content


def test_preview_is_summarized_later_keeping_the_original_key_and_size() -> None:
    archive = MemoryArchive()
    first, _, _ = run(aged(Message.tool("t1", BIG), 2), archive)
    preview = first[2].content
    assert len(preview) < 3000
    later = first + [Message.assistant("a"), Message.assistant("b")]
    out, report, _ = run(later, archive)
    assert out[2].content == SUMMARY % (200, 8200, "text") + RECALL % marker(archive_key(BIG))
    assert report == MicrocompactReport(summarized=1, chars_freed=len(preview) - len(out[2].content))
    assert len(archive) == 1, "a preview is never archived again"


def test_tool_result_budget_preview_is_summarized_with_the_original_size() -> None:
    archive = MemoryArchive()
    original = "{" + "x" * 30_000 + "}"
    history, _ = enforce_tool_result_budget(aged(Message.tool("t1", original), 4), archive=archive)
    assert len(history[2].content) < len(original)
    out, report, _ = run(history, archive)
    assert out[2].content == SUMMARY % (1, len(original), "JSON") + RECALL % marker(archive_key(original))
    assert report.summarized == 1


@pytest.mark.parametrize(
    ("content", "lines"),
    [
        (("a" * 20 + "\n") * 201, 201),  # a trailing newline ends the last line, it starts no other
        (("a" * 20 + "\n") * 200 + "a", 201),
        ("a\r\n" * 3000, 3000),
        ("x" * 4000, 1),
    ],
)
def test_summary_counts_lines_as_splitlines_does(content: str, lines: int) -> None:
    out, _, _ = run(aged(Message.tool("t1", content), 4))
    assert out[2].content.startswith(SUMMARY % (lines, len(content), "text"))


def test_markers_lost_by_the_stub_get_their_own_recall_lines() -> None:
    embedded = marker("0123456789abcdef")
    content = BIG + embedded + BIG
    truncated, _, archive = run(aged(Message.tool("t1", content), 2))
    assert extract_keys(truncated[2].content) == [archive_key(content), "0123456789abcdef"]
    assert truncated[2].content.endswith(RECALL % marker(archive_key(content)) + RECALL % embedded)
    summarized, _, _ = run(aged(Message.tool("t1", content), 5))
    assert summarized[2].content == (
        SUMMARY % (400, len(content), "text") + RECALL % marker(archive_key(content)) + RECALL % embedded
    )


def test_agent_feedback_is_a_candidate_but_real_user_text_is_not() -> None:
    feedback = Message.user(BIG, agent_feedback=True)
    user_text = Message.user(BIG)
    history = [feedback, user_text] + [Message.assistant(str(n)) for n in range(4)]
    out, report, _ = run(history)
    assert out[0].content.startswith(SUMMARY % (200, 8200, "text")) and out[0].agent_feedback
    assert out[1] is user_text
    assert report.summarized == 1


@pytest.mark.parametrize(
    "message",
    [
        Message.tool("t1", BIG, preserve_verbatim=True),
        Message.tool("t1", BIG, is_summary=True, summary_of=3),
        Message.tool("t1", BIG[:2999]),
    ],
    ids=["preserve_verbatim", "summary", "below_min_content"],
)
def test_untouchable_results_are_left_whole(message: Message) -> None:
    history = aged(message, 6)
    out, report, _ = run(history)
    assert out is history and not report.changed


def test_report_notice_and_totals() -> None:
    history = [Message.tool("t1", BIG), Message.assistant("a"), Message.assistant("b")]
    history = [Message.tool("t0", BIG * 10), Message.assistant("c"), Message.assistant("d"), *history]
    out, report, _ = run(history)
    freed = sum(len(a.content) - len(b.content) for a, b in zip(history, out, strict=True))
    assert (report.truncated, report.summarized, report.chars_freed) == (1, 1, freed)
    assert report.notice == f"🗜 microcompact: 1 truncated, 1 summarized, {format_payload_size(freed)} freed"
    assert report.notice == "🗜 microcompact: 1 truncated, 1 summarized, 85.5 KB freed"  # line-snapped preview


def test_thresholds_are_per_call() -> None:
    history = aged(Message.tool("t1", BIG), 1)
    out, report, _ = run(history, truncate_turns=1, summarize_turns=1)
    assert report.summarized == 1 and out[2].content.startswith("[Old tool result cleared — ")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("truncate_turns", 0),
        ("summarize_turns", 1),
        ("head_chars", 0),
        ("tail_chars", -1),
        ("min_content", 2500),
    ],
)
def test_bad_options_raise_a_config_error_naming_them(option: str, value: int) -> None:
    with pytest.raises(ConfigError, match=option):
        apply_microcompact([], archive=MemoryArchive(), **{option: value})
