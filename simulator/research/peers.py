"""Peer context managers as ctxrecover parts: their rewrites, compactors and ladder steps.

Peers are modelled faithfully, data loss included: Cline's truncation, LangChain's
``trim_messages``, OpenHands' observation masking and summarizing condenser drop what
they cut without a recall marker, so their runs report ``chars_lost > 0`` whenever they
act; that is the honest result, not a bug. :mod:`simulator.research.baselines` assembles
them into named strategies.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar, Literal

from ctxrecover.compaction import CompactionRun, LevelBase
from ctxrecover.compaction.levels import LevelFlow
from ctxrecover.errors import SummarizerError
from ctxrecover.events import SessionStats
from ctxrecover.messages import Message
from ctxrecover.passes.pairing import repair_pairing
from ctxrecover.passes.truncate import leading_system_count, snap_to_tool_boundary
from ctxrecover.recovery import (
    RecoveryContext,
    StepBase,
    StepReport,
)
from ctxrecover.sizes import total_weight
from ctxrecover.summarize import (
    CancelToken,
    SummarizeCall,
    SummarizeFlow,
    Summarizer,
    build_prompt,
    render_segment,
    run_summaries,
)

__all__ = [
    "ClineKeep",
    "CLINE_KEPT_HEAD",
    "CLINE_TRUNCATION_NOTICE",
    "ClineTruncation",
    "ClineDrop",
    "KeepLast",
    "KeepLastTrim",
    "LEVELS",
    "MASKED_OBSERVATION",
    "MaskObservations",
    "Masking",
    "OBSERVATION_WINDOW_TURNS",
    "PHASE_LEVEL1",
    "PHASE_LEVEL2",
    "PHASE_LEVEL3",
    "PeerLevel",
    "STATUS_CLINE",
    "STATUS_KEEP_LAST",
    "STATUS_MASKED",
    "STATUS_SUMMARIZED",
    "SUMMARIZE_KEEP_LAST",
    "SUMMARY_FAILED",
    "SUMMARY_TEMPLATE",
    "SummarizeAll",
    "SummarizingCondenser",
    "Untouched",
    "cline_truncate",
    "mask_observations",
    "summarize_all",
    "summarize_all_flow",
    "trim_last",
]

ClineKeep = Literal["half", "quarter"]


# -- texts and numbers of the peers ----------------------------------------------------------------
#: Cline's formatResponse.contextTruncationNotice(); it replaces the first assistant message's text.
CLINE_TRUNCATION_NOTICE = (
    "[NOTE] Some previous conversation history with the user has been removed to maintain optimal "
    "context window length. The initial user task and the most recent exchanges have been retained for "
    "continuity, while intermediate conversation history has been removed. Please keep this in mind as "
    "you continue assisting the user."
)
CLINE_KEPT_HEAD = 2  # Cline always keeps the first user/assistant pair (API messages 0 and 1)
#: OpenHands' placeholder for a masked observation (AgentCondensationObservation('<MASKED>')).
MASKED_OBSERVATION = "<MASKED>"
#: Tool results older than this many agent turns are masked (the window M of "The Complexity Trap").
OBSERVATION_WINDOW_TURNS = 10
#: OpenHands' summarizing condenser as described: the summary plus the last two messages.
SUMMARIZE_KEEP_LAST = 2
SUMMARY_TEMPLATE = "[Summary of {count} earlier messages]\n{summary}"
SUMMARY_FAILED = "(no summary: the summarizer failed — {reason}; those messages are forgotten)"
# Compaction status phases the replay maps to a level (simulator.replay.STATUS_LEVELS).
PHASE_LEVEL1, PHASE_LEVEL2, PHASE_LEVEL3 = "trim", "summary_applied", "emergency"
LEVELS = MappingProxyType({PHASE_LEVEL1: 1, PHASE_LEVEL2: 2, PHASE_LEVEL3: 3})
STATUS_CLINE = "✂ Cline truncation — %d of %d messages dropped (no summary, not recallable)"
STATUS_KEEP_LAST = "✂ trim_messages(strategy='last') — kept %d of %d messages (not recallable)"
STATUS_MASKED = "🙈 Observation masking — %d tool results older than %d turns masked (not recallable)"
STATUS_SUMMARIZED = "🧠 Summarizing condenser — %d messages → 1 summary + the last %d (not recallable)"


def _api_messages(body: Sequence[Message]) -> list[list[Message]]:
    """Messages grouped the way Anthropic's API (and Cline) sees them: alternating user/assistant turns.

    A run of user, tool (and mid-history system) messages is one "user" message;
    a run of assistant messages is one "assistant" message.
    """
    groups: list[list[Message]] = []
    for msg in body:
        side = msg.role == "assistant"
        if groups and (groups[-1][0].role == "assistant") == side:
            groups[-1].append(msg)
        else:
            groups.append([msg])
    return groups


def _cline_removal(count: int, keep: ClineKeep) -> int:
    """Cline's getNextTruncationRange: messages to remove after the first pair (always even)."""
    rest = count - CLINE_KEPT_HEAD
    return rest // 4 * 2 if keep == "half" else (rest * 3) // 8 * 2


