"""Everything any pass removes is archived and recallable from the history it returns (issue 12).

One check for every pass: each field of each message the pass removed or
rewrote — content, tool-call ids, names and arguments, a tool result's call id,
inline image data — is in the returned history or in an entry reachable from
its markers (every marker must resolve). The texts are unique, so a piece
cannot be "found" by accident.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from ctxrecover.archive import Archive, MemoryArchive, extract_keys, recall
from ctxrecover.compaction import HistoryCompactor
from ctxrecover.messages import Image, Message, ToolCall
from ctxrecover.passes.dedup_reads import dedup_repeated_reads
from ctxrecover.passes.floor import SKILL_ENVELOPE_TEXT, SkillBlock, age_skill_blocks
from ctxrecover.passes.microcompact import apply_microcompact
from ctxrecover.passes.pairing import repair_pairing
from ctxrecover.passes.parts import archive_images, set_aside
from ctxrecover.passes.shrink import shrink_to_budget
from ctxrecover.passes.tool_budget import enforce_tool_result_budget
from ctxrecover.passes.trim import trim_history
from ctxrecover.passes.truncate import cap_assistant_messages, emergency_truncate, keep_last
from ctxrecover.policy import Policy
from ctxrecover.summarize import SummaryResult

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def text(tag: str, chars: int) -> str:
    """A unique text of about ``chars`` chars (words carry the tag and their index)."""
    return " ".join(f"{tag}-{i:05d}" for i in range(max(1, chars // 12)))


def _pieces(msg: Message) -> list[tuple[str, str]]:
    pieces = [("content", msg.content)]
    for call in msg.tool_calls:
        pieces += [("tool call id", call.id), ("tool name", call.name), ("arguments", call.arguments)]
    if msg.role == "tool" and msg.tool_call_id:
        pieces.append(("result call id", msg.tool_call_id))
    pieces += [("image", image.data or image.url or "") for image in msg.images]
    return [(what, piece) for what, piece in pieces if piece]


def _haystack(history: list[Message], store: Archive) -> list[str]:
    """Every text of ``history`` plus every entry its markers reach, raw and as recall gives it."""
    texts = [piece for msg in history for _, piece in _pieces(msg)] + [
        p for m in history for p in m.system_parts
    ]
    frontier = [key for t in texts for key in extract_keys(t)]
    seen: set[str] = set()
    while frontier:
        key = frontier.pop()
        if key in seen:
            continue
        seen.add(key)
        raw = store.get(key)
        assert raw is not None, f"marker {key} points at nothing"
        result = recall(store, key)
        assert result.missing == (), f"recall of {key} misses {result.missing}"
        texts += [raw, result.found[key]]
        frontier += extract_keys(raw)
    return texts


def assert_nothing_removed_is_lost(before: list[Message], after: list[Message], store: Archive) -> int:
    """Check every piece of every removed or rewritten message; returns how many messages that was."""
    kept = {id(m) for m in after}
    touched = [m for m in before if id(m) not in kept]
    haystack = _haystack(after, store)
    for msg in touched:
        for what, piece in _pieces(msg):
            assert any(piece in t for t in haystack), f"{what} of a {msg.role} message lost: {piece[:70]!r}"
    return len(touched)


def call(call_id: str, path: str, name: str = "read_file") -> ToolCall:
    return ToolCall(call_id, name, json.dumps({"path": path}))


def test_pairing_repair_loses_no_orphan_and_no_pruned_call() -> None:
    store = MemoryArchive()
    history = [
        Message.system("rules"),
        Message.tool("early-orphan", text("leading orphan", 300)),
        Message.user(text("task", 100)),
        Message.assistant(
            "",
            [
                call("c1", "a.py"),
                call("c1", "dup.py", "grep_dup"),
                ToolCall("", "empty_id", '{"x": "empty"}'),
            ],
        ),
        Message.tool("c1", text("answer c1", 200)),
        Message.tool("ghost:0", text("ghost result", 300)),
        Message.assistant(text("done", 50)),
    ]
    out, report = repair_pairing(history, archive=store)
    assert report.orphans_removed == 2 and report.duplicate_calls_pruned == 1 and report.empty_ids_pruned == 1
    assert assert_nothing_removed_is_lost(history, out, store) == 3  # two orphans and the pruned assistant


def test_tool_result_budget_loses_nothing() -> None:
    store = MemoryArchive()
    history = [
        Message.user("go"),
        Message.assistant("", [call("r", "big.py")]),
        Message.tool("r", text("big", 30_000)),
    ]
    out, report = enforce_tool_result_budget(history, archive=store)
    assert report.results_previewed == 1
    assert assert_nothing_removed_is_lost(history, out, store) == 1


def test_microcompact_loses_nothing() -> None:
    store = MemoryArchive()
    history = [Message.user("go")]
    for turn in range(6):
        history += [
            Message.assistant("", [call(f"r{turn}", f"f{turn}.py")]),
            Message.tool(f"r{turn}", text(f"result{turn}", 5000)),
        ]
    history.append(Message.assistant("end"))
    out, report = apply_microcompact(history, archive=store)
    assert report.truncated and report.summarized
    assert assert_nothing_removed_is_lost(history, out, store) == report.truncated + report.summarized


def test_dedup_of_repeated_reads_loses_nothing() -> None:
    store = MemoryArchive()
    listing = "\n".join(f"{n:6d}\t{text(f'line{n}', 40)}" for n in range(1, 60))
    history = [Message.user("go")]
    for i in range(3):
        history += [
            Message.assistant("", [call(f"r{i}", "same.py")]),
            Message.tool(f"r{i}", listing + f"\n# read {i}"),
        ]
    out, report = dedup_repeated_reads(history, archive=store)
    assert report.reads_superseded == 2
    assert assert_nothing_removed_is_lost(history, out, store) == 2


def test_trim_loses_nothing() -> None:
    store = MemoryArchive()
    history = [
        Message.user("go"),
        Message.assistant(f"<reasoning>{text('thought', 600)}</reasoning>\n\n\n\nAnswer."),
        Message.user(f"<tool_output>{text('block', 9000)}</tool_output>", agent_feedback=True),
        Message.user(f"FORMAT ERROR: {text('fe1', 60)}", agent_feedback=True),
        Message.user(f"FORMAT ERROR: {text('fe2', 60)}", agent_feedback=True),
        Message.user(f"FORMAT ERROR: {text('fe3', 60)}", agent_feedback=True),
    ]
    out, report = trim_history(history, archive=store)
    assert report.format_errors_dropped == 2 and report.messages_changed >= 4
    assert assert_nothing_removed_is_lost(history, out, store) == 5


def test_shrink_to_budget_loses_nothing() -> None:
    store = MemoryArchive()
    history = [Message.system("rules"), *(Message.user(text(f"msg{i}", 3000)) for i in range(5))]
    out, report = shrink_to_budget(history, 4000, archive=store)
    assert report.messages_shrunk >= 3
    assert assert_nothing_removed_is_lost(history, out, store) == report.messages_shrunk


def _agent_history() -> list[Message]:
    history = [Message.system("rules")]
    for turn in range(6):
        history += [
            Message.user(
                text(f"ask{turn}", 400),
                images=(Image(data=PNG, media_type="image/png"),) if turn == 1 else (),
            ),
            Message.assistant(text(f"plan{turn}", 300), [call(f"t{turn}", f"m{turn}.py", f"tool{turn}")]),
            Message.tool(f"t{turn}", text(f"out{turn}", 600), name=f"tool{turn}"),
            Message.assistant(text(f"said{turn}", 6000)),
        ]
    return history


def test_emergency_truncate_loses_nothing_not_even_an_image() -> None:
    store = MemoryArchive()
    history = _agent_history()
    out, report = emergency_truncate(history, 4, archive=store)
    assert report.messages_dropped > 10
    assert assert_nothing_removed_is_lost(history, out, store) == report.messages_dropped


def test_recovery_levels_lose_nothing() -> None:
    store = MemoryArchive()
    history = _agent_history()
    capped, cap = cap_assistant_messages(history, 5000, archive=store)  # Level 1
    assert cap.messages_capped == 6
    assert assert_nothing_removed_is_lost(history, capped, store) == 6
    kept, report = keep_last(history, 4, archive=store, per_message_cap=4000)  # Level 3
    assert report.messages_dropped > 10 and report.messages_capped >= 1
    assert assert_nothing_removed_is_lost(history, kept, store) > 10


def test_skill_aging_loses_nothing() -> None:
    """The stub keeps the skill's name and the body is archived: the block is rebuilt char for char."""
    store = MemoryArchive()
    block = SkillBlock("deploy", text("skill body", 3000))
    history = [
        Message.system("base"),
        Message.user(block.envelope),
        *(Message.assistant(f"ok {i}") for i in range(6)),
    ]
    out, report = age_skill_blocks(history, archive=store)
    assert report.blocks_archived == 1 and out[1].content.startswith('<skill name="deploy" archived>')
    (key,) = extract_keys(out[1].content)
    assert SKILL_ENVELOPE_TEXT.format(name="deploy", body=recall(store, key).found[key]) == history[1].content
    assert assert_nothing_removed_is_lost(history[2:], out[2:], store) == 0


