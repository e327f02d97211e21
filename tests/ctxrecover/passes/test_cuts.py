"""Cuts never split a word (SPEC §12): a preview or stub holds only the original's whole tokens
and the library's fixed words, whatever the text, the room and the pass that cuts it."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover.archive import MemoryArchive, archive_key
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.cuts import head_end, is_word_boundary, tail_start
from ctxrecover.passes.floor import SKILL_CUT_TEXT
from ctxrecover.passes.microcompact import (
    CONTENT_KINDS,
    DEFAULT_KIND,
    SUMMARY_TEXT,
    TRUNCATION_TEXT,
    apply_microcompact,
)
from ctxrecover.passes.shrink import SHRINK_SEPARATOR, shrink_to_budget
from ctxrecover.passes.tool_budget import (
    PREVIEW_OMISSION_TEXT,
    enforce_tool_result_budget,
    tool_result_preview,
)
from ctxrecover.passes.trim import BLOCK_OMISSION, FEEDBACK_SEPARATOR, MIN_FEEDBACK_MAX_CHARS, trim_history
from ctxrecover.passes.truncate import (
    RECALL_SUFFIX,
    TRUNCATION_SEPARATOR,
    cap_assistant_messages,
    keep_last,
    truncate_head_tail,
)
from ctxrecover.summarize.prompt import TRUNCATION_SEPARATOR as SUMMARIZATION_SEPARATOR
from ctxrecover.summarize.prompt import render_segment


def _fixed_text_re(template: str) -> str:
    """A fixed text of the library as a pattern: its counts and markers are its own words."""
    pattern = re.escape(template)
    for placeholder in ("%d",):
        pattern = pattern.replace(re.escape(placeholder), r"\d+")
    for placeholder in ("%s", "{marker}"):
        pattern = pattern.replace(re.escape(placeholder), r"<<ccr:[0-9a-f]{16}>>")
    return pattern


FIXED_TEXTS = (
    TRUNCATION_SEPARATOR,
    SHRINK_SEPARATOR,
    PREVIEW_OMISSION_TEXT,
    TRUNCATION_TEXT,
    RECALL_SUFFIX,
    BLOCK_OMISSION,
    FEEDBACK_SEPARATOR,
    SKILL_CUT_TEXT,
    SUMMARIZATION_SEPARATOR,
)
KIND_LABELS = "|".join(re.escape(label) for label in (*(kind[2] for kind in CONTENT_KINDS), DEFAULT_KIND))
SUMMARY_RE = re.escape(SUMMARY_TEXT).replace("%d", r"\d+").replace("%s", f"(?:{KIND_LABELS})")
FIXED_RE = re.compile("|".join([SUMMARY_RE, *(_fixed_text_re(t) for t in FIXED_TEXTS)]))


def new_tokens(cut: str, original: str) -> set[str]:
    """Whitespace-separated tokens of ``cut``, fixed texts aside, that are no token of ``original``."""
    return set(FIXED_RE.sub(" ", cut).split()) - set(original.split())


# Agent content: code, shell, paths, SQL, HTML, and the words the issue saw cut into new ones.
WORDS = st.sampled_from(
    [
        "selection",
        "/etc/passwd.bak",
        "<script_name>",
        "git",
        "commit",
        "-m",
        '"$(cat',
        "<<'EOF'",
        "&&",
        "|",
        "tail",
        "-20",
        "#!/bin/bash",
        "${CLAUDE_PLUGIN_ROOT}",
        "SELECT",
        "name",
        "FROM",
        "users;",
        "def",
        "main():",
        "return",
        "../../etc/shadow",
        "C:\\Windows\\system32",
        "onerror=alert(1)",
        "x" * 120,
    ]
)
SPACES = st.sampled_from([" ", " ", " ", "\n", "\n", "\t", "  ", "\r\n", "\n\n", "\u00a0"])
PIECES = st.one_of(WORDS, st.text(st.characters(blacklist_categories=["Cs"]), max_size=12))
TEXTS = st.lists(st.tuples(PIECES, SPACES), min_size=1, max_size=300).map(
    lambda pairs: "".join(word + space for word, space in pairs)
)
LONG_TEXTS = TEXTS.map(lambda text: text * (6000 // len(text) + 1))  # over every room below
FRACTIONS = st.floats(0.0, 1.0)


@settings(max_examples=300, deadline=None)
@given(TEXTS, st.integers(0, 3000), st.integers(0, 3000))
def test_head_end_and_tail_start_split_no_word_and_keep_within_their_room(
    text: str, room: int, floor: int
) -> None:
    end = head_end(text, room)
    assert 0 <= end <= min(max(room, 0), len(text))
    assert is_word_boundary(text, end)
    start = tail_start(text, room, floor)
    assert min(len(text), max(floor, len(text) - room)) <= start <= len(text)
    assert is_word_boundary(text, start)


@settings(max_examples=150, deadline=None)
@given(TEXTS, st.integers(0, 3000), st.integers(0, 1000))
def test_a_tool_result_preview_holds_only_whole_tokens_of_the_result(text: str, head: int, tail: int) -> None:
    preview = tool_result_preview(text, archive_key(text), head=head, tail=tail)
    assert new_tokens(preview, text) == set()


@settings(max_examples=150, deadline=None)
@given(
    TEXTS,
    FRACTIONS,
    FRACTIONS,
    st.sampled_from([TRUNCATION_SEPARATOR, SHRINK_SEPARATOR, FEEDBACK_SEPARATOR]),
)
def test_a_head_tail_cut_holds_only_whole_tokens_and_keeps_its_limit(
    text: str, share: float, ratio: float, separator: str
) -> None:
    limit = int(len(text) * share)
    cut = truncate_head_tail(text, limit, head_ratio=ratio, separator=separator)
    assert new_tokens(cut, text) == set()
    assert len(cut) <= max(limit, len(separator.replace("%d", str(len(text)))))


@settings(max_examples=100, deadline=None)
@given(LONG_TEXTS, FRACTIONS, FRACTIONS)
def test_shrinking_and_shrinking_again_holds_only_whole_tokens(text: str, share: float, again: float) -> None:
    archive = MemoryArchive()
    history = [Message.system("rules"), Message.user(text)]
    budget = int(len(text) * share)
    once, _ = shrink_to_budget(history, budget, archive=archive)
    twice, _ = shrink_to_budget(once, int(budget * again), archive=archive)
    assert new_tokens(once[1].content, text) == set()
    assert new_tokens(twice[1].content, text) == set()


@settings(max_examples=100, deadline=None)
@given(LONG_TEXTS, FRACTIONS, FRACTIONS, st.sampled_from([2, 4]))
def test_a_microcompact_stub_holds_only_whole_tokens(text: str, share: float, ratio: float, age: int) -> None:
    head = max(1, int(len(text) * share * ratio * 0.9))
    tail = int(len(text) * share * (1 - ratio) * 0.9)
    history = [Message.user("go"), Message.assistant("", tool_calls=[ToolCall("t1", "run")])]
    history.append(Message.tool("t1", text))
    history += [Message.assistant("ok"), Message.user("next")] * age
    out, _ = apply_microcompact(
        history, archive=MemoryArchive(), head_chars=head, tail_chars=tail, min_content=head + tail + 1
    )
    assert new_tokens(out[2].content, text) == set()


@settings(max_examples=100, deadline=None)
@given(LONG_TEXTS, FRACTIONS, FRACTIONS)
def test_budgeted_tool_results_hold_only_whole_tokens(text: str, share: float, ratio: float) -> None:
    head = max(1, int(len(text) * share * ratio * 0.9))
    tail = int(len(text) * share * (1 - ratio) * 0.9)
    history = [Message.assistant("", tool_calls=[ToolCall("t1", "run")]), Message.tool("t1", text)]
    out, _ = enforce_tool_result_budget(
        history,
        archive=MemoryArchive(),
        max_result_chars=head + tail + 1,
        preview_head=head,
        preview_tail=tail,
        turn_budget_chars=head + tail + 1,
        turn_floor=max(1, (head + tail) // 2),
    )
    assert new_tokens(out[1].content, text) == set()


@settings(max_examples=100, deadline=None)
@given(LONG_TEXTS, FRACTIONS)
def test_recovery_cuts_hold_only_whole_tokens(text: str, share: float) -> None:
    cap = max(200, int(len(text) * share))
    archive = MemoryArchive()
    capped, _ = cap_assistant_messages([Message.user("go"), Message.assistant(text)], cap, archive=archive)
    assert new_tokens(capped[1].content, text) == set()
    history = [Message.user("go"), Message.assistant("on it"), Message.user(text)]
    kept, _ = keep_last(history, 2, archive=archive, per_message_cap=cap)
    assert new_tokens(kept[-1].content, text) == set()


@settings(max_examples=100, deadline=None)
@given(LONG_TEXTS, LONG_TEXTS, FRACTIONS)
def test_trimmed_feedback_holds_only_whole_tokens(block: str, rest: str, share: float) -> None:
    original = f"<tool_output>{block}</tool_output>\n{rest}"
    block_max = max(200, int(len(block) * share))
    trimmed, _ = trim_history(
        [Message.user(original, agent_feedback=True)],
        archive=MemoryArchive(),
        block_max_chars=block_max,
        block_head_chars=block_max // 2,
        block_tail_chars=block_max // 4,
        feedback_max_chars=max(MIN_FEEDBACK_MAX_CHARS, block_max),
    )
    # the block's own tags are kept whole around its cut: when the block starts with one long word, the tag
    # the original glued to it stands alone (a structural boundary, not a cut inside a word)
    assert new_tokens(trimmed[0].content, original) - {"<tool_output>", "</tool_output>"} == set()


@settings(max_examples=60, deadline=None)
@given(st.lists(LONG_TEXTS, min_size=1, max_size=6))
def test_summarizer_input_holds_only_whole_tokens(texts: list[str]) -> None:
    texts = [t * 4 for t in texts]
    segment = [Message.user(t) if n % 2 == 0 else Message.assistant(t) for n, t in enumerate(texts)]
    rendered = render_segment(segment, archive=None, window_tokens=1000, prompt_chars=0)
    framing = {f"[{role}]:" for role in ("user", "assistant")}
    assert new_tokens(rendered, " ".join(texts)) - framing == set()


# -- the cuts the issue saw refused by CRS (933210, 932110, 941370) -------------------------


@pytest.mark.parametrize(
    ("word", "fragment"),
    [("selection", "select"), ("/etc/passwd.bak", "/etc/passwd"), ("<script_name>", "<script")],
)
def test_a_long_line_is_cut_before_the_word_the_room_ends_in(word: str, fragment: str) -> None:
    """The room of the head ends inside ``word``, right after ``fragment``, the token the old cut
    made: the snapped cut keeps the words before it and leaves ``word`` out whole."""
    words = "lorem " * 332  # one long line: no newline to snap to
    text = words + word + " " + "ipsum " * 400 + "\nlast line of the result\n" + "y" * 20_000
    room = len(words) + len(fragment)
    preview = tool_result_preview(text, archive_key(text), head=room, tail=0)
    assert preview.startswith(words + PREVIEW_OMISSION_TEXT.split("%d")[0])
    assert fragment not in preview.split() and new_tokens(preview, text) == set()
    history = [Message.user("go"), Message.assistant("", tool_calls=[ToolCall("t1", "run")])]
    history += [Message.tool("t1", text), Message.assistant("a"), Message.assistant("b")]
    stub = apply_microcompact(history, archive=MemoryArchive(), head_chars=room, tail_chars=0)[0][2]
    assert stub.content.startswith(words + "\n[... ")
    assert fragment not in stub.content.split() and new_tokens(stub.content, text) == set()
    shrunk = shrink_to_budget([Message.user(text)], 3 * room // 2, archive=MemoryArchive())[0][0]
    assert fragment not in shrunk.content.split() and new_tokens(shrunk.content, text) == set()


def test_a_word_longer_than_the_room_is_left_out_whole() -> None:
    blob = "QUJD" * 2000  # 8000 chars of base64: no line, no space
    assert truncate_head_tail(blob, 100) == TRUNCATION_SEPARATOR
    assert tool_result_preview(blob, archive_key(blob), head=50, tail=20) == (
        PREVIEW_OMISSION_TEXT % (len(blob), "<<ccr:" + archive_key(blob) + ">>")
    )