def cline_truncate(history: list[Message], keep: ClineKeep) -> tuple[list[Message], int]:
    """Cline's truncation: keep the first user/assistant pair, drop half (or ¾) of the rest, no summary.

    Counted in API messages (:func:`_api_messages`), as Cline does; the removed range
    ends on an assistant message so the kept tail starts with a user message. The first
    assistant message's text becomes :data:`CLINE_TRUNCATION_NOTICE` (tool calls kept).
    Nothing is archived. Returns the new history and the messages dropped (0: the input
    itself).

    >>> h = [Message.user(f"u{i}") if i % 2 == 0 else Message.assistant(f"a{i}") for i in range(10)]
    >>> [m.content[:4] for m in cline_truncate(h, "half")[0]]
    ['u0', '[NOT', 'u6', 'a7', 'u8', 'a9']
    """
    floor = leading_system_count(history)
    groups = _api_messages(history[floor:])
    end = CLINE_KEPT_HEAD + _cline_removal(len(groups), keep) - 1
    if end < len(groups) and groups[end][0].role != "assistant":
        end -= 1
    if end < CLINE_KEPT_HEAD:
        return history, 0
    head = [list(group) for group in groups[:CLINE_KEPT_HEAD]]
    if len(head) > 1 and head[1][0].role == "assistant" and head[1][0].content != CLINE_TRUNCATION_NOTICE:
        head[1][0] = head[1][0].with_content(CLINE_TRUNCATION_NOTICE)
    dropped = sum(len(group) for group in groups[CLINE_KEPT_HEAD : end + 1])
    kept = [msg for group in (*head, *groups[end + 1 :]) for msg in group]
    return [*history[:floor], *kept], dropped


def trim_last(history: list[Message], max_messages: int) -> list[Message]:
    """LangChain ``trim_messages(strategy="last", token_counter=len, start_on="human", include_system=True)``.

    Keeps the leading system messages and the last ``max_messages`` other messages, then
    drops leading messages of that window until it starts with a user message (a window
    without one keeps only the system messages). Nothing is archived.
    """
    floor = leading_system_count(history)
    window = history[max(floor, len(history) - max_messages) :]
    start = next((i for i, msg in enumerate(window) if msg.role == "user"), len(window))
    return [*history[:floor], *window[start:]]


def mask_observations(history: list[Message], window_turns: int) -> tuple[list[Message], int]:
    """OpenHands' observation masking: tool results older than the last ``window_turns`` agent
    turns (assistant messages) become :data:`MASKED_OBSERVATION`. Nothing is archived.

    Returns the new history and how many results were masked (0: the input itself).
    """
    seen = 0
    boundary = 0
    for index in range(len(history) - 1, -1, -1):
        if history[index].role == "assistant":
            seen += 1
            if seen == window_turns:
                boundary = index
                break
    masked = 0
    result = list(history)
    for index in range(boundary):
        msg = history[index]
        if msg.role == "tool" and (msg.content != MASKED_OBSERVATION or msg.images):
            result[index] = msg.replace(content=MASKED_OBSERVATION, images=())
            masked += 1
    return (result, masked) if masked else (history, 0)


