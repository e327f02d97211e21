"""The incremental turn-boundary passes give exactly what the full passes give (DESIGN: O(what changed)).

Random histories evolve turn after turn — messages appended, replaced, cut off,
rewritten — and at every turn both lineages run SPEC §3's passes: the full ones
(:func:`apply_microcompact`, :func:`dedup_repeated_reads`, :func:`age_skill_blocks`,
:func:`repair_pairing` + :func:`enforce_tool_result_budget`) on one copy, the
incremental steps threaded through one :class:`TurnState` on the other. Histories,
outgoing copies, reports, wire sizes, weights and archive contents must be equal; so
must the facts the state hands to a recovery step (:mod:`ctxrecover.passes.facts`) and
what each ladder step does given them.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover.archive import MemoryArchive, archive_key, marker
from ctxrecover.archive.ranges import range_parts
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Image, Message, ToolCall
from ctxrecover.passes.dedup_reads import dedup_repeated_reads, dedup_step, parse_file_blocks
from ctxrecover.passes.facts import HistoryFacts, history_facts, indexed_facts, watch_facts
from ctxrecover.passes.floor import SkillBlock, age_skill_blocks, age_skills_step
from ctxrecover.passes.history_index import SizedHistory, TurnState
from ctxrecover.passes.microcompact import apply_microcompact, microcompact_step
from ctxrecover.passes.pairing import pairing_step, repair_pairing
from ctxrecover.passes.tool_budget import enforce_tool_result_budget, tool_budget_step, tool_result_preview
from ctxrecover.policy import DEFAULT_POLICY
from ctxrecover.recovery import Level1, Level2, Level3, RecoveryContext
from ctxrecover.recovery.ladder import RecoveryStep
from ctxrecover.sizes import WeightTotals, total_weight
from ctxrecover.wire import WireFormat, request_size

# Small thresholds, so small texts cross them.
MICRO = {"truncate_turns": 2, "summarize_turns": 4, "head_chars": 120, "tail_chars": 40, "min_content": 300}
BUDGET = {
    "turn_budget_chars": 2500,
    "max_result_chars": 1500,
    "preview_head": 300,
    "preview_tail": 100,
    "turn_floor": 400,
}
SKILL_AGE = 3
PATHS = ("a.py", "b.py", "src/c.py")


def _read(path: str, first: int, last: int, ranged: bool) -> str:
    header = f"<<< FILE: {path} (lines {first}-{last}) >>>" if ranged else f"<<< FILE: {path} >>>"
    return header + "\n" + "".join(f"{n}: line {n} of {path}\n" for n in range(first, last + 1))


def _cat_n(first: int, last: int) -> str:
    return "".join(f"{n:6d}\tcode {n}\n" for n in range(first, last + 1))


_LINES = st.integers(1, 60)
_READS = st.builds(
    lambda path, a, b, ranged: _read(path, min(a, b), max(a, b), ranged),
    st.sampled_from(PATHS),
    st.one_of(st.just(1), _LINES),
    _LINES,
    st.booleans(),
)
_OUTPUTS = st.integers(0, 2600).map(lambda n: ("output " * (n // 7 + 1))[:n])
_TEXTS = st.one_of(
    st.text("abc \n{}é", max_size=40),
    st.integers(0, 2600).map(lambda n: ("word " * (n // 5 + 1))[:n]),
    _READS,
    st.sampled_from(["def f():\n" * 60, "[1, 2, 3]" * 50, "diff --git a b\n" * 40]),
)
_SKILLS = st.builds(
    lambda name, body: SkillBlock(name, body).envelope,
    st.sampled_from(["git", "tests"]),
    st.sampled_from(["short", "Always rebase. " * 40]),
)


@st.composite
def _previews(draw: st.DrawFn, archive_original: bool) -> tuple[str, str | None]:
    """A tool-result-budget preview; its original is archived (both lineages) or not."""
    original = "preview original " * draw(st.integers(120, 200))
    preview = tool_result_preview(original, archive_key(original), head=300, tail=100)
    return preview, original if archive_original else None


@st.composite
def _turn(draw: st.DrawFn, n: int) -> tuple[list[Message], list[str]]:
    """One agent turn: user text or feedback, an assistant with calls, their results (some missing,
    repeated or out of place), and what the archive must hold first (previews' originals)."""
    originals: list[str] = []
    out: list[Message] = []
    kind = draw(st.sampled_from(["user", "skill", "feedback", "summary"]))
    if kind == "user":
        out.append(Message.user(draw(_TEXTS)))
    elif kind == "skill":
        out.append(Message.user(draw(_SKILLS) + "\n" + draw(_TEXTS)))
    elif kind == "feedback":
        out.append(Message.user(draw(_TEXTS), agent_feedback=True))
    else:
        out.append(Message.user("[summary] " + draw(_TEXTS), is_summary=True, summary_of=3))
    calls = [
        ToolCall(f"c{n}_{k}", "read_file", json.dumps({"path": draw(st.sampled_from(PATHS))}))
        for k in range(draw(st.integers(0, 3)))
    ]
    if calls and draw(st.booleans()):
        calls.append(calls[0])  # a duplicate id: pairing repair prunes it
    out.append(Message.assistant(draw(st.text("ok ", max_size=10)), tool_calls=calls))
    for call in calls[: draw(st.integers(0, len(calls)))]:
        choice = draw(st.sampled_from(["text", "read", "output", "cat", "preview", "verbatim"]))
        if choice in ("text", "read", "output"):
            content = draw({"text": _TEXTS, "read": _READS, "output": _OUTPUTS}[choice])
            out.append(Message.tool(call.id, content, name="read_file"))
        elif choice == "cat":
            first = draw(_LINES)
            out.append(Message.tool(call.id, _cat_n(first, first + draw(_LINES)), name="read_file"))
        elif choice == "preview":
            preview, original = draw(_previews(draw(st.booleans())))
            originals += [original] if original is not None else []
            out.append(Message.tool(call.id, preview))
        else:
            out.append(Message.tool(call.id, draw(_TEXTS), preserve_verbatim=True))
    if draw(st.booleans()):
        out.append(Message.tool("ghost", "an orphan result"))
    if draw(st.integers(0, 4)) == 0:
        out.append(Message.system(draw(_SKILLS)))
    return out, originals


_EDIT = st.sampled_from(["append", "append", "append", "replace", "retype", "cut", "drop_range", "copies"])


@st.composite
def _sessions(draw: st.DrawFn) -> tuple[list[Message], list[list[Any]]]:
    start = [Message.system("be careful")] if draw(st.booleans()) else []
    turns = []
    for n in range(draw(st.integers(1, 12))):
        edit = draw(_EDIT)
        messages, originals = draw(_turn(n))
        turns.append([edit, draw(st.integers(0, 60)), draw(st.integers(1, 6)), messages, originals])
    return start, turns


def _edited(history: list[Message], edit: str, at: int, span: int, new: list[Message]) -> list[Message]:
    """``history`` after one edit between turns; the same edit on equal histories gives equal ones."""
    if edit == "append" or not history:
        return [*history, *new]
    i = at % len(history)
    if edit == "replace":  # same role and layout, another content (a pass's stub would be this)
        return [*history[:i], history[i].with_content(history[i].content[:20] + " edited"), *history[i + 1 :]]
    if edit == "retype":  # another role: a rewrite from there
        return [*history[:i], Message.user("retyped"), *history[i + 1 :], *new]
    if edit == "cut":
        return [*history[:i], *new]
    if edit == "drop_range":  # a compaction: a range gone, the rest shifted
        return [*history[:i], *history[i + span :], *new]
    return [Message.from_dict(m.to_dict()) for m in history] + new  # restored copies, equal not identical


def _full(history: list[Message], archive: MemoryArchive) -> tuple[Any, ...]:
    history, micro = apply_microcompact(history, archive=archive, **MICRO)
    history, dedup = dedup_repeated_reads(history, archive=archive)
    history, aging = age_skill_blocks(history, archive=archive, age_turns=SKILL_AGE)
    outgoing, pairing = repair_pairing(history, archive=archive)
    outgoing, budget = enforce_tool_result_budget(outgoing, archive=archive, **BUDGET)
    return history, outgoing, (micro, dedup, aging, pairing, budget)


def _incremental(
    history: list[Message], archive: MemoryArchive, state: TurnState
) -> tuple[list[Message], list[Message], tuple[Any, ...], TurnState]:
    history, micro, state = microcompact_step(history, state, archive=archive, **MICRO)
    history, dedup, state = dedup_step(history, state, archive=archive)
    history, aging, state = age_skills_step(history, state, archive=archive, age_turns=SKILL_AGE)
    outgoing, pairing, state = pairing_step(history, state, archive=archive)
    if outgoing is history:
        outgoing, budget, state = tool_budget_step(history, state, archive=archive, **BUDGET)
    else:
        outgoing, budget = enforce_tool_result_budget(outgoing, archive=archive, **BUDGET)
    return history, outgoing, (micro, dedup, aging, pairing, budget), state


@settings(max_examples=200, deadline=None)
@given(session=_sessions(), fmt=st.sampled_from(list(WireFormat)))
def test_incremental_passes_equal_the_full_passes_turn_after_turn(
    session: tuple[list[Message], list[list[Any]]], fmt: WireFormat
) -> None:
    start, turns = session
    full_archive, incremental_archive = MemoryArchive(), MemoryArchive()
    full, incremental = list(start), list(start)
    state = TurnState.new(fmt, model="m")
    sent = SizedHistory(fmt, model="m")
    for edit, at, span, new, originals in turns:
        for original in originals:
            full_archive.put(original)
            incremental_archive.put(original)
        full, incremental = _edited(full, edit, at, span, new), _edited(incremental, edit, at, span, new)
        assert full == incremental
        full, full_out, full_reports = _full(full, full_archive)
        incremental, out, reports, state = _incremental(incremental, incremental_archive, state)
        assert incremental == full
        assert out == full_out
        assert reports == full_reports
        assert set(full_archive.keys()) == set(incremental_archive.keys())
        size = request_size(full, fmt, model="m", max_tokens=50)
        assert state.request_size(incremental, max_tokens=50) == size
        weights, expected = state.weights(incremental), WeightTotals(full)
        assert (weights.weight, weights.image_chars, weights.image_tokens) == (
            expected.weight,
            expected.image_chars,
            expected.image_tokens,
        )
        assert weights.weight == total_weight(full)
        assert sent.size(tuple(out), tools=[{"name": "t"}]) == request_size(
            full_out, fmt, model="m", tools=[{"name": "t"}]
        )


def test_a_consumed_state_is_refused() -> None:
    state = TurnState.new()
    history = [Message.user("hi"), Message.assistant("hello")]
    _, _, successor = dedup_step(history, state, archive=MemoryArchive())
    with pytest.raises(ConfigError, match="already used"):
        dedup_step(history, state, archive=MemoryArchive())
    dedup_step(history, successor, archive=MemoryArchive())


def test_a_turn_looks_at_the_new_messages_not_the_history(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the first step, a new turn parses and sizes the messages it changed, nothing else."""
    from ctxrecover.wire import size as wire_size

    parsed: list[Message] = []

    def counting_parser(msg: Message, call: ToolCall | None) -> list[Any]:
        parsed.append(msg)
        return parse_file_blocks(msg, call)

    parsers = (counting_parser,)
    archive = MemoryArchive()
    history: list[Message] = []
    for n in range(200):
        call = ToolCall(f"c{n}", "read_file", json.dumps({"path": f"f{n}.py"}))
        history += [
            Message.user(f"read f{n}"),
            Message.assistant("", tool_calls=[call]),
            Message.tool(call.id, _read(f"f{n}.py", 1, 30, ranged=False)),
        ]
    state = TurnState.new("anthropic", model="m")
    history, _, state = dedup_step(history, state, archive=archive, parsers=parsers)
    state.request_size(history)
    assert len(parsed) == 200
    parsed.clear()
    measured: list[Message] = []
    real_measure = wire_size._measure
    monkeypatch.setattr(wire_size, "_measure", lambda m, f: measured.append(m) or real_measure(m, f))
    call = ToolCall("again", "read_file", json.dumps({"path": "f7.py"}))
    turn = [
        Message.user("read f7 again"),
        Message.assistant("", tool_calls=[call]),
        Message.tool("again", _read("f7.py", 1, 30, ranged=False)),
    ]
    history, report, state = dedup_step([*history, *turn], state, archive=archive, parsers=parsers)
    assert report.reads_superseded == 1
    stub = history[3 * 7 + 2]
    assert stub.content.startswith("[Earlier read of f7.py superseded")
    assert state.request_size(history) == request_size(history, "anthropic", model="m")
    assert parsed == [turn[2], stub]  # the new read, and the stub it made (no read)
    assert measured == [*turn, stub]


def test_microcompact_step_folds_each_result_when_its_age_crosses_a_threshold() -> None:
    archive = MemoryArchive()
    state = TurnState.new()
    big = Message.tool("c1", "x" * 5000)
    history: list[Message] = [Message.assistant("", tool_calls=[ToolCall("c1", "run")]), big]
    stages = []
    for _ in range(5):
        history = [*history, Message.user("go"), Message.assistant("ok")]
        history, report, state = microcompact_step(history, state, archive=archive)
        stages.append((report.truncated, report.summarized))
    assert stages == [(0, 0), (1, 0), (0, 0), (0, 1), (0, 0)]
    assert history[1].content.startswith("[Old tool result cleared — 1 lines, 5000 chars, text]")
    assert marker(archive_key(big.content)) in history[1].content


# -- the facts a session hands to a recovery step (ctxrecover.passes.facts) --------------------------


def _ladder_steps() -> dict[str, RecoveryStep]:
    return {
        "level1": Level1(),
        "level2": Level2(),
        "level2-keep-3": Level2(keep=3),
        "level3": Level3(),
        "level1+level2": Level1() + Level2(keep=4),
    }


@settings(max_examples=150, deadline=None)
@given(session=_sessions(), fmt=st.sampled_from(list(WireFormat)), data=st.data())
def test_the_facts_a_session_hands_equal_the_facts_recomputed_and_the_ladder_does_the_same_with_them(
    session: tuple[list[Message], list[list[Any]]], fmt: WireFormat, data: st.DataObject
) -> None:
    """At every turn of a random session the incremental facts (pairing validity, content chars,
    system messages, each range's archive parts) equal the facts recomputed from the history, and
    every ladder step given them returns the history, report and archive it returns recomputing."""
    start, turns = session
    history, archive = list(start), MemoryArchive()
    state = TurnState.new(fmt, model="m")
    watch_facts(state)
    for edit, at, span, new, originals in turns:
        for original in originals:
            archive.put(original)
        history = _edited(history, edit, at, span, new)
        history, _, _, state = _incremental(history, archive, state)
        facts = indexed_facts(state, history)
        assert facts == history_facts(history)
        assert facts.describes(history) and not facts.describes(list(history))
        first = data.draw(st.integers(0, len(history)), label="first")
        last = data.draw(st.integers(first, len(history)), label="last")
        assert facts.range_parts(first, last) == range_parts(history[first:last])
        name = data.draw(st.sampled_from(sorted(_ladder_steps())), label="step")
        step = _ladder_steps()[name]
        handed_archive, recomputing_archive = MemoryArchive(), MemoryArchive()
        handed = step(history, _recovery_context(handed_archive, facts))
        recomputed = step(history, _recovery_context(recomputing_archive, None))
        assert handed == recomputed
        assert dict(
            zip(handed_archive.keys(), map(handed_archive.get, handed_archive.keys()), strict=True)
        ) == (
            dict(
                zip(
                    recomputing_archive.keys(),
                    map(recomputing_archive.get, recomputing_archive.keys()),
                    strict=True,
                )
            )
        )


def _recovery_context(archive: MemoryArchive, facts: HistoryFacts | None) -> RecoveryContext:
    return dataclasses.replace(RecoveryContext.from_policy(DEFAULT_POLICY, archive), facts=facts)


def test_facts_taken_before_the_index_moved_on_gather_the_parts_from_the_messages() -> None:
    """A snapshot of the index is only handed while the index still holds that history."""
    state = TurnState.new()
    watch_facts(state)
    history = [Message.user("one"), Message.assistant("two")]
    facts = indexed_facts(state, history)
    later = [*history, Message.user("three")]
    state.weights(later)  # the index now holds another list: the old facts' parts come from messages
    assert facts.range_parts(0, 2) == range_parts(history)
    assert indexed_facts(state, later).range_parts(0, 3) == range_parts(later)


def test_a_replacement_with_other_images_moves_the_later_members() -> None:
    """Same layout, another number of inline images: the members after it shift in the index."""
    state = TurnState.new()
    watch_facts(state)
    pictured = Message.user("look", images=(Image(data="aGVsbG8="), Image(data="d29ybGQ=")))
    history = [Message.user("start"), pictured, Message.assistant("seen"), Message.user("next")]
    indexed_facts(state, history)
    edited = [history[0], pictured.replace(images=(Image(data="aGVsbG8="),)), *history[2:]]
    facts = indexed_facts(state, edited)
    assert facts == history_facts(edited)
    for first, last in ((0, 4), (1, 3), (2, 4), (3, 4)):
        assert facts.range_parts(first, last) == range_parts(edited[first:last])