class _Summarizer:
    window_tokens = 32_000

    def summarize(self, prompt: str, **_kwargs: object) -> SummaryResult:
        return SummaryResult(
            "## Current Task State\n" + text("summary", 400), input_tokens=1, output_tokens=1
        )


@pytest.mark.parametrize("summarizer", [_Summarizer(), None], ids=["summary", "truncation"])
def test_planned_compaction_loses_nothing(summarizer: object) -> None:
    store = MemoryArchive()
    history = _agent_history()
    history[5] = history[5].replace(preserve_verbatim=True)  # a verbatim message among the summarized
    compactor = HistoryCompactor(Policy(), store, summarizer=summarizer)  # type: ignore[arg-type]
    result = compactor.compact(history, budget_chars=12_000, keep_recent=4)
    assert result.report.level >= 2
    assert assert_nothing_removed_is_lost(history, result.history, store) > 10


def test_the_check_itself_catches_a_removal_without_archive() -> None:
    history = [Message.user(text("kept", 50)), Message.tool("ghost", text("orphan", 50))]
    out, _ = repair_pairing(history)  # no archive: removed for good
    with pytest.raises(AssertionError, match="content of a tool message lost"):
        assert_nothing_removed_is_lost(history, out, MemoryArchive())


def test_archiving_old_images_loses_no_pixel() -> None:
    store = MemoryArchive()
    big = PNG * 400  # a screenshot-sized base64 string
    history = [Message.user(text("task", 100))]
    for turn in range(4):
        history += [
            Message.user(text(f"look{turn}", 80), images=(Image(data=big + str(turn)),)),
            Message.assistant(text(f"seen{turn}", 80)),
        ]
    out, report = archive_images(history, archive=store, keep_recent=2)
    assert report.images_archived == 3
    assert assert_nothing_removed_is_lost(history, out, store) == 3


