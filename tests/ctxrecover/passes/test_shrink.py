"""Shrink content (SPEC §5 Level 3): largest first, archived, marker in the tail, converging."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover.archive import MemoryArchive, archive_key
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.shrink import shrink_to_budget
from ctxrecover.sizes import total_weight


def test_shrink_exact_cut_head_two_thirds_tail_one_third() -> None:
    content = "a " * 500 + "b " * 500 + "c " * 500  # one-char words: every cut point is a word boundary
    history = [Message.system("rules"), Message.user(content)]
    store = MemoryArchive()
    out, report = shrink_to_budget(history, 1000, archive=store)
    key = archive_key(content)
    # target = max(400, 3000 - (3005 - 1000) - 96) = 899 chars, marker included
    assert out[1].content == (
        "a " * 260
        + "\n\n... [2220 chars omitted for context efficiency] ...\n\n"
        + "c " * 130
        + f"\n[full content recoverable via @recall <<ccr:{key}>>]"
    )
    assert len(out[1].content) == 899
    assert store.get(key) == content
    assert report.messages_shrunk == 1 and report.reached_budget
    assert report.chars_saved == 3000 - 899
    assert out[0] is history[0]


def test_shrink_takes_the_largest_first_and_stops_at_budget() -> None:
    history = [
        Message.system("s" * 100),
        Message.user("small " * 100),
        Message.tool("t", "T" * 20_000),
        Message.assistant("A" * 5000),
    ]
    out, report = shrink_to_budget(history, 10_000, archive=MemoryArchive())
    assert out[1] is history[1] and out[3] is history[3]
    assert out[2].tool_call_id == "t"
    assert report.messages_shrunk == 1
    assert total_weight(out) <= 10_000 and report.reached_budget


def test_shrink_never_touches_system_or_verbatim_and_reports_unreached_budget(
    assert_nothing_lost_strict: Callable[..., None],
) -> None:
    history = [
        Message.system("S" * 5000),
        Message.user("V" * 5000, preserve_verbatim=True),
        Message.user("u " * 1000),
    ]
    store = MemoryArchive()
    out, report = shrink_to_budget(history, 1000, archive=store)
    assert out[0] is history[0] and out[1] is history[1]
    assert len(out[2].content) == 400, "cut down to the floor, no further"
    assert not report.reached_budget and report.messages_shrunk == 1
    assert_nothing_lost_strict(history, out, store)


def test_shrink_stops_when_only_uncuttable_weight_is_left() -> None:
    args = '{"blob": "' + "z" * 5000 + '"}'
    history = [Message.user("go"), Message.assistant("", tool_calls=[ToolCall("a", "write", args)])]
    out, report = shrink_to_budget(history, 100, archive=MemoryArchive())
    assert out == history
    assert report == report.__class__(messages_shrunk=0, chars_saved=0, reached_budget=False)


def test_shrink_stops_on_no_progress() -> None:
    history = [Message.user("x" * 5000)]
    out, report = shrink_to_budget(history, 10, archive=MemoryArchive(), measure=lambda m: 10_000)
    assert out == history
    assert report.messages_shrunk == 0 and not report.reached_budget


def test_shrink_recut_keeps_the_first_marker_and_archives_only_the_original(
    assert_nothing_lost_strict: Callable[..., None],
) -> None:
    content = "".join(f"line {i:05d}\n" for i in range(2000))
    history = [Message.user(content)]
    store = MemoryArchive()
    once, _ = shrink_to_budget(history, 5000, archive=store)
    twice, report = shrink_to_budget(once, 1000, archive=store)
    key = archive_key(content)
    assert store.keys() == [key], "a re-cut does not archive its own stub"
    assert twice[0].content.endswith(f"\n[full content recoverable via @recall <<ccr:{key}>>]")
    assert len(twice[0].content) <= 1000 and report.reached_budget
    body = twice[0].content.removesuffix(f"\n[full content recoverable via @recall <<ccr:{key}>>]")
    head, tail = re.split(r"\n\n\.\.\. \[\d+ chars omitted for context efficiency\] \.\.\.\n\n", body)
    assert content.startswith(head) and content.endswith(tail)
    assert_nothing_lost_strict(history, twice, store)


def test_shrink_archives_a_stub_carrying_a_foreign_marker() -> None:
    foreign = "<<ccr:0123456789abcdef>>"
    stub = f"preview with {foreign} in the middle " + "p" * 3000
    store = MemoryArchive()
    out, _ = shrink_to_budget([Message.user(stub)], 500, archive=store)
    assert store.get(archive_key(stub)) == stub
    assert out[0].content.endswith(f"<<ccr:{archive_key(stub)}>>]")


def test_shrink_returns_the_input_when_it_fits() -> None:
    history = [Message.user("x" * 5000)]
    store = MemoryArchive()
    out, report = shrink_to_budget(history, 5000, archive=store)
    assert out is history and report.reached_budget and report.messages_shrunk == 0
    assert len(store) == 0


def test_shrink_measures_each_message_once_plus_once_per_cut() -> None:
    calls = 0

    def counting_weight(msg: Message) -> int:
        nonlocal calls
        calls += 1
        return len(msg.content)

    history = [Message.user("m" * (500 + i % 300)) for i in range(3000)]
    out, report = shrink_to_budget(history, 1_300_000, archive=MemoryArchive(), measure=counting_weight)
    assert report.reached_budget
    assert calls == len(history) + report.messages_shrunk, "the total is updated, never re-summed"
    assert sum(len(m.content) for m in out) <= 1_300_000


@pytest.mark.parametrize(
    ("budget", "floor", "match"), [(-1, 400, "budget_chars >= 0"), (10, 100, "min_chars >= 200")]
)
def test_shrink_rejects_bad_arguments(budget: int, floor: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        shrink_to_budget([], budget, archive=MemoryArchive(), min_chars=floor)


# -- property ------------------------------------------------------------------------------

MESSAGES = st.builds(
    Message,
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    content=st.text(alphabet="abcxyz\n<>", min_size=0, max_size=3000),
    preserve_verbatim=st.booleans(),
)


@settings(max_examples=100)
@given(st.lists(MESSAGES, max_size=12), st.integers(0, 20_000))
def test_shrink_property(
    assert_nothing_lost_strict: Callable[..., None], history: list[Message], budget: int
) -> None:
    snapshot = copy.deepcopy(history)
    store = MemoryArchive()
    out, report = shrink_to_budget(history, budget, archive=store)
    assert history == snapshot, "input never mutated"
    assert len(out) == len(history)
    for before, after in zip(history, out, strict=True):
        if before.role == "system" or before.preserve_verbatim:
            assert after is before
        assert len(after.content) <= len(before.content)
        assert after.role == before.role
    total = total_weight(out)
    assert report.reached_budget == (total <= budget)
    assert report.chars_saved == total_weight(history) - total
    if not report.reached_budget:
        cuttable = [m for m in out if m.role != "system" and not m.preserve_verbatim]
        assert all(len(m.content) <= 400 for m in cuttable), "stopped only when nothing was left to cut"
    assert_nothing_lost_strict(history, out, store)
    again, second = shrink_to_budget(out, budget, archive=store)
    assert total_weight(again) <= total and second.chars_saved >= 0
    assert_nothing_lost_strict(history, again, store)