@dataclass(frozen=True, slots=True)
class _Usage:
    """Summarizer usage of one condensation (the shape HistoryCompactor accounts)."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


def summarize_all(
    history: list[Message],
    summarizer: Summarizer | None,
    *,
    keep_last: int = SUMMARIZE_KEEP_LAST,
    timeout: float | None = None,
    cancel: CancelToken | None = None,
    memo: dict[str, tuple[str, _Usage]] | None = None,
) -> tuple[list[Message], int, _Usage]:
    """:func:`summarize_all_flow`, calling the summarizer on the spot."""
    return run_summaries(
        summarize_all_flow(
            history, summarizer, keep_last=keep_last, timeout=timeout, cancel=cancel, memo=memo
        )
    )


def summarize_all_flow(
    history: list[Message],
    summarizer: Summarizer | None,
    *,
    keep_last: int = SUMMARIZE_KEEP_LAST,
    timeout: float | None = None,
    cancel: CancelToken | None = None,
    memo: dict[str, tuple[str, _Usage]] | None = None,
) -> SummarizeFlow[tuple[list[Message], int, _Usage]]:
    """OpenHands' summarizing condenser: every non-system message but the last ``keep_last``
    (snapped back to a whole tool block) becomes one LLM summary (a flow: the summarizer call
    is yielded).

    No quality gate: a refusal becomes the summary, as in the peer. A failed call (or no
    summarizer) leaves a one-line placeholder. The summarized messages are not archived.
    Returns the new history, the messages condensed (0: the input itself) and the usage.
    With ``memo``, the answer to the last prompt is remembered: asked again, it is reused
    and costs nothing.
    """
    floor = leading_system_count(history)
    start = snap_to_tool_boundary(history, max(floor, len(history) - keep_last))
    segment = history[floor:start]
    systems = [msg for msg in segment if msg.role == "system"]
    condensed = [msg for msg in segment if msg.role != "system"]
    if not condensed:
        return history, 0, _Usage()
    usage = _Usage()
    if summarizer is None:
        text = SUMMARY_FAILED.format(reason="no summarizer configured")
    else:
        head = build_prompt("")
        prompt = build_prompt(
            render_segment(
                condensed, archive=None, window_tokens=summarizer.window_tokens, prompt_chars=len(head)
            )
        )
        if memo is not None and prompt in memo:
            text = memo[prompt][0]
        else:
            try:
                answer = yield SummarizeCall(summarizer, prompt, timeout=timeout, cancel=cancel)
            except SummarizerError as exc:
                text, usage = SUMMARY_FAILED.format(reason=" ".join(str(exc).split())), _Usage(calls=1)
            else:
                text = answer.text.strip()
                usage = _Usage(1, answer.input_tokens, answer.output_tokens, answer.cost_usd)
            if memo is not None:
                memo.clear()
                memo[prompt] = (text, usage)
    count = len(condensed)
    summary = Message.user(
        SUMMARY_TEMPLATE.format(count=count, summary=text), is_summary=True, summary_of=count
    )
    return [*history[:floor], *systems, summary, *history[start:]], len(condensed), usage


@dataclass(frozen=True, slots=True)
class Untouched(LevelBase):
    """Planned compaction switched off: the budget is never enforced (every compaction is skipped)."""

    label: ClassVar[str] = "untouched"

    def __call__(self, history: list[Message], run: CompactionRun) -> list[Message]:
        return history


class PeerLevel(LevelBase):
    """A peer's planned compaction: one rewrite when the history is over budget, reported as a level.

    Subclasses implement :meth:`rewrite` (a flow when it summarizes); it returns the history
    (the input itself when it changes nothing) and the status line. Bookkeeping (events,
    counters, undo) is the :class:`~ctxrecover.compaction.HistoryCompactor`'s.
    """

    phase: ClassVar[str] = PHASE_LEVEL3

    def __call__(self, history: list[Message], run: CompactionRun) -> LevelFlow:
        if not run.needs(history):
            return history
        rewritten = self.rewrite(history, run)
        if isinstance(rewritten, Generator):
            rewritten = yield from rewritten
        result, message = rewritten
        if result is not history:
            result, _ = repair_pairing(result, archive=run.archive)
            run.level = LEVELS[self.phase]
            run.status(self.phase, message)
        return result

    def rewrite(
        self, history: list[Message], run: CompactionRun
    ) -> tuple[list[Message], str] | SummarizeFlow[tuple[list[Message], str]]:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class ClineTruncation(PeerLevel):
    """Cline's context management: over budget, one :func:`cline_truncate` per request."""

    keep: ClineKeep = "half"
    label: ClassVar[str] = "cline"

    def rewrite(self, history: list[Message], run: CompactionRun) -> tuple[list[Message], str]:
        result, dropped = cline_truncate(history, self.keep)
        return result, STATUS_CLINE % (dropped, len(history))


@dataclass(frozen=True, slots=True)
class KeepLast(PeerLevel):
    """LangChain ``trim_messages`` as planned compaction: the last ``keep_recent`` messages, or fewer
    until the history fits the budget (:func:`trim_last`)."""

    label: ClassVar[str] = "trim_messages"

    def rewrite(self, history: list[Message], run: CompactionRun) -> tuple[list[Message], str]:
        result = history
        for count in range(run.keep_recent, 0, -1):
            result = trim_last(history, count)
            if total_weight(result) <= run.budget:
                break
        if len(result) == len(history):
            return history, ""
        return result, STATUS_KEEP_LAST % (len(result), len(history))