def test_setting_a_message_aside_loses_nothing() -> None:
    store = MemoryArchive()
    history = [
        Message.user("go"),
        Message.assistant("", [call("r1", "q.sql")]),
        Message.tool("r1", "SELECT * FROM t; DROP TABLE x; " + text("rows", 4000), images=(Image(data=PNG),)),
        Message.assistant(text("answer", 200)),
    ]
    out, key = set_aside(history, 2, archive=store)
    assert out[2].tool_call_id == "r1" and key in out[2].content
    assert assert_nothing_removed_is_lost(history, out, store) == 1


ALL_PASSES: list[Callable[..., object]] = [
    repair_pairing,
    archive_images,
    set_aside,
    enforce_tool_result_budget,
    apply_microcompact,
    dedup_repeated_reads,
    trim_history,
    shrink_to_budget,
    emergency_truncate,
    cap_assistant_messages,
    keep_last,
    age_skill_blocks,
]


def test_every_pass_that_archives_is_checked_here() -> None:
    """A new pass taking an archive fails this test until it gets a nothing-lost test above."""
    import inspect

    import ctxrecover.passes as passes

    archiving = {
        name
        for name in passes.__all__
        if inspect.isfunction(function := getattr(passes, name))
        and "archive" in inspect.signature(function).parameters
    }
    assert archiving == {p.__name__ for p in ALL_PASSES}
