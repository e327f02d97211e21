"""Tool-result budget (SPEC §3.2)."""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor

import pytest

from ctxrecover.archive import MemoryArchive, archive_key, extract_keys, marker, recall
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes import tool_budget
from ctxrecover.passes.tool_budget import ToolBudgetReport, enforce_tool_result_budget

OMISSION = "\n\n... [%d chars omitted — full output saved to %s]\n\n"


def turn(*contents: str, start: int = 0) -> list[Message]:
    ids = [f"t{start + n}" for n in range(len(contents))]
    calls = [ToolCall(i, "run") for i in ids]
    return [Message.assistant("", tool_calls=calls)] + [
        Message.tool(i, c, name="run") for i, c in zip(ids, contents, strict=True)
    ]


def enforce(history: list[Message], **kw: object) -> tuple[list[Message], ToolBudgetReport, MemoryArchive]:
    archive = MemoryArchive()
    snapshot = copy.deepcopy(history)
    out, report = enforce_tool_result_budget(history, archive=archive, **kw)  # type: ignore[arg-type]
    assert history == snapshot, "the pass mutated its input"
    again, second = enforce_tool_result_budget(out, archive=archive, **kw)  # type: ignore[arg-type]
    assert again is out and second == ToolBudgetReport(), "the pass is not idempotent"
    return out, report, archive


def test_oversized_result_becomes_head_omission_tail_preview_cut_at_newlines() -> None:
    content = "A" * 2500 + "\n" + "B" * 30_000 + "\n" + "C" * 399 + "\n" + "Z" * 600
    out, report, archive = enforce([Message.user("go"), *turn(content)])
    key = archive_key(content)
    omitted = len(content) - 2501 - 600
    assert out[2].content == "A" * 2500 + "\n" + OMISSION % (omitted, marker(key)) + "Z" * 600
    assert report == ToolBudgetReport(results_previewed=1, chars_saved=len(content) - len(out[2].content))
    assert recall(archive, out[2].content).text == content


def test_head_and_tail_are_not_cut_at_newlines_outside_their_halves() -> None:
    content = "A" * 1000 + "\n" + ("B" * 9 + " ") * 3000 + "\n" + "C " * 200
    out, _, archive = enforce(turn(content))
    # the head's room ends on a word boundary: all 4000 chars; the tail's room (1000) starts
    # inside a word: it starts at the next one, 991 chars from the end
    head, tail = content[:4000], content[-991:]
    omitted = len(content) - 4991
    assert out[1].content == head + OMISSION % (omitted, marker(archive_key(content))) + tail


def test_a_line_longer_than_the_room_is_cut_at_a_word_boundary_never_inside_a_word() -> None:
    content = "A" * 1000 + "\n" + "B" * 30_000 + "\n" + "C" * 400
    out, _, archive = enforce(turn(content))
    # no word ends within the rooms but the lines: the head ends after the first line, the tail
    # is the last line; the 30 000-char word is left out whole
    head, tail = "A" * 1000 + "\n", "C" * 400
    omitted = len(content) - len(head) - len(tail)
    assert out[1].content == head + OMISSION % (omitted, marker(archive_key(content))) + tail


def test_preview_keeps_tool_call_id_name_and_flags() -> None:
    big = Message.tool("t0", "x" * 25_000, name="run", is_error=True, error_code="exit_1")
    out, _, _ = enforce([Message.assistant("", tool_calls=[ToolCall("t0", "run")]), big])
    stub = out[1]
    assert (stub.tool_call_id, stub.name, stub.is_error, stub.error_code) == ("t0", "run", True, "exit_1")


def test_results_within_limits_return_the_same_list() -> None:
    history = turn("x" * 20_000, "y" * 100)
    out, report, archive = enforce(history)
    assert out is history and report == ToolBudgetReport() and len(archive) == 0


def test_previews_are_byte_stable_for_identical_content() -> None:
    content = "".join(f"line {n}: {'data ' * (n % 17)}\n" for n in range(3000))
    first, _, _ = enforce(turn(content, content))
    second, _, _ = enforce(turn(content))
    assert first[1].content == first[2].content == second[1].content


def test_already_marked_content_is_not_rearchived_or_cut() -> None:
    marked = "x" * 30_000 + marker("0123456789abcdef")
    history = turn(marked)
    out, report, archive = enforce(history)
    assert out is history and report.results_previewed == 0 and len(archive) == 0


def test_preserve_verbatim_results_are_left_whole() -> None:
    history = [
        Message.assistant("", tool_calls=[ToolCall("t0", "recall")]),
        Message.tool("t0", "v" * 50_000, preserve_verbatim=True),
    ]
    out, _, _ = enforce(history)
    assert out is history


def test_turn_over_budget_shrinks_the_largest_results_first_until_within_budget() -> None:
    sizes = [19_000] * 11 + [19_500]
    contents = [(f"{n} " + "data " * 4000)[:size] for n, size in enumerate(sizes)]
    out, report, archive = enforce(turn(*contents))
    results = out[1:]
    assert sum(len(m.content) for m in results) <= 200_000
    assert report.results_previewed == 3
    shrunk = [n for n, m in enumerate(results) if m.content != contents[n]]
    assert shrunk == [0, 1, 11], "the largest (index 11) first, then the earliest of equal size"
    assert len(results[11].content) <= 5200 and len(results[0].content) <= 5200
    for n in shrunk:
        assert recall(archive, results[n].content).text == contents[n]


def test_turn_shrink_target_is_floored_at_5200() -> None:
    history = turn(*(["r" * 5000] * 50))
    out, report, _ = enforce(history)
    assert out is history and report.results_previewed == 0


def test_turn_budget_is_per_assistant_turn_not_per_history() -> None:
    history = [*turn(*(["a" * 19_000] * 10)), *turn(*(["b" * 19_000] * 10), start=10)]
    out, _, _ = enforce(history)
    assert out is history


def test_limits_are_per_call_and_never_change_the_process_defaults() -> None:
    defaults = dict(enforce_tool_result_budget.__kwdefaults__ or {})
    history = turn("x" * 15_000)

    def halved() -> int:
        return enforce_tool_result_budget(
            history, archive=MemoryArchive(), turn_budget_chars=100_000, max_result_chars=10_000
        )[1].results_previewed

    def default() -> int:
        return enforce_tool_result_budget(history, archive=MemoryArchive())[1].results_previewed

    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = [pool.submit(f) for f in (halved, default) * 8]
        counts = [f.result() for f in outcomes]
    assert counts == [1, 0] * 8
    assert enforce_tool_result_budget.__kwdefaults__ == defaults
    assert (tool_budget.DEFAULT_TURN_BUDGET_CHARS, tool_budget.DEFAULT_MAX_RESULT_CHARS) == (200_000, 20_000)


def test_preview_marker_is_the_archived_original_key() -> None:
    content = "q" * 40_000
    out, _, archive = enforce(turn(content))
    assert extract_keys(out[1].content) == [archive_key(content)]
    assert archive.get(archive_key(content)) == content


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("turn_budget_chars", 0),
        ("max_result_chars", -1),
        ("preview_head", 0),
        ("preview_tail", -1),
        ("turn_floor", 0),
        ("max_result_chars", 5000),
    ],
)
def test_bad_limits_are_rejected_with_a_config_error_naming_the_option(option: str, value: int) -> None:
    with pytest.raises(ConfigError, match=option):
        enforce_tool_result_budget(turn("x"), archive=MemoryArchive(), **{option: value})