@dataclass(frozen=True, slots=True)
class Masking(PeerLevel):
    """Observation masking as planned compaction (:func:`mask_observations`)."""

    window_turns: int = OBSERVATION_WINDOW_TURNS
    phase: ClassVar[str] = PHASE_LEVEL1
    label: ClassVar[str] = "masking"

    def rewrite(self, history: list[Message], run: CompactionRun) -> tuple[list[Message], str]:
        result, masked = mask_observations(history, self.window_turns)
        return result, STATUS_MASKED % (masked, self.window_turns)


@dataclass(frozen=True, slots=True)
class SummarizingCondenser(PeerLevel):
    """The summarizing condenser as planned compaction (:func:`summarize_all_flow`)."""

    phase: ClassVar[str] = PHASE_LEVEL2
    label: ClassVar[str] = "summarizing_condenser"

    def rewrite(self, history: list[Message], run: CompactionRun) -> SummarizeFlow[tuple[list[Message], str]]:
        result, condensed, usage = yield from summarize_all_flow(
            history, run.summarizer, timeout=run.policy.summarizer_timeout_s, cancel=run.cancel
        )
        run.account(usage)
        return result, STATUS_SUMMARIZED % (condensed, SUMMARIZE_KEEP_LAST)


def _step_report(name: str, before: list[Message], after: list[Message], dropped: int) -> StepReport:
    return StepReport(
        step=name,
        changed=after is not before,
        messages_before=len(before),
        messages_after=len(after),
        chars_before=sum(len(m.content) for m in before),
        chars_after=sum(len(m.content) for m in after),
        messages_dropped=dropped,
    )


def _repaired(history: list[Message], ctx: RecoveryContext) -> list[Message]:
    return repair_pairing(history, archive=ctx.archive)[0]


@dataclass(frozen=True, slots=True)
class ClineDrop(StepBase):
    """Recovery rung: :func:`cline_truncate` with ``keep`` ("half" or "quarter"), then pairing repair."""

    keep: ClineKeep = "half"
    label = "cline"

    def __call__(self, history: list[Message], ctx: RecoveryContext) -> tuple[list[Message], StepReport]:
        result, dropped = cline_truncate(history, self.keep)
        result = _repaired(result, ctx) if dropped else history
        return result, _step_report(self.name, history, result, dropped)


@dataclass(frozen=True, slots=True)
class KeepLastTrim(StepBase):
    """Recovery rung: :func:`trim_last` to ``policy.keep_recent`` messages (a no-op when already trimmed)."""

    label = "trim_messages"

    def __call__(self, history: list[Message], ctx: RecoveryContext) -> tuple[list[Message], StepReport]:
        trimmed = trim_last(history, ctx.policy.keep_recent)
        result = _repaired(trimmed, ctx) if len(trimmed) != len(history) else history
        return result, _step_report(self.name, history, result, len(history) - len(trimmed))


@dataclass(frozen=True, slots=True)
class MaskObservations(StepBase):
    """Recovery rung: :func:`mask_observations` (a no-op when already masked)."""

    window_turns: int = OBSERVATION_WINDOW_TURNS
    label = "mask"

    def __call__(self, history: list[Message], ctx: RecoveryContext) -> tuple[list[Message], StepReport]:
        result, _masked = mask_observations(history, self.window_turns)
        return result, _step_report(self.name, history, result, 0)


@dataclass(frozen=True, slots=True)
class SummarizeAll(StepBase):
    """Recovery rung: :func:`summarize_all`; its summarizer usage is added to ``stats``.

    The last answer is remembered, so the Session's dry run of this rung (the floor
    diagnosis) and the real run right after it cost one summarizer call.
    """

    summarizer: Summarizer | None = field(default=None, compare=False)
    stats: SessionStats | None = field(default=None, compare=False)
    memo: dict[str, tuple[str, _Usage]] = field(default_factory=dict, compare=False, repr=False)
    label = "summarize_all"

    def __call__(self, history: list[Message], ctx: RecoveryContext) -> tuple[list[Message], StepReport]:
        result, condensed, usage = summarize_all(
            history, self.summarizer, timeout=ctx.policy.summarizer_timeout_s, memo=self.memo
        )
        if self.stats is not None:
            self.stats.summarizer_calls += usage.calls
            self.stats.summarizer_input_tokens += usage.input_tokens
            self.stats.summarizer_output_tokens += usage.output_tokens
            self.stats.summarizer_cost_usd += usage.cost_usd
        if condensed:
            result = _repaired(result, ctx)
        return result, _step_report(self.name, history, result, condensed)
