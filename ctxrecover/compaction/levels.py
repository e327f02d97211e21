"""The levels of planned compaction as composable steps (SPEC §5): :class:`Trim`, :class:`Summary`,
:class:`Truncation`.

A level is an object with one ``__call__(history, run)`` that returns the new history —
or, when it needs the summarizer, a flow that yields
:class:`~ctxrecover.summarize.SummarizeCall` and returns it. Levels compose with ``+``
into one step that runs them in order; each acts only while the run still
:meth:`~ctxrecover.compaction.run.CompactionRun.needs` it (over budget, or a guided
``/compact`` with no summary applied yet), so the default chain stops at the first level
that brings the history under budget::

    DEFAULT_LEVELS = Trim() + Summary() + Truncation()
    HistoryCompactor(policy, archive, levels=Trim() + Truncation())   # never calls an LLM

A researcher builds other strategies the same way (see ``simulator.research.peers``).
Every level archives what it removes (through ``run.archive``) before it removes it, and
never mutates its input.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from ctxrecover.archive import archive_range, marker
from ctxrecover.compaction.run import (
    LEVEL_SUMMARY,
    LEVEL_TRIM,
    LEVEL_TRUNCATION,
    STATUS_EMERGENCY,
    STATUS_SUMMARY,
    STATUS_SUMMARY_APPLIED,
    STATUS_SUMMARY_FAILED,
    STATUS_TRIM,
    STATUS_TRIM_ENOUGH,
    STATUS_TRUNCATED,
    SUMMARY_HEADER,
    SUMMARY_OVERHEAD_CHARS,
    SUMMARY_RECALL_NOTE,
    CompactionRun,
)
from ctxrecover.errors import ConfigError, SummarizerError
from ctxrecover.messages import Message
from ctxrecover.passes.shrink import shrink_to_budget
from ctxrecover.passes.trim import trim_history
from ctxrecover.passes.truncate import emergency_truncate, leading_system_count
from ctxrecover.sizes import format_payload_size, total_weight, weight
from ctxrecover.summarize import SummarizeCall, Summarizer, build_prompt, gated_summary, render_segment
from ctxrecover.summarize.span import assemble, covered, recent_start, split_span, summary_span

__all__ = [
    "DEFAULT_LEVELS",
    "VERBATIM_AGED_OUT_STUB",
    "CompactionLevel",
    "ComposedLevels",
    "LevelBase",
    "Summary",
    "Trim",
    "Truncation",
    "run_level",
]

VERBATIM_AGED_OUT_STUB = (
    "[verbatim {role} message ({chars} chars) aged out of the window — restore it with @recall {marker}]"
)

LevelFlow = Generator[SummarizeCall, Any, list[Message]]


class CompactionLevel(Protocol):
    """One compaction step: ``level(history, run)`` → the new history, or a flow returning it."""

    def __call__(self, history: list[Message], run: CompactionRun) -> list[Message] | LevelFlow: ...


def run_level(level: CompactionLevel, history: list[Message], run: CompactionRun) -> LevelFlow:
    """``level`` applied to ``history`` as a flow, whether the level is a plain function or a flow."""
    result = level(history, run)
    if isinstance(result, Generator):
        return (yield from result)
    return result


class LevelBase:
    """Mixin for levels: ``a + b`` composes them (``b`` runs after ``a``, on ``a``'s result)."""

    label: ClassVar[str] = "level"

    def __add__(self, other: CompactionLevel) -> ComposedLevels:
        return ComposedLevels((*_parts(self), *_parts(other)))


def _parts(level: object) -> tuple[CompactionLevel, ...]:
    if isinstance(level, ComposedLevels):
        return level.levels
    if not callable(level):
        raise ConfigError(f"a compaction level must be callable(history, run), got {type(level).__name__}")
    return (level,)


@dataclass(frozen=True, slots=True)
class ComposedLevels(LevelBase):
    """Levels run in order, each on the previous one's result (what ``a + b`` builds)."""

    levels: tuple[CompactionLevel, ...]

    def __call__(self, history: list[Message], run: CompactionRun) -> LevelFlow:
        current = history
        for level in self.levels:
            current = yield from run_level(level, current, run)
        return current


@dataclass(frozen=True, slots=True)
class Trim(LevelBase):
    """Level 1 (no LLM): strip reasoning and explanations, collapse blank lines, shorten injected
    context and tool feedback, keep the last of repeated format errors (``passes.trim``)."""

    label: ClassVar[str] = "trim"

    def __call__(self, history: list[Message], run: CompactionRun) -> list[Message]:
        if not run.needs(history):
            return history
        run.status("trim", STATUS_TRIM)
        run.level = max(run.level, LEVEL_TRIM)
        trimmed, _ = trim_history(history, archive=run.archive)
        if not run.needs(trimmed):
            run.status(
                "trim_enough",
                STATUS_TRIM_ENOUGH
                % (format_payload_size(run.chars_before), format_payload_size(total_weight(trimmed))),
            )
        return trimmed


@dataclass(frozen=True, slots=True)
class Summary(LevelBase):
    """Level 2: the messages between the system floor and the last ``run.keep_recent`` become one
    structured summary whose recall marker addresses the archived segment.

    Verbatim messages over ``policy.verbatim_budget_fraction`` of the budget age out first
    (oldest first, into recall stubs), so compaction always converges. Skipped without a
    summarizer, during back-off, and for a span too short or that cannot help. A summary
    that leaves the history over budget starts the back-off (SPEC §5).
    """

    label: ClassVar[str] = "summary"

    def __call__(self, history: list[Message], run: CompactionRun) -> LevelFlow:
        if not run.needs(history):
            return history
        current = _age_verbatim(history, run)
        summarized = yield from _summarized(current, run)
        if summarized is None:
            return current
        run.level = max(run.level, LEVEL_SUMMARY)
        run.summarized = True
        if total_weight(summarized) > run.budget:
            run.backoff.remaining = run.policy.summarizer_backoff_compactions
        return summarized


@dataclass(frozen=True, slots=True)
class Truncation(LevelBase):
    """Level 3: emergency truncation to the last ``run.keep_recent`` messages (the dropped range
    archived behind one marker), then content shrinking while still over budget."""

    label: ClassVar[str] = "truncation"

    def __call__(self, history: list[Message], run: CompactionRun) -> list[Message]:
        if not run.needs(history):
            return history
        run.status("emergency", STATUS_EMERGENCY)
        run.level = LEVEL_TRUNCATION
        keep = _truncation_keep(history, run.keep_recent)
        current, _ = emergency_truncate(history, keep, archive=run.archive)
        if total_weight(current) > run.budget:
            current, _ = shrink_to_budget(
                current, run.budget, archive=run.archive, min_chars=run.policy.shrink_min_chars
            )
        run.status("truncated", STATUS_TRUNCATED % (run.messages_before, len(current)))
        return current


#: SPEC §5's strategy: trim → summary → emergency truncation → shrink.
DEFAULT_LEVELS = Trim() + Summary() + Truncation()


# -- Level 2 ------------------------------------------------------------------------------------------


def _age_verbatim(history: list[Message], run: CompactionRun) -> list[Message]:
    """Replace the oldest verbatim messages by recall stubs until they fit their share of the budget."""
    cap = int(run.budget * run.policy.verbatim_budget_fraction)
    indices = [i for i, m in enumerate(history) if m.preserve_verbatim and m.role != "system"]
    verbatim_chars = sum(weight(history[i]) for i in indices)
    if verbatim_chars <= cap:
        return history
    result = list(history)
    for i in indices:
        if verbatim_chars <= cap:
            break
        msg = history[i]
        stub = VERBATIM_AGED_OUT_STUB.format(
            role=msg.role, chars=len(msg.content), marker=marker(run.archive.put(msg.content))
        )
        result[i] = msg.replace(content=stub, preserve_verbatim=False)
        verbatim_chars -= weight(msg)
        run.aged_out += 1
    return result


def _summarized(
    history: list[Message], run: CompactionRun
) -> Generator[SummarizeCall, Any, list[Message] | None]:
    """The summarized history, or None when Level 2 is skipped or failed.

    The span follows ``policy.summary_scope`` (a guided ``/compact`` covers the whole
    segment). A ``target`` summary that comes out larger than expected and leaves the
    history over budget is followed by a second one over the rest of the segment.
    """
    summarizer = run.summarizer
    if summarizer is None:
        return None
    if run.backoff.remaining > 0 and not run.guided:
        run.backoff.remaining -= 1
        run.backoff_skip = True
        return None
    policy = run.policy
    scope = "segment" if run.guided else policy.summary_scope
    span = summary_span(
        history,
        keep_recent=run.keep_recent,
        scope=scope,
        min_messages=policy.summary_min_messages,
        budget_chars=None if run.guided else run.budget,
        target_chars=int(run.budget * policy.summary_target_ratio),
        summaries_cap_chars=int(run.budget * policy.summaries_budget_fraction),
        overhead_chars=SUMMARY_OVERHEAD_CHARS,
    )
    if span is None:
        return None
    result = yield from _summarize_span(summarizer, history, span, run, run.instruction)
    if result is None or scope != "target" or total_weight(result) <= run.budget:
        return result
    rest = summary_span(
        result,
        keep_recent=run.keep_recent,
        scope="incremental",
        min_messages=policy.summary_min_messages,
        budget_chars=run.budget,
        summaries_cap_chars=total_weight(result),  # keep every summary: only the rest is new
        overhead_chars=SUMMARY_OVERHEAD_CHARS,
    )
    if rest is None:
        return result
    again = yield from _summarize_span(summarizer, result, rest, run, None)
    return again or result


def _summarize_span(
    summarizer: Summarizer,
    history: list[Message],
    span: tuple[int, int],
    run: CompactionRun,
    instruction: str | None,
) -> Generator[SummarizeCall, Any, list[Message] | None]:
    """``history`` with ``history[start:end]`` replaced by its summary, or None when it failed."""
    start, end = span
    _, summarized, _ = split_span(history[start:end])
    cancel = run.cancel
    if cancel is not None:
        cancel.raise_if_cancelled()
    run.status("summary", STATUS_SUMMARY)
    prompt_head = build_prompt("", instruction)
    segment_text = render_segment(
        summarized,
        archive=run.archive,
        window_tokens=summarizer.window_tokens,
        prompt_chars=len(prompt_head),
    )
    try:
        gated = yield from gated_summary(
            summarizer,
            prompt_head + segment_text,
            total_weight(summarized),
            retries=run.policy.summarizer_retries,
            instruction=instruction,
            timeout=run.policy.summarizer_timeout_s,
            cancel=cancel,
        )
    except SummarizerError as exc:
        run.account(exc)
        run.summary_failure = " ".join(str(exc).split()) or type(exc).__name__
        run.status("summary_failed", STATUS_SUMMARY_FAILED % run.summary_failure)
        return None
    run.account(gated)
    if cancel is not None:
        cancel.raise_if_cancelled()
    key = archive_range(run.archive, summarized)
    count = covered(summarized)
    summary = Message.user(
        SUMMARY_HEADER % count + gated.text + SUMMARY_RECALL_NOTE.format(marker=marker(key)),
        is_summary=True,
        summary_of=count,
    )
    result = assemble(history, start, end, summary)
    run.status(
        "summary_applied",
        STATUS_SUMMARY_APPLIED
        % (
            run.messages_before,
            len(result),
            format_payload_size(run.chars_before),
            format_payload_size(total_weight(result)),
        ),
    )
    return result


# -- Level 3 ------------------------------------------------------------------------------------------


def _truncation_keep(history: Sequence[Message], keep_recent: int) -> int:
    """``keep_recent``, or fewer so that the truncated history starts with a user message.

    When Level 3 would drop nothing, its notice is not inserted; a history whose first
    non-system message is not a user message then loses its leading messages up to the
    first user message instead (archived, with the notice).
    """
    floor = leading_system_count(history)
    start = recent_start(history, floor, keep_recent)
    if any(m.role != "system" and not m.preserve_verbatim for m in history[floor:start]):
        return keep_recent
    first = next((m for m in history[floor:] if m.role != "system"), None)
    if first is None or first.role == "user":
        return keep_recent
    first_user = next((i for i in range(floor, len(history)) if history[i].role == "user"), None)
    if first_user is None:
        return keep_recent
    return sum(1 for m in history[first_user:] if m.role != "system")
