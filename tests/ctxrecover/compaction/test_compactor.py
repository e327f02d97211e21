"""SPEC §5: planned compaction (HistoryCompactor) — levels, verbatim rules, back-off, events, undo."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ctxrecover.archive import (
    RANGE_HEADER,
    MemoryArchive,
    archive_key,
    archive_range,
    extract_keys,
    marker,
    recall,
)
from ctxrecover.compaction import (
    MANUAL_KEEP_RECENT,
    SUMMARY_HEADER,
    CompactionReport,
    HistoryCompactor,
)
from ctxrecover.errors import CompactionCancelled, ConfigError, SummarizerError
from ctxrecover.events import Event, EventBus, PostCompact, PreCompact, SessionStats, StatusEvent
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.pairing import validate_pairing
from ctxrecover.passes.parts import set_aside
from ctxrecover.passes.trim import trim_history
from ctxrecover.passes.truncate import (
    VERBATIM_RESULT_HEADER,
    leading_system_count,
    render_transcript,
    snap_to_tool_boundary,
)
from ctxrecover.policy import DEFAULT_POLICY
from ctxrecover.sizes import format_payload_size, total_weight
from ctxrecover.summarize import SEGMENT_HEADER, CancelToken, SummaryResult

TRIM = "🧹 Trim: stripping reasoning/dedup (no LLM)…"
SUMMARIZING = "🧠 Summarizing old messages via LLM (may take 30-90s — ESC cancels)…"
EMERGENCY = "✂ Emergency truncation — old messages dropped"
CANCELLED = "⚠ Compaction cancelled by user"
REFUSAL = "I'm sorry, I cannot help with that."
GOOD_SUMMARY = (
    "## Files Read\n- src/app.py (120 lines) — the CLI entry point\n\n"
    "## Current Task State\n- Done: parsing\n- Pending: the report writer"
)


# -- helpers ---------------------------------------------------------------------------


def text(n: int, tag: str = "") -> str:
    """Distinct, position-revealing text of exactly n chars."""
    return (tag + "".join(f"{i:07d}|" for i in range(n // 8 + 1)))[:n]


def call(call_id: str, name: str = "read_file") -> ToolCall:
    return ToolCall(call_id, name, f'{{"path": "{call_id}.py"}}')


def agent_history(turns: int = 6, size: int = 2000, first: int = 0) -> list[Message]:
    """System prompt, then turns of user → assistant(tool call) → tool result → assistant answer
    (numbered from ``first``, so later turns carry texts of their own)."""
    history = [Message.system("You are a coding agent.")]
    for t in range(first, first + turns):
        history += [
            Message.user(f"task {t}\n" + text(size // 4, f"u{t}")),
            Message.assistant(f"reading {t}", tool_calls=[call(f"c{t}")]),
            Message.tool(f"c{t}", f"result {t}\n" + text(size, f"r{t}")),
            Message.assistant(f"answer {t}\n" + text(size // 2, f"a{t}")),
        ]
    return history


def reachable(history: list[Message], store: MemoryArchive) -> tuple[list[str], set[str]]:
    """Every text of ``history`` plus every archive entry reachable from its markers, transitively,
    and the keys reached."""
    texts = [m.content for m in history] + [c.arguments for m in history for c in m.tool_calls]
    pending = [k for t in texts for k in extract_keys(t)]
    seen: set[str] = set()
    while pending:
        key = pending.pop()
        if key in seen:
            continue
        seen.add(key)
        found = recall(store, marker(key)).found
        assert key in found, f"marker {key} points at nothing"
        texts.append(found[key])
        pending += extract_keys(found[key])
    return texts, seen


def _squeeze(s: str) -> str:
    # trim collapses runs of 3+ newlines without a marker (whitespace only)
    return re.sub(r"\n{3,}", "\n\n", s)


def assert_nothing_lost(original: list[Message], output: list[Message], store: MemoryArchive) -> None:
    """Every original text is in the output or recallable from it through markers, transitively.

    A text that is itself a compaction product (it carries markers, e.g. a shrunk message
    compacted again) counts as kept when all its markers stay reachable.
    """
    texts, keys = reachable(output, store)
    corpus = [_squeeze(t) for t in texts]
    for msg in original:
        for piece in [msg.content, *(c.arguments for c in msg.tool_calls)]:
            if any(_squeeze(piece) in t for t in corpus):
                continue
            own_keys = set(extract_keys(piece))
            assert own_keys and own_keys <= keys, f"lost: {piece[:60]!r}"


def fingerprint(history: list[Message]) -> list[tuple[int, dict]]:
    return [(id(m), m.to_dict()) for m in history]


@dataclass
class FakeSummarizer:
    """Answers ``answer(segment_text)`` (or raises what it returns); records prompts."""

    answer: Callable[[str], str | BaseException]
    window_tokens: int = 32_000
    prompts: list[str] = field(default_factory=list)
    instructions: list[str | None] = field(default_factory=list)
    on_call: Callable[[CancelToken | None], None] | None = None

    def summarize(
        self,
        prompt: str,
        *,
        instruction: str | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> SummaryResult:
        self.prompts.append(prompt)
        self.instructions.append(instruction)
        if self.on_call is not None:
            self.on_call(cancel)
        answer = self.answer(prompt.partition(SEGMENT_HEADER)[2])
        if isinstance(answer, BaseException):
            raise answer
        return SummaryResult(answer, input_tokens=len(prompt) // 4, output_tokens=10, cost_usd=0.002)

    @property
    def calls(self) -> int:
        return len(self.prompts)


def extractive(segment: str) -> str:
    """A deterministic extractive summary: the first line of each rendered message."""
    return "\n".join(line for line in segment.splitlines() if re.match(r"\[(user|assistant|tool)\]: ", line))


def fixed(summary: str) -> Callable[[str], str]:
    return lambda _segment: summary


def overflow_error(_segment: str) -> SummarizerError:
    return SummarizerError("summarizer request overflowed its own window (HTTP 400, window 8192 tokens)")


@dataclass
class Harness:
    """A compactor wired to a memory archive, an event recorder, stats and a memory sink."""

    summarizer: FakeSummarizer | None = None
    policy: object = DEFAULT_POLICY
    store: MemoryArchive = field(default_factory=MemoryArchive)
    events: list[Event] = field(default_factory=list)
    stats: SessionStats = field(default_factory=SessionStats)
    flushed: list[list[Message]] = field(default_factory=list)
    compactor: HistoryCompactor = field(init=False)

    def __post_init__(self) -> None:
        self.compactor = HistoryCompactor(
            self.policy,
            self.store,
            summarizer=self.summarizer,
            events=EventBus(self.events.append),
            stats=self.stats,
            memory_sink=self.flushed.append,
        )

    def statuses(self) -> list[str]:
        return [e.message for e in self.events if isinstance(e, StatusEvent)]

    def hooks(self) -> list[Event]:
        return [e for e in self.events if isinstance(e, PreCompact | PostCompact)]

    def clear(self) -> None:
        self.events.clear()


def start_line(history: list[Message], budget: int) -> str:
    return (
        f"📦 Compacting history ({len(history)} msgs, {format_payload_size(total_weight(history))} "
        f"→ target {format_payload_size(budget)})"
    )


def starts_with_user(history: list[Message]) -> bool:
    rest = [m for m in history[leading_system_count(history) :] if m.role != "system"]
    return not rest or rest[0].role == "user"


# -- level 0: under budget ---------------------------------------------------------------


def test_under_budget_is_skipped_with_its_events() -> None:
    h = Harness(FakeSummarizer(extractive))
    history = agent_history(2)
    budget = total_weight(history) + 1
    result = h.compactor.compact(history, budget_chars=budget, keep_recent=8)
    assert result.history == history and result.history is not history
    assert all(a is b for a, b in zip(result.history, history, strict=True))
    assert result.report.skipped and result.report.level == 0 and not result.report.cancelled
    assert h.statuses() == [start_line(history, budget)]
    assert h.hooks() == [PreCompact("auto"), PostCompact("auto", "skipped")]
    assert h.compactor.undo_levels == 0 and h.compactor.undo() is None
    assert h.stats.skipped_compactions == 1 and h.stats.compactions == 0
    assert h.stats.cache_rebuilds_expected == 0 and h.summarizer.calls == 0


def test_start_status_formats_sizes_exactly() -> None:
    h = Harness()
    history = [Message.user("x" * 129_434)]
    h.compactor.compact(history, budget_chars=200_000, keep_recent=8)
    assert h.statuses() == ["📦 Compacting history (1 msgs, 126.4 KB → target 195.3 KB)"]


# -- level 1: trim -------------------------------------------------------------------------


def test_trim_enough_stops_at_level_one() -> None:
    h = Harness(FakeSummarizer(extractive))
    reasoning = "<reasoning>" + text(6000, "think") + "</reasoning>"
    history = [Message.system("sys"), Message.user("go"), Message.assistant(reasoning + "\n\n\n\nDone.")]
    before = total_weight(history)
    result = h.compactor.compact(history, budget_chars=1000, keep_recent=8)
    after = total_weight(result.history)
    assert h.statuses() == [
        start_line(history, 1000),
        TRIM,
        f"✓ Trim was enough ({format_payload_size(before)} → {format_payload_size(after)})",
    ]
    assert result.report.level == 1 and not result.report.skipped and after <= 1000
    assert result.history[2].content.startswith("Done.")
    assert h.hooks() == [PreCompact("auto"), PostCompact("auto", "applied")]
    assert h.stats.compactions == 1 and h.stats.level3_compactions == 0
    assert h.stats.cache_rebuilds_expected == 1 and h.summarizer.calls == 0
    assert_nothing_lost(history, result.history, h.store)


# -- level 2: summary ------------------------------------------------------------------------


def test_summary_applied_replaces_the_segment_and_keeps_recent() -> None:
    h = Harness(FakeSummarizer(extractive))
    history = agent_history(6)
    budget = total_weight(history) // 2
    result = h.compactor.compact(history, budget_chars=budget, keep_recent=8)
    out, report = result.history, result.report
    assert out[0] is history[0]
    summary = out[1]
    assert summary.role == "user" and summary.is_summary and summary.summary_of == 16
    assert summary.content.startswith(SUMMARY_HEADER % 16)
    assert summary.content.startswith("[STRUCTURED SUMMARY — covering 16 earlier messages]\n\n[user]: task 0")
    assert re.search(
        r"\n\n\[full transcript of the summarized segment recoverable via @recall <<ccr:[0-9a-f]{16}>>\]\Z",
        summary.content,
    )
    assert out[2:] == history[-8:] and all(a is b for a, b in zip(out[2:], history[-8:], strict=True))
    assert h.statuses() == [
        start_line(history, budget),
        TRIM,
        SUMMARIZING,
        f"✓ Summary applied ({len(history)} → {len(out)} msgs, "
        f"{format_payload_size(total_weight(history))} → {format_payload_size(total_weight(out))})",
    ]
    assert report.level == 2 and report.summarizer_calls == 1 and report.reached_budget
    assert report.summarizer_cost_usd == pytest.approx(0.002)
    assert report.messages_before == len(history) and report.messages_after == len(out)
    assert validate_pairing(out) and starts_with_user(out)
    assert_nothing_lost(history, out, h.store)
    # the archived transcript holds every char of the summarized segment
    key = extract_keys(summary.content)[-1]
    assert (h.store.get(key) or "").startswith(RANGE_HEADER % 16)  # one small index of the 16 messages
    assert recall(h.store, key).found[key] == render_transcript(history[1:-8])


def test_summarizer_input_restores_a_range_behind_a_stub_as_its_transcript() -> None:
    h = Harness(FakeSummarizer(extractive))
    older = [Message.user("question " + text(300, "q")), Message.assistant("answer " + text(300, "a"))]
    range_key = archive_range(h.store, older)
    stub = Message.user(f"[earlier exchange folded: {marker(range_key)}]")
    history = [Message.system("sys"), stub, *agent_history(5, size=400)[1:]]
    h.compactor.compact(history, budget_chars=total_weight(history) // 2, keep_recent=8)
    assert h.summarizer is not None and h.summarizer.calls == 1
    segment = h.summarizer.prompts[0].partition(SEGMENT_HEADER)[2]
    assert f"[user]: {render_transcript(older)}" in segment  # the transcript, not the range index
    assert RANGE_HEADER % 2 not in segment


def test_a_message_set_aside_for_a_content_block_never_reaches_the_summarizer_but_stays_recallable() -> None:
    # SPEC §11: a gateway refused to carry it; restoring it into the summarizer's prompt (SPEC §5
    # restores folded stubs) would send it again and have the summary quote it, refused once more.
    h = Harness(FakeSummarizer(extractive))
    refused = "-- slow query log: SELECT id FROM users WHERE email = '' OR 1=1 -- " + text(400, "q")
    history = agent_history(5, size=400)
    history[3] = Message.tool("c0", refused)
    history, key = set_aside(history, 3, archive=h.store)
    h.compactor.compact(history, budget_chars=total_weight(history) // 2, keep_recent=8)
    assert h.summarizer is not None and h.summarizer.calls == 1
    segment = h.summarizer.prompts[0].partition(SEGMENT_HEADER)[2]
    assert f"[tool]: {history[3].content}\n\n" in segment  # the stub, read as it is
    assert "OR 1=1" not in segment
    assert recall(h.store, key).found[key] == refused


def test_segment_scope_summary_counts_messages_covered_by_an_earlier_summary() -> None:
    # summary_scope="segment" (the seed's rule) summarizes the earlier summary again
    h = Harness(FakeSummarizer(extractive), policy=DEFAULT_POLICY.replace(summary_scope="segment"))
    earlier = Message.user(
        "[STRUCTURED SUMMARY — covering 40 earlier messages]\n\nnotes", is_summary=True, summary_of=40
    )
    history = [Message.system("sys"), earlier, *agent_history(5)[1:]]
    result = h.compactor.compact(history, budget_chars=total_weight(history) // 2, keep_recent=8)
    assert result.history[1].summary_of == 40 + 12
    assert result.history[1].content.startswith(SUMMARY_HEADER % 52)
    assert "[user]: [STRUCTURED SUMMARY — covering 40 earlier messages]" in h.summarizer.prompts[0]


def test_summarizer_gets_the_rendered_segment_and_usage_is_counted() -> None:
    h = Harness(FakeSummarizer(extractive))
    history = agent_history(6)
    result = h.compactor.compact(history, budget_chars=total_weight(history) // 2, keep_recent=8)
    prompt = h.summarizer.prompts[0]
    assert prompt.count("[user]: task") == 4 and "[tool_calls: read_file]" in prompt
    assert h.summarizer.instructions == [None]
    assert h.stats.summarizer_calls == 1
    assert h.stats.summarizer_input_tokens == result.report.summarizer_input_tokens == len(prompt) // 4
    assert h.stats.summarizer_output_tokens == 10
    assert h.stats.chars_archived == result.report.chars_archived > 0


@pytest.mark.parametrize(
    ("answer", "reason", "calls"),
    [
        (
            fixed(REFUSAL),
            'summary rejected (refusal: "I\'m sorry, I cannot help with that."; '
            'refusal: "I\'m sorry, I cannot help with that.")',
            2,
        ),
        (
            fixed("ok"),  # segment = turns 0–17: 10 × 3560 + 8 × 3565 = 64 120 chars
            "summary rejected (too short: 2 chars for a 64120-char segment (minimum 80); "
            "too short: 2 chars for a 64120-char segment (minimum 80))",
            2,
        ),
        (overflow_error, "summarizer request overflowed its own window (HTTP 400, window 8192 tokens)", 1),
    ],
    ids=["refusing", "too-short", "overflowing"],
)
def test_failed_summary_falls_back_to_truncation(
    answer: Callable[[str], str | BaseException], reason: str, calls: int
) -> None:
    h = Harness(FakeSummarizer(answer))
    history = agent_history(20)
    budget = total_weight(history) // 2
    result = h.compactor.compact(history, budget_chars=budget, keep_recent=8)
    out = result.history
    assert h.statuses() == [
        start_line(history, budget),
        TRIM,
        SUMMARIZING,
        f"⚠ Summarization failed ({reason}) — falling back to truncation",
        EMERGENCY,
        f"✓ Truncated ({len(history)} → {len(out)} msgs)",
    ]
    assert result.report.level == 3 and result.report.summary_failure == reason
    assert result.report.summarizer_calls == h.summarizer.calls == calls
    assert h.stats.summarizer_calls == calls and h.stats.level3_compactions == 1
    assert out[1].content.startswith("[CONTEXT TRUNCATED: 72 messages removed due to context window limit.")
    assert out[2:] == history[-8:] and starts_with_user(out) and validate_pairing(out)
    assert_nothing_lost(history, out, h.store)


def test_segment_under_the_minimum_is_not_summarized() -> None:
    h = Harness(FakeSummarizer(extractive))
    history = [Message.system("s"), *agent_history(3)[1:]]
    # keep_recent=9 leaves a 3-message segment: fewer than summary_min_messages (4)
    result = h.compactor.compact(history, budget_chars=100, keep_recent=9)
    assert h.summarizer.calls == 0 and SUMMARIZING not in h.statuses()
    assert result.report.level == 3


def test_no_summarizer_goes_straight_to_truncation() -> None:
    h = Harness(None)
    history = agent_history(6)
    budget = total_weight(history) // 2
    result = h.compactor.compact(history, budget_chars=budget, keep_recent=8)
    assert h.statuses() == [
        start_line(history, budget),
        TRIM,
        EMERGENCY,
        f"✓ Truncated ({len(history)} → {len(result.history)} msgs)",
    ]
    assert result.report.level == 3 and result.report.summarizer_calls == 0


# -- incremental and target summaries (Policy.summary_scope) -------------------------------


def earlier_summary(chars: int = 0, covering: int = 40) -> Message:
    body = "notes" + text(chars, "s") if chars else "notes"
    return Message.user(SUMMARY_HEADER % covering + body, is_summary=True, summary_of=covering)


def test_incremental_summary_keeps_the_earlier_summary_as_is_and_covers_only_new_messages() -> None:
    h = Harness(FakeSummarizer(extractive))
    earlier = earlier_summary()
    history = [Message.system("sys"), earlier, *agent_history(5)[1:]]
    out = h.compactor.compact(history, budget_chars=total_weight(history) // 2, keep_recent=8).history
    assert out[1] is earlier
    assert out[2].is_summary and out[2].summary_of == 12
    assert out[2].content.startswith(SUMMARY_HEADER % 12 + "[user]: task 0")
    assert out[3:] == history[-8:]
    assert "STRUCTURED SUMMARY" not in h.summarizer.prompts[0]
    assert_nothing_lost(history, out, h.store)


def test_three_successive_incremental_summaries_stack_in_order_and_lose_nothing() -> None:
    h = Harness(FakeSummarizer(extractive))
    conversation = agent_history(6)
    history = list(conversation)
    summaries: list[Message] = []
    for round_ in range(3):
        if round_:
            more = agent_history(4, first=6 + 4 * (round_ - 1))[1:]
            conversation += more
            history += more
        history = h.compactor.compact(history, budget_chars=total_weight(history) // 2, keep_recent=8).history
        found = [m for m in history if m.is_summary]
        assert len(found) == round_ + 1
        assert all(a is b for a, b in zip(found, summaries, strict=False))  # earlier ones untouched
        summaries = found
    assert h.summarizer.calls == 3
    assert not any("STRUCTURED SUMMARY" in prompt for prompt in h.summarizer.prompts)
    assert [s.summary_of for s in summaries] == [16, 16, 16]
    assert history == [conversation[0], *summaries, *conversation[-8:]]
    assert validate_pairing(history) and starts_with_user(history)
    assert_nothing_lost(conversation, history, h.store)


@pytest.mark.parametrize(("fraction", "kept"), [(0.25, False), (0.5, True)])
def test_earlier_summaries_over_their_share_of_the_budget_are_summarized_again(
    fraction: float, kept: bool
) -> None:
    policy = DEFAULT_POLICY.replace(summaries_budget_fraction=fraction)
    h = Harness(FakeSummarizer(extractive), policy=policy)
    earlier = earlier_summary(3000)
    history = [Message.system("sys"), earlier, *agent_history(5)[1:]]
    budget = 12_000
    assert budget * 0.25 < len(earlier.content) <= budget * 0.5 and total_weight(history) > budget
    out = h.compactor.compact(history, budget_chars=budget, keep_recent=8).history
    assert (out[1] is earlier) is kept
    assert [m.summary_of for m in out if m.is_summary] == ([40, 12] if kept else [52])
    assert ("[user]: [STRUCTURED SUMMARY — covering 40" in h.summarizer.prompts[0]) is not kept
    assert_nothing_lost(history, out, h.store)


def test_earlier_summaries_are_summarized_again_when_keeping_them_cannot_reach_the_budget() -> None:
    h = Harness(FakeSummarizer(extractive))
    turns = agent_history(3)
    floor_and_recent = total_weight(turns[:1]) + total_weight(turns[-8:])
    share = DEFAULT_POLICY.summaries_budget_fraction
    budget = int(floor_and_recent / (1 - share / 2))
    earlier = earlier_summary(int(budget * share * 0.9))  # within its share, but it leaves no room
    history = [turns[0], earlier, *turns[1:]]
    out = h.compactor.compact(history, budget_chars=budget, keep_recent=8).history
    assert earlier not in out and out[1].summary_of == 44
    assert total_weight(out) <= budget and h.summarizer.calls == 1


def test_no_summary_is_attempted_when_the_recent_messages_alone_are_over_budget() -> None:
    h = Harness(FakeSummarizer(extractive))
    history = agent_history(10, size=4000)
    budget = total_weight(history[-8:]) // 2  # even an empty summary would leave it over budget
    result = h.compactor.compact(history, budget_chars=budget, keep_recent=8)
    assert h.summarizer.calls == 0 and SUMMARIZING not in h.statuses()
    assert result.report.level == 3 and result.report.summarizer_calls == 0
    assert h.compactor.backoff_remaining == 0 and not result.report.backoff_skip
    assert result.report.reached_budget
    assert_nothing_lost(history, result.history, h.store)


def test_manual_guidance_summarizes_the_whole_segment_earlier_summaries_included() -> None:
    h = Harness(FakeSummarizer(extractive))
    earlier = earlier_summary()
    history = [Message.system("sys"), earlier, *agent_history(5)[1:]]
    out = h.compactor.compact(
        history,
        budget_chars=total_weight(history) * 2,
        keep_recent=MANUAL_KEEP_RECENT,
        trigger="manual",
        instruction="focus on the parser",
    ).history
    assert earlier not in out and out[1].summary_of == 40 + 16 and out[2:] == history[-4:]


TARGET_POLICY = DEFAULT_POLICY.replace(summary_scope="target")


def test_target_summary_covers_only_the_oldest_messages_it_needs() -> None:
    h = Harness(FakeSummarizer(fixed(GOOD_SUMMARY)), policy=TARGET_POLICY)
    history = agent_history(12)
    budget = total_weight(history) - 2000  # a small overshoot
    result = h.compactor.compact(history, budget_chars=budget, keep_recent=8)
    out, covered = result.history, result.history[1].summary_of
    assert 4 <= covered < len(history) - 1 - 8  # not the whole segment
    cut = 1 + covered
    assert history[cut].role != "tool" and snap_to_tool_boundary(history, cut) == cut  # a whole tool block
    assert all(a is b for a, b in zip(out[2:], history[1 + covered :], strict=True))  # the rest untouched
    assert total_weight(out) <= budget * TARGET_POLICY.summary_target_ratio
    assert h.summarizer.calls == 1 and result.report.level == 2
    assert_nothing_lost(history, out, h.store)


def test_target_summary_larger_than_expected_is_followed_by_one_over_the_rest() -> None:
    history = agent_history(12)
    budget = total_weight(history) - 2000
    answers = iter(["## Notes\n" + text(budget // 2, "big"), GOOD_SUMMARY])
    h = Harness(FakeSummarizer(lambda _segment: next(answers)), policy=TARGET_POLICY)
    result = h.compactor.compact(history, budget_chars=budget, keep_recent=8)
    out = result.history
    assert h.summarizer.calls == 2 and h.statuses().count(SUMMARIZING) == 2
    assert [m.is_summary for m in out] == [False, True, True] + [False] * 8
    assert out[1].summary_of + out[2].summary_of == len(history) - 1 - 8
    assert "big" not in h.summarizer.prompts[1]  # the first summary is kept as it is
    assert result.report.level == 2 and total_weight(out) <= budget
    assert_nothing_lost(history, out, h.store)


def test_trim_that_meets_the_budget_but_not_the_target_calls_no_summarizer() -> None:
    h = Harness(FakeSummarizer(extractive), policy=TARGET_POLICY)
    reasoning = "<reasoning>" + text(6000, "think") + "</reasoning>"
    answer = Message.assistant(reasoning + "Done. " + text(2000))
    history = [Message.system("sys"), Message.user("go"), answer]
    trimmed = total_weight(trim_history(history, archive=MemoryArchive())[0])
    result = h.compactor.compact(history, budget_chars=trimmed + 10, keep_recent=8)
    assert trimmed > (trimmed + 10) * TARGET_POLICY.summary_target_ratio
    assert result.report.level == 1 and h.summarizer.calls == 0


# -- back-off ------------------------------------------------------------------------------


def oversized(history: list[Message]) -> FakeSummarizer:
    """A summarizer whose every answer alone weighs half of ``history``: no summary converges."""
    return FakeSummarizer(fixed("## Notes\n" + text(total_weight(history) // 2, "n")))


def test_summary_that_does_not_converge_backs_off_two_compactions() -> None:
    history = agent_history(10, size=4000)
    h = Harness(oversized(history))
    budget = total_weight(history) // 2  # an empty summary would fit; this one alone fills the budget
    first = h.compactor.compact(history, budget_chars=budget, keep_recent=8)
    statuses = h.statuses()
    assert statuses[2] == SUMMARIZING
    assert statuses[3].startswith(f"✓ Summary applied ({len(history)} → 10 msgs, ")
    assert statuses[4:] == [EMERGENCY, f"✓ Truncated ({len(history)} → {len(first.history)} msgs)"]
    assert first.report.level == 3 and not first.report.backoff_skip and first.report.reached_budget
    assert h.compactor.backoff_remaining == 2
    for remaining in (1, 0):
        h.clear()
        again = h.compactor.compact(history, budget_chars=budget, keep_recent=8)
        assert again.report.backoff_skip and SUMMARIZING not in h.statuses()
        assert h.compactor.backoff_remaining == remaining
    assert h.summarizer.calls == 1
    h.clear()
    third = h.compactor.compact(history, budget_chars=budget, keep_recent=8)
    assert not third.report.backoff_skip and SUMMARIZING in h.statuses()
    assert h.summarizer.calls == 2


def test_converging_summary_sets_no_backoff() -> None:
    h = Harness(FakeSummarizer(extractive))
    history = agent_history(6)
    h.compactor.compact(history, budget_chars=total_weight(history) // 2, keep_recent=8)
    assert h.compactor.backoff_remaining == 0


def test_backoff_is_per_compactor() -> None:
    history = agent_history(10, size=4000)
    a, b = Harness(oversized(history)), Harness(oversized(history))
    budget = total_weight(history) // 2
    a.compactor.compact(history, budget_chars=budget, keep_recent=8)
    assert a.compactor.backoff_remaining == 2 and b.compactor.backoff_remaining == 0


# -- verbatim ------------------------------------------------------------------------------


def test_verbatim_messages_are_reattached_after_the_summary() -> None:
    h = Harness(FakeSummarizer(extractive))
    history = agent_history(6)
    recalled = Message.user("[recalled] " + text(300, "v"), preserve_verbatim=True)
    history.insert(5, recalled)
    result = h.compactor.compact(history, budget_chars=total_weight(history) // 2, keep_recent=8)
    out = result.history
    assert out[1].is_summary and out[2] is recalled and out[3:] == history[-8:]
    assert "[recalled]" not in out[1].content  # left out of the segment
    assert out[1].summary_of == 16


def test_verbatim_tool_result_without_its_call_becomes_a_user_message() -> None:
    h = Harness(FakeSummarizer(extractive))
    history = agent_history(6)
    original = history[3]
    history[3] = original.replace(preserve_verbatim=True)
    out = h.compactor.compact(history, budget_chars=total_weight(history) // 2, keep_recent=8).history
    reattached = out[2]
    assert reattached.role == "user" and reattached.preserve_verbatim
    assert reattached.content == VERBATIM_RESULT_HEADER.format(id="c0") + original.content
    assert validate_pairing(out)


def test_verbatim_tool_result_with_its_verbatim_call_stays_a_tool_result() -> None:
    h = Harness(FakeSummarizer(extractive))
    history = agent_history(6)
    history[2] = history[2].replace(preserve_verbatim=True)
    history[3] = history[3].replace(preserve_verbatim=True)
    out = h.compactor.compact(history, budget_chars=total_weight(history) // 2, keep_recent=8).history
    assert out[2] is history[2] and out[3] is history[3] and validate_pairing(out)


@pytest.mark.parametrize("summarizer", [FakeSummarizer(extractive), None], ids=["level2", "level3"])
def test_verbatim_over_a_quarter_of_the_budget_ages_out_oldest_first(
    summarizer: FakeSummarizer | None,
) -> None:
    h = Harness(summarizer)
    history = agent_history(6)
    old = Message.user("[recalled old] " + text(3000, "o"), preserve_verbatim=True)
    new = Message.user("[recalled new] " + text(3000, "n"), preserve_verbatim=True)
    history[5:5] = [old, new]
    budget = 20_000  # cap 5000: one of the two fits
    result = h.compactor.compact(history, budget_chars=budget, keep_recent=8)
    out = result.history
    assert result.report.verbatim_aged_out == 1
    assert new in out and old not in out
    stub = (
        "[verbatim user message (3015 chars) aged out of the window — restore it with @recall "
        f"{marker(archive_key(old.content))}]"
    )
    assert any(stub in t for t in reachable(out, h.store)[0])
    assert_nothing_lost(history, out, h.store)


def test_aged_out_stub_loses_the_flag_and_keeps_pairing() -> None:
    h = Harness(None)
    history = agent_history(3)
    history[-2] = history[-2].replace(preserve_verbatim=True)  # a recent tool result
    big = history[-2]
    result = h.compactor.compact(history, budget_chars=4000, keep_recent=8)
    stub = result.history[-2]
    assert stub.role == "tool" and stub.tool_call_id == big.tool_call_id and not stub.preserve_verbatim
    assert "aged out of the window" in stub.content and recall(h.store, stub.content).found == {
        extract_keys(stub.content)[0]: big.content
    }
    assert validate_pairing(result.history)


# -- snapping ------------------------------------------------------------------------------


@pytest.mark.parametrize("keep_recent", range(1, 12))
def test_snapping_never_orphans_a_tool_result(keep_recent: int) -> None:
    h = Harness(FakeSummarizer(extractive))
    history = agent_history(6)
    out = h.compactor.compact(
        history, budget_chars=total_weight(history) // 3, keep_recent=keep_recent
    ).history
    assert validate_pairing(out) and starts_with_user(out)
    assert_nothing_lost(history, out, h.store)


def test_leading_assistant_is_dropped_so_truncation_starts_with_a_user_message() -> None:
    h = Harness(None)
    history = [
        Message.system("s"),
        Message.assistant("hello " + text(3000)),
        Message.user("question"),
        Message.assistant("answer " + text(3000)),
    ]
    out = h.compactor.compact(history, budget_chars=4000, keep_recent=8).history
    assert starts_with_user(out) and out[1].content.startswith("[CONTEXT TRUNCATED: 1 messages removed")
    assert_nothing_lost(history, out, h.store)


# -- cancellation ---------------------------------------------------------------------------


def _cancel_now(token: CancelToken | None) -> None:
    assert token is not None
    token.cancel()
    token.raise_if_cancelled()


@pytest.mark.parametrize(
    ("token_factory", "on_call", "calls"),
    [
        (lambda: _cancelled_token(), None, 0),
        (lambda: CancelToken(deadline=5.0, clock=lambda: 10.0), None, 0),
        (CancelToken, _cancel_now, 1),
        (CancelToken, lambda token: token.cancel(), 1),  # answer arrives after ESC
    ],
    ids=["before", "deadline-passed", "during", "answer-after-cancel"],
)
def test_cancellation_leaves_history_untouched(
    token_factory: Callable[[], CancelToken], on_call: Callable | None, calls: int
) -> None:
    h = Harness(FakeSummarizer(extractive, on_call=on_call))
    h.compactor.compact(agent_history(2), budget_chars=10, keep_recent=8)  # one undo snapshot, no summary
    h.clear()
    history = agent_history(6)
    before = fingerprint(history)
    budget = total_weight(history) // 2
    with pytest.raises(CompactionCancelled):
        h.compactor.compact(history, budget_chars=budget, keep_recent=8, cancel=token_factory())
    assert fingerprint(history) == before
    expected = [start_line(history, budget), TRIM, *([SUMMARIZING] if calls else []), CANCELLED]
    assert h.statuses() == expected and EMERGENCY not in h.statuses()
    assert h.hooks() == [PreCompact("auto"), PostCompact("auto", "skipped")]
    assert h.summarizer.calls == calls and h.compactor.undo_levels == 1
    report = h.compactor.last_report
    assert isinstance(report, CompactionReport) and report.cancelled and report.skipped
    assert h.stats.skipped_compactions == 1 and h.stats.compactions == 1


def _cancelled_token() -> CancelToken:
    token = CancelToken()
    token.cancel()
    return token


def test_cancel_token_is_ignored_when_no_summary_is_needed() -> None:
    h = Harness(FakeSummarizer(extractive))
    reasoning = "<reasoning>" + text(6000) + "</reasoning>"
    history = [Message.user("go"), Message.assistant(reasoning + "Done.")]
    result = h.compactor.compact(history, budget_chars=1000, keep_recent=8, cancel=_cancelled_token())
    assert result.report.level == 1


# -- hooks, undo, memory ---------------------------------------------------------------------


@pytest.mark.parametrize("trigger", ["auto", "manual", "recovery"])
def test_hooks_bracket_the_rewrite(trigger: str) -> None:
    h = Harness(FakeSummarizer(extractive))
    history = agent_history(6)
    h.compactor.compact(history, budget_chars=total_weight(history) // 2, keep_recent=8, trigger=trigger)
    kinds = [type(e).__name__ if not isinstance(e, StatusEvent) else "status" for e in h.events]
    assert kinds[:2] == ["status", "PreCompact"] and kinds[-1] == "PostCompact"
    assert h.hooks() == [PreCompact(trigger), PostCompact(trigger, "applied")]


def test_undo_restores_the_newest_snapshot_and_keeps_five() -> None:
    h = Harness(None)
    inputs = [agent_history(3 + i) for i in range(7)]
    for history in inputs:
        h.compactor.compact(history, budget_chars=1000, keep_recent=2)
    assert h.compactor.undo_levels == 5
    for history in reversed(inputs[2:]):
        restored = h.compactor.undo()
        assert restored == history and all(a is b for a, b in zip(restored, history, strict=True))
    assert h.compactor.undo() is None


def test_skipped_compaction_pops_its_snapshot_without_evicting() -> None:
    h = Harness(None)
    inputs = [agent_history(3 + i) for i in range(5)]
    for history in inputs:
        h.compactor.compact(history, budget_chars=1000, keep_recent=2)
    h.compactor.compact([Message.user("small")], budget_chars=1000, keep_recent=2)
    assert h.compactor.undo_levels == 5
    restored = [h.compactor.undo() for _ in range(5)]
    assert restored == list(reversed(inputs))


def test_undo_depth_zero_keeps_no_snapshot() -> None:
    h = Harness(None, policy=DEFAULT_POLICY.replace(undo_depth=0))
    h.compactor.compact(agent_history(3), budget_chars=1000, keep_recent=2)
    h.compactor.compact([Message.user("small")], budget_chars=1000, keep_recent=2)
    assert h.compactor.undo_levels == 0 and h.compactor.undo() is None


def test_memory_sink_receives_each_message_once() -> None:
    h = Harness(FakeSummarizer(extractive))
    history = agent_history(6)
    out = h.compactor.compact(history, budget_chars=total_weight(history) // 2, keep_recent=8).history
    assert h.flushed == [history[1:]]
    extra = [Message.user("next " + text(4000)), Message.assistant("reply " + text(4000))]
    grown = out + extra
    h.compactor.compact(grown, budget_chars=total_weight(grown) // 2, keep_recent=2)
    assert h.flushed[1] == extra and all(a is b for a, b in zip(h.flushed[1], extra, strict=True))
    restored = h.compactor.undo()
    h.compactor.compact(restored, budget_chars=10, keep_recent=2)
    assert len(h.flushed) == 2
    seen = [id(m) for batch in h.flushed for m in batch]
    assert len(seen) == len(set(seen))


def test_memory_sink_is_not_called_for_already_flushed_messages() -> None:
    h = Harness(None)
    history = agent_history(2)
    h.compactor.compact(history, budget_chars=10**6, keep_recent=2)
    h.compactor.compact(history, budget_chars=10**6, keep_recent=2)
    assert h.flushed == [history[1:]]


def test_recovery_rewrite_hooks_flush_snapshot_and_settle() -> None:
    h = Harness(None)
    history = agent_history(2)
    h.compactor.prepare_rewrite(history)
    assert h.flushed == [history[1:]] and h.compactor.undo_levels == 1
    rewritten = [history[0], *history[-2:]]
    h.compactor.record_rewrite(rewritten)
    assert h.stats.cache_rebuilds_expected == 1 and h.stats.compactions == 0
    h.compactor.prepare_rewrite(rewritten)  # nothing new to flush
    assert len(h.flushed) == 1 and h.compactor.undo_levels == 2
    h.compactor.discard_snapshot()
    assert h.compactor.undo_levels == 1 and h.compactor.undo() == history
    h.compactor.discard_snapshot()  # nothing pending: a no-op
    assert h.compactor.undo_levels == 0


def test_discarded_recovery_snapshot_restores_the_evicted_one() -> None:
    h = Harness(None)
    inputs = [agent_history(3 + i) for i in range(5)]
    for history in inputs:
        h.compactor.compact(history, budget_chars=1000, keep_recent=2)
    h.compactor.prepare_rewrite(agent_history(1))
    h.compactor.discard_snapshot()
    assert [h.compactor.undo() for _ in range(5)] == list(reversed(inputs))


# -- manual /compact -------------------------------------------------------------------------


def test_manual_with_instruction_summarizes_even_under_budget() -> None:
    h = Harness(FakeSummarizer(extractive))
    history = agent_history(6)
    result = h.compactor.compact(
        history,
        budget_chars=total_weight(history) * 2,
        keep_recent=MANUAL_KEEP_RECENT,
        trigger="manual",
        instruction="focus on the parser",
    )
    out = result.history
    assert result.report.level == 2 and out[1].is_summary and out[2:] == history[-4:]
    assert h.summarizer.instructions == ["focus on the parser"]
    assert "focus on the parser" in h.summarizer.prompts[0]
    assert h.hooks() == [PreCompact("manual"), PostCompact("manual", "applied")]


def test_manual_without_instruction_behaves_like_auto() -> None:
    h = Harness(FakeSummarizer(extractive))
    history = agent_history(6)
    result = h.compactor.compact(
        history,
        budget_chars=total_weight(history) * 2,
        keep_recent=MANUAL_KEEP_RECENT,
        trigger="manual",
        instruction="   ",
    )
    assert result.report.skipped and h.summarizer.calls == 0


def test_manual_instruction_bypasses_backoff() -> None:
    history = agent_history(10, size=4000)
    h = Harness(oversized(history))
    budget = total_weight(history) // 2
    h.compactor.compact(history, budget_chars=budget, keep_recent=8)
    assert h.compactor.backoff_remaining == 2
    h.compactor.compact(
        history, budget_chars=budget, keep_recent=4, trigger="manual", instruction="keep paths"
    )
    assert h.summarizer.calls == 2 and h.compactor.backoff_remaining == 2


@pytest.mark.parametrize(
    ("kwargs", "summarizer", "message"),
    [
        ({"budget_chars": -1}, None, "budget_chars >= 0"),
        ({"keep_recent": -1}, None, "keep_recent >= 0"),
        ({"trigger": "nightly"}, None, "trigger must be one of"),
        ({"instruction": "x"}, FakeSummarizer(extractive), "trigger='manual'"),
        ({"instruction": "x", "trigger": "manual"}, None, "needs a summarizer"),
    ],
)
def test_bad_arguments_are_rejected_before_any_event(
    kwargs: dict, summarizer: FakeSummarizer | None, message: str
) -> None:
    h = Harness(summarizer)
    arguments = {"budget_chars": 100, "keep_recent": 2, **kwargs}
    with pytest.raises(ConfigError, match=re.escape(message)):
        h.compactor.compact(agent_history(2), **arguments)
    assert h.events == []


def test_policy_shrink_floor_is_validated() -> None:
    # shrink_to_budget needs room for head, tail and the recall marker: the Policy refuses less.
    with pytest.raises(ConfigError, match="shrink_min_chars must be an integer >= 200"):
        DEFAULT_POLICY.replace(shrink_min_chars=50)


# -- level 3 ----------------------------------------------------------------------------------


def test_truncation_shrinks_content_when_dropping_is_not_enough() -> None:
    h = Harness(None)
    history = [Message.system("s"), Message.user("q"), Message.assistant(text(50_000, "big"))]
    result = h.compactor.compact(history, budget_chars=5000, keep_recent=8)
    assert result.report.level == 3 and result.report.reached_budget
    assert "chars omitted for context efficiency" in result.history[-1].content
    assert h.stats.level3_compactions == 1
    assert_nothing_lost(history, result.history, h.store)


def test_nothing_to_cut_is_skipped_even_over_budget() -> None:
    h = Harness(None)
    history = [Message.system(text(5000))]
    result = h.compactor.compact(history, budget_chars=100, keep_recent=8)
    assert result.report.skipped and not result.report.reached_budget
    assert h.hooks()[-1] == PostCompact("auto", "skipped") and h.compactor.undo_levels == 0


def test_exception_from_a_pass_still_closes_the_hooks() -> None:
    h = Harness(FakeSummarizer(extractive, window_tokens=0))  # render_segment rejects the window
    history = agent_history(6)
    with pytest.raises(ConfigError):
        h.compactor.compact(history, budget_chars=total_weight(history) // 2, keep_recent=8)
    assert h.hooks() == [PreCompact("auto"), PostCompact("auto", "skipped")]
    assert h.compactor.undo_levels == 0


# -- properties -------------------------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    history = [Message.system("sys " + "s" * draw(st.integers(0, 200)))]
    for t in range(draw(st.integers(1, 8))):
        history.append(
            Message.user(
                f"u{t} " + text(draw(st.integers(1, 3000)), f"u{t}"), preserve_verbatim=draw(st.booleans())
            )
        )
        for c in range(draw(st.integers(0, 2))):
            cid = f"t{t}c{c}"
            history.append(Message.assistant(f"call {cid}", tool_calls=[call(cid)]))
            history.append(
                Message.tool(
                    cid,
                    f"r{cid} " + text(draw(st.integers(1, 6000)), cid),
                    preserve_verbatim=draw(st.booleans()),
                )
            )
        reasoning = "<reasoning>" + "why " * draw(st.integers(0, 300)) + "</reasoning>\n\n\n\n"
        history.append(Message.assistant(reasoning + f"a{t} " + text(draw(st.integers(1, 3000)), f"a{t}")))
    return history


SUMMARIZERS: dict[str, Callable[[], FakeSummarizer | None]] = {
    "none": lambda: None,
    "extractive": lambda: FakeSummarizer(extractive),
    "refusing": lambda: FakeSummarizer(fixed(REFUSAL)),
    "fixed": lambda: FakeSummarizer(fixed(GOOD_SUMMARY)),
}


@settings(max_examples=40)
@given(
    history=histories(),
    budget_share=st.floats(0.05, 1.2),
    keep_recent=st.integers(0, 10),
    summarizer=st.sampled_from(sorted(SUMMARIZERS)),
)
def test_compaction_invariants(
    history: list[Message], budget_share: float, keep_recent: int, summarizer: str
) -> None:
    h = Harness(SUMMARIZERS[summarizer]())
    before = fingerprint(history)
    budget = int(total_weight(history) * budget_share)
    result = h.compactor.compact(history, budget_chars=budget, keep_recent=keep_recent)
    out = result.history
    assert fingerprint(history) == before  # input never mutated
    assert_nothing_lost(history, out, h.store)
    assert validate_pairing(out)
    if result.report.level >= 2:
        assert starts_with_user(out)
    assert result.report.skipped == (out == history)
    assert result.report.chars_after == total_weight(out)
    assert h.hooks()[0] == PreCompact("auto") and h.hooks()[-1].outcome == (
        "skipped" if result.report.skipped else "applied"
    )
    if result.report.level == 3 and not result.report.reached_budget:
        # content shrinking only stops short of the budget when nothing shrinkable is left
        assert all(len(m.content) <= 400 for m in out if m.role != "system" and not m.preserve_verbatim)


class CompactorMachine(RuleBasedStateMachine):
    """Random sequences of growth, compaction and undo keep the session-level invariants."""

    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(FakeSummarizer(extractive))
        self.history = agent_history(2)
        self.turn = 100

    @rule(size=st.integers(10, 5000))
    def grow(self, size: int) -> None:
        self.turn += 1
        self.history = [
            *self.history,
            Message.user(f"q{self.turn} " + text(size)),
            Message.assistant(f"a{self.turn} " + text(size)),
        ]

    @rule(share=st.floats(0.1, 1.5), keep_recent=st.integers(1, 8))
    def compact(self, share: float, keep_recent: int) -> None:
        before = fingerprint(self.history)
        result = self.h.compactor.compact(
            self.history, budget_chars=int(total_weight(self.history) * share), keep_recent=keep_recent
        )
        assert fingerprint(self.history) == before
        assert_nothing_lost(self.history, result.history, self.h.store)
        self.history = result.history

    @rule()
    def undo(self) -> None:
        restored = self.h.compactor.undo()
        if restored is not None:
            self.history = restored

    @invariant()
    def undo_stack_is_bounded(self) -> None:
        assert self.h.compactor.undo_levels <= DEFAULT_POLICY.undo_depth

    @invariant()
    def memory_sink_never_repeats(self) -> None:
        seen = [id(m) for batch in self.h.flushed for m in batch]
        assert len(seen) == len(set(seen))

    @invariant()
    def hooks_are_paired(self) -> None:
        hooks = self.h.hooks()
        assert [type(e) for e in hooks[0::2]] == [PreCompact] * len(hooks[0::2])
        assert [type(e) for e in hooks[1::2]] == [PostCompact] * len(hooks[1::2])

    @invariant()
    def counters_add_up(self) -> None:
        s = self.h.stats
        assert s.compactions + s.skipped_compactions == len(self.h.hooks()) // 2
        assert s.cache_rebuilds_expected == s.compactions


CompactorMachine.TestCase.settings = settings(max_examples=15, stateful_step_count=8, deadline=None)
TestCompactorMachine = CompactorMachine.TestCase
