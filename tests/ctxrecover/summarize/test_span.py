"""SPEC §5 Level 2: which messages a summary replaces (summary_scope) and the history it leaves."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.pairing import validate_pairing
from ctxrecover.passes.truncate import VERBATIM_RESULT_HEADER, snap_to_tool_boundary
from ctxrecover.sizes import total_weight, weight
from ctxrecover.summarize.span import EXPECTED_SUMMARY_SHARE, assemble, covered, recent_start, summary_span

SUMMARY = Message.user(
    "[STRUCTURED SUMMARY — covering 30 earlier messages]\n\nnotes", is_summary=True, summary_of=30
)


def turn(t: int, size: int = 1000) -> list[Message]:
    """user → assistant with a tool call → its result → assistant answer."""
    return [
        Message.user(f"task {t} " + "u" * (size // 4)),
        Message.assistant(f"reading {t}", tool_calls=[ToolCall(f"c{t}", "read_file", "{}")]),
        Message.tool(f"c{t}", f"result {t} " + "r" * size),
        Message.assistant(f"answer {t} " + "a" * (size // 2)),
    ]


def agent(turns: int, *head: Message, size: int = 1000) -> list[Message]:
    return [Message.system("sys"), *head, *(m for t in range(turns) for m in turn(t, size))]


def span(history: list[Message], scope: str = "incremental", **options: int) -> tuple[int, int] | None:
    arguments = {"keep_recent": 8, "min_messages": 4, **options}
    return summary_span(history, scope=scope, **arguments)  # type: ignore[arg-type]


# -- segment and incremental ---------------------------------------------------------------


def test_segment_scope_is_everything_between_the_floor_and_the_recent_messages() -> None:
    history = agent(5, SUMMARY)
    assert span(history, "segment") == (1, len(history) - 8)
    assert recent_start(history, 1, 8) == len(history) - 8


def test_incremental_scope_starts_after_the_earlier_summaries_and_their_verbatim_messages() -> None:
    recalled = Message.user("[recalled] notes", preserve_verbatim=True)
    history = agent(5, SUMMARY, Message.system("mid-history rule"), recalled, SUMMARY)
    assert span(history, summaries_cap_chars=10_000) == (5, len(history) - 8)


def test_a_verbatim_assistant_with_tool_calls_ends_the_kept_head_so_its_block_is_summarized_whole() -> None:
    history = agent(5, SUMMARY)
    history[2] = history[2].replace(preserve_verbatim=True)  # the user message of turn 0: kept
    history[3] = history[3].replace(preserve_verbatim=True)  # its call: the span starts here
    assert span(history, summaries_cap_chars=10_000) == (3, len(history) - 8)


def test_summaries_over_their_cap_are_summarized_again() -> None:
    history = agent(5, SUMMARY)
    assert span(history, summaries_cap_chars=weight(SUMMARY) - 1) == (1, len(history) - 8)
    assert span(history, summaries_cap_chars=weight(SUMMARY)) == (2, len(history) - 8)


def test_fewer_messages_than_the_minimum_means_no_summary() -> None:
    history = agent(3, SUMMARY)  # 4 new messages before the recent 8
    assert span(history, summaries_cap_chars=10_000) == (2, 6)
    assert span(history, summaries_cap_chars=10_000, min_messages=5) is None


def test_no_summary_when_even_an_empty_one_cannot_reach_the_budget() -> None:
    history = agent(5)
    recent_and_floor = total_weight(history[:1]) + total_weight(history[-8:])
    assert span(history, budget_chars=recent_and_floor + 100, overhead_chars=100) == (1, len(history) - 8)
    assert span(history, budget_chars=recent_and_floor + 99, overhead_chars=100) is None
    assert span(history, budget_chars=None) == (1, len(history) - 8)  # a guided /compact: no such test


def test_earlier_summaries_are_summarized_again_when_keeping_them_cannot_reach_the_budget() -> None:
    history = agent(5, SUMMARY)
    without_summary = total_weight(history[:1]) + total_weight(history[-8:])
    assert span(history, budget_chars=without_summary, summaries_cap_chars=10_000) == (1, len(history) - 8)
    assert span(history, budget_chars=without_summary + weight(SUMMARY), summaries_cap_chars=10_000) == (
        2,
        len(history) - 8,
    )


def test_an_unknown_scope_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="summary scope must be one of segment, incremental, target"):
        span(agent(5), "everything")


# -- target ----------------------------------------------------------------------------------


def test_target_span_ends_once_the_oldest_messages_free_the_excess() -> None:
    history = agent(10)
    first_turn = sum(weight(m) for m in history[1:5])
    # one turn, once summarized at the expected share, frees just enough
    excess = int(first_turn * (1 - EXPECTED_SUMMARY_SHARE))
    target = total_weight(history) - excess
    assert span(history, "target", target_chars=target) == (1, 5)
    # one char more: the next boundary, where turn 1's user message is summarized too
    assert span(history, "target", target_chars=target - 1) == (1, 6)
    assert span(history, "target", target_chars=0) == (1, len(history) - 8)  # at most the whole segment


@settings(max_examples=150, deadline=None)
@given(
    turns=st.integers(min_value=0, max_value=12),
    keep_recent=st.integers(min_value=1, max_value=12),
    target=st.integers(min_value=0, max_value=60_000),
    verbatim=st.sets(st.integers(min_value=1, max_value=60), max_size=4),
)
def test_a_target_span_never_splits_a_tool_block_and_its_summary_keeps_pairing(
    turns: int, keep_recent: int, target: int, verbatim: set[int]
) -> None:
    history = agent(turns)
    for index in verbatim:  # a verbatim call without its result is pairing repair's job, not this one's
        if index < len(history) and history[index].role != "assistant":
            history[index] = history[index].replace(preserve_verbatim=True)
    found = span(history, "target", keep_recent=keep_recent, target_chars=target)
    if found is None:
        return
    start, end = found
    assert 1 <= start < end <= recent_start(history, 1, keep_recent)
    assert snap_to_tool_boundary(history, end) == end
    assert sum(1 for m in history[start:end] if not m.preserve_verbatim) >= 4
    summary = Message.user("summary", is_summary=True, summary_of=covered(history[start:end]))
    result = assemble(history, start, end, summary)
    assert validate_pairing(result)
    kept = len(history) - end
    assert result[len(result) - kept :] == history[end:]


# -- assembling ------------------------------------------------------------------------------


def test_assemble_puts_systems_before_the_summary_and_verbatim_messages_after_it() -> None:
    rule = Message.system("mid-history rule")
    history = agent(3)
    history[3] = history[3].replace(preserve_verbatim=True)  # a verbatim result whose call is summarized
    history.insert(2, rule)
    summary = Message.user("summary", is_summary=True, summary_of=4)
    out = assemble(history, 1, 6, summary)
    assert out[:3] == [history[0], rule, summary]
    assert out[3].role == "user" and out[3].preserve_verbatim
    assert out[3].content == VERBATIM_RESULT_HEADER.format(id="c0") + history[4].content
    assert out[4:] == history[6:]


def test_covered_counts_what_earlier_summaries_covered() -> None:
    assert covered([SUMMARY, Message.user("a"), Message.assistant("b")]) == 32
