"""Peer context-management strategies, run by the same replay as ctxrecover's own policy.

A :class:`Strategy` is a named recipe: Policy overrides plus a factory of
:class:`~ctxrecover.session.Session` injections (``compactor`` for planned compaction,
``ladder`` for the reaction to a rejected request, ``cap_state`` for what a payload
rejection teaches). :func:`simulator.replay.replay` takes one as ``strategy=``;
:data:`BASELINES` holds the peers and :func:`resolve_policies` turns
``"default,baselines"`` into what a sweep runs.

Peers are modelled faithfully, data loss included: Cline's truncation, LangChain's
``trim_messages``, OpenHands' observation masking and summarizing condenser drop what
they cut without a recall marker, so their runs report ``chars_lost > 0`` whenever they
act; that is the honest result, not a bug. Peers also run without ctxrecover's own
lossless per-turn passes (microcompact, tool-result budget, skill aging — disabled by
:data:`PEER_POLICY_OVERRIDES`), learn no payload cap and never add ctxrecover's payload
notice (:class:`NoCapLearning`). What they share with ctxrecover is the classification
of failures and the floor diagnosis (a system prompt over the rejected size fails fast).
Their ladders have one rung, so a recovered turn reads ``recovered@L1``.

>>> [name for name in BASELINES][:3]
['no-recovery', 'cline-drop-half', 'cline-drop-three-quarters']
>>> [(name, strategy is None) for name, _policy, strategy in resolve_policies("default,no-recovery")]
[('default', True), ('no-recovery', False)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Literal

from ctxrecover.archive import Archive
from ctxrecover.classify import Failure
from ctxrecover.compactor import HistoryCompactor
from ctxrecover.errors import ConfigError, SummarizerError
from ctxrecover.events import EventBus, Notice, SessionStats
from ctxrecover.messages import Message
from ctxrecover.passes.pairing import repair_pairing
from ctxrecover.passes.truncate import leading_system_count, snap_to_tool_boundary
from ctxrecover.policy import CHAT_POLICY, DEFAULT_POLICY, Policy
from ctxrecover.recovery import (
    LEARNED_CAP_CODE,
    LEARNED_CAP_NOTICE,
    PayloadCapState,
    RecoveryContext,
    RecoveryLadder,
    StepBase,
    StepReport,
)
from ctxrecover.sizes import format_payload_size, total_weight
from ctxrecover.summarize import CancelToken, Summarizer, build_prompt, render_segment

__all__ = [
    "BASELINES",
    "BASELINES_SPEC",
    "BISECTION_TOLERANCE",
    "BisectionCapState",
    "CLINE_TRUNCATION_NOTICE",
    "ClineCompactor",
    "ClineDrop",
    "KeepLastCompactor",
    "KeepLastTrim",
    "MASKED_OBSERVATION",
    "MaskObservations",
    "MaskingCompactor",
    "NoCapLearning",
    "NoCompaction",
    "OBSERVATION_WINDOW_TURNS",
    "PEER_POLICY_OVERRIDES",
    "POLICY_PRESETS",
    "Strategy",
    "SummarizeAll",
    "SummarizeAllCompactor",
    "cline_truncate",
    "mask_observations",
    "resolve_policies",
    "strategy_fields",
    "summarize_all",
    "trim_last",
]

ClineKeep = Literal["half", "quarter"]
SessionOptions = Callable[..., dict[str, Any]]

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
#: Bisection stops probing once (smallest rejected - largest accepted) <= this share of the rejected size.
BISECTION_TOLERANCE = 0.02

# A per-turn limit so large it never fires: the peers do not have ctxrecover's lossless passes.
PEER_OFF = 10**9
PEER_POLICY_OVERRIDES: Mapping[str, int] = MappingProxyType(
    {
        "microcompact_min_content": PEER_OFF,
        "tool_result_budget_chars": PEER_OFF,
        "tool_result_max_chars": PEER_OFF,
        "skill_age_turns": PEER_OFF,
    }
)

# Compaction status phases the replay maps to a level (simulator.replay.STATUS_LEVELS).
PHASE_LEVEL1, PHASE_LEVEL2, PHASE_LEVEL3 = "trim", "summary_applied", "emergency"
LEVELS = MappingProxyType({PHASE_LEVEL1: 1, PHASE_LEVEL2: 2, PHASE_LEVEL3: 3})
STATUS_CLINE = "✂ Cline truncation — %d of %d messages dropped (no summary, not recallable)"
STATUS_KEEP_LAST = "✂ trim_messages(strategy='last') — kept %d of %d messages (not recallable)"
STATUS_MASKED = "🙈 Observation masking — %d tool results older than %d turns masked (not recallable)"
STATUS_SUMMARIZED = "🧠 Summarizing condenser — %d messages → 1 summary + the last %d (not recallable)"

#: The named policies besides the baselines.
POLICY_PRESETS: Mapping[str, Policy] = MappingProxyType({"default": DEFAULT_POLICY, "chat": CHAT_POLICY})
BASELINES_SPEC = "baselines"  # resolve_policies: every baseline


# -- pure rewrites (never mutate the input; what they drop is gone, as in the peer) -----------------


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
    """OpenHands' summarizing condenser: every non-system message but the last ``keep_last``
    (snapped back to a whole tool block) becomes one LLM summary.

    No quality gate: a refusal becomes the summary, as in the peer. A failed call (or no
    summarizer) leaves a one-line placeholder. The summarized messages are not archived.
    Returns the new history, the messages condensed (0: the input itself) and the usage.
    With ``memo``, the answer to the last prompt is remembered: asked again, it is reused
    and costs nothing (the Session dry-runs the last ladder rung before running it).
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
            render_segment(condensed, archive=None, window_tokens=summarizer.window_tokens,
                           prompt_chars=len(head))
        )
        if memo is not None and prompt in memo:
            text = memo[prompt][0]
        else:
            text, usage = _ask(summarizer, prompt, timeout, cancel)
            if memo is not None:
                memo.clear()
                memo[prompt] = (text, usage)
    count = len(condensed)
    summary = Message.user(SUMMARY_TEMPLATE.format(count=count, summary=text), is_summary=True,
                           summary_of=count)
    return [*history[:floor], *systems, summary, *history[start:]], len(condensed), usage


# -- planned compaction ------------------------------------------------------------------------------


def _ask(summarizer: Summarizer, prompt: str, timeout: float | None,
         cancel: CancelToken | None) -> tuple[str, _Usage]:
    try:
        answer = summarizer.summarize(prompt, timeout=timeout, cancel=cancel)
    except SummarizerError as exc:
        return SUMMARY_FAILED.format(reason=" ".join(str(exc).split())), _Usage(calls=1)
    return answer.text.strip(), _Usage(1, answer.input_tokens, answer.output_tokens, answer.cost_usd)


class NoCompaction(HistoryCompactor):
    """Planned compaction switched off: the budget is never enforced (every call is skipped)."""

    def levels(self, history: list[Message], run: Any, keep_recent: int, cancel: CancelToken | None,
                instruction: str | None) -> list[Message]:
        return history


class _PeerCompactor(HistoryCompactor):
    """A peer's planned compaction: one rewrite when the history is over budget, reported as a level.

    Subclasses implement :meth:`rewrite`; it returns the history (the input itself when it
    changes nothing) and the status line. Bookkeeping (events, counters, undo) is the
    :class:`HistoryCompactor`'s.
    """

    phase: ClassVar[str] = PHASE_LEVEL3

    def levels(self, history: list[Message], run: Any, keep_recent: int, cancel: CancelToken | None,
                instruction: str | None) -> list[Message]:
        if run.chars_before <= run.budget and instruction is None:
            return history
        result, message = self.rewrite(history, run, keep_recent, cancel)
        if result is not history:
            result, _ = repair_pairing(result, archive=run.archive)
            run.level = LEVELS[self.phase]
            self._status(self.phase, message)
        return result

    def rewrite(self, history: list[Message], run: Any, keep_recent: int,
                cancel: CancelToken | None) -> tuple[list[Message], str]:
        raise NotImplementedError


class ClineCompactor(_PeerCompactor):
    """Cline's context management: over budget, one :func:`cline_truncate` per request."""

    def __init__(self, *args: Any, keep: ClineKeep = "half", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.keep: ClineKeep = keep

    def rewrite(self, history: list[Message], run: Any, keep_recent: int,
                cancel: CancelToken | None) -> tuple[list[Message], str]:
        result, dropped = cline_truncate(history, self.keep)
        return result, STATUS_CLINE % (dropped, len(history))


class KeepLastCompactor(_PeerCompactor):
    """LangChain ``trim_messages`` as planned compaction: the last ``keep_recent`` messages, or fewer
    until the history fits the budget (:func:`trim_last`)."""

    def rewrite(self, history: list[Message], run: Any, keep_recent: int,
                cancel: CancelToken | None) -> tuple[list[Message], str]:
        result = history
        for count in range(keep_recent, 0, -1):
            result = trim_last(history, count)
            if total_weight(result) <= run.budget:
                break
        if len(result) == len(history):
            return history, ""
        return result, STATUS_KEEP_LAST % (len(result), len(history))


class MaskingCompactor(_PeerCompactor):
    """Observation masking as planned compaction (:func:`mask_observations`)."""

    phase = PHASE_LEVEL1

    def __init__(self, *args: Any, window_turns: int = OBSERVATION_WINDOW_TURNS, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.window_turns = window_turns

    def rewrite(self, history: list[Message], run: Any, keep_recent: int,
                cancel: CancelToken | None) -> tuple[list[Message], str]:
        result, masked = mask_observations(history, self.window_turns)
        return result, STATUS_MASKED % (masked, self.window_turns)


class SummarizeAllCompactor(_PeerCompactor):
    """The summarizing condenser as planned compaction (:func:`summarize_all`)."""

    phase = PHASE_LEVEL2

    def rewrite(self, history: list[Message], run: Any, keep_recent: int,
                cancel: CancelToken | None) -> tuple[list[Message], str]:
        result, condensed, usage = summarize_all(
            history, self.summarizer, timeout=self.policy.summarizer_timeout_s, cancel=cancel
        )
        run.account(usage)
        return result, STATUS_SUMMARIZED % (condensed, SUMMARIZE_KEEP_LAST)


# -- ladder steps (the reaction to a rejected request) -----------------------------------------------


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


# -- payload cap learning -----------------------------------------------------------------------------


@dataclass(slots=True)
class NoCapLearning(PayloadCapState):
    """A peer's cap state: a payload rejection teaches nothing (only a configured cap applies).

    Build it with ``notice_sent=True`` so ctxrecover's payload notice is never added.
    """

    def learn(self, failure: Failure, *, policy: Policy) -> list[Notice]:
        return []


@dataclass(slots=True)
class BisectionCapState(PayloadCapState):
    """The payload cap found by bisection between the largest accepted and the smallest rejected size.

    Each payload rejection of known size lowers ``smallest_rejected``; each accepted
    request raises ``largest_accepted``. The learned cap is their midpoint, so the cap
    can grow again after a rejection (unlike the ¾ rule, whose caps only tighten);
    once the bracket is within ``tolerance`` of the rejected size the cap settles on
    ``largest_accepted`` and probing stops. A request accepted at or above the smallest
    rejected size (a gateway that is not purely size-based) restarts the bracket.
    A rejection of unknown size falls back to the ¾ rule's assumed cap.

    >>> from ctxrecover.classify import FailureKind
    >>> state = BisectionCapState(largest_accepted=100_000)
    >>> _ = state.learn(Failure(FailureKind.PAYLOAD_TOO_LARGE, rejected_bytes=140_000), policy=Policy())
    >>> state.learned_cap
    120000
    >>> state.observe_accepted(119_000); state.learned_cap
    129500
    """

    largest_accepted: int = 0
    smallest_rejected: int | None = None
    tolerance: float = BISECTION_TOLERANCE

    @property
    def converged(self) -> bool:
        """True when the bracket is within ``tolerance``: the cap is the largest accepted size."""
        hi = self.smallest_rejected
        return hi is not None and hi - self.largest_accepted <= self.tolerance * hi

    def _bisect(self) -> int:
        hi = self.smallest_rejected
        assert hi is not None
        return self.largest_accepted if self.converged else (self.largest_accepted + hi) // 2

    def observe_accepted(self, request_bytes: int) -> None:
        if request_bytes <= self.largest_accepted:
            return
        self.largest_accepted = request_bytes
        if self.smallest_rejected is None:
            return
        if request_bytes >= self.smallest_rejected:
            self.smallest_rejected = None
            self.learned_cap = None
            return
        self.learned_cap = self._bisect()

    def learn(self, failure: Failure, *, policy: Policy) -> list[Notice]:
        rejected = failure.rejected_bytes
        if not failure.is_payload or not rejected:
            return PayloadCapState.learn(self, failure, policy=policy)
        self.smallest_rejected = min(rejected, self.smallest_rejected or rejected)
        if self.largest_accepted >= self.smallest_rejected:
            self.largest_accepted = 0
        cap = self._bisect()
        if cap < 1 or cap == self.learned_cap:
            return []
        self.learned_cap = cap
        message = LEARNED_CAP_NOTICE % (format_payload_size(rejected), format_payload_size(cap))
        return [Notice(LEARNED_CAP_CODE, message)]


# -- strategies -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Strategy:
    """A context-management strategy runnable by :func:`simulator.replay.replay`.

    ``policy_overrides`` are Policy fields the strategy fixes (applied over the policy it
    is given, so they win over swept knobs); ``factory(policy, archive, events, stats,
    summarizer)`` returns Session keyword injections (``compactor``, ``ladder``,
    ``cap_state``). ``source`` says where the strategy comes from.
    """

    name: str
    description: str
    source: str
    policy_overrides: tuple[tuple[str, Any], ...] = ()
    factory: SessionOptions | None = None

    def apply(self, policy: Policy) -> Policy:
        """``policy`` with this strategy's overrides."""
        return policy.replace(**dict(self.policy_overrides)) if self.policy_overrides else policy

    def session_options(
        self,
        policy: Policy,
        archive: Archive,
        events: EventBus,
        stats: SessionStats,
        *,
        summarizer: Summarizer | None = None,
    ) -> dict[str, Any]:
        """The Session keyword injections for one session (fresh objects every call)."""
        if self.factory is None:
            return {}
        return self.factory(policy, archive, events, stats, summarizer)


def _peer_cap(policy: Policy) -> NoCapLearning:
    return NoCapLearning(configured_cap=policy.payload_cap, notice_sent=True)


def _no_recovery(policy: Policy, archive: Archive, events: EventBus, stats: SessionStats,
                 summarizer: Summarizer | None) -> dict[str, Any]:
    return {"compactor": NoCompaction(policy, archive, events=events, stats=stats)}


def _cline(keep: ClineKeep, policy: Policy, archive: Archive, events: EventBus,
           stats: SessionStats) -> dict[str, Any]:
    return {
        "compactor": ClineCompactor(policy, archive, events=events, stats=stats, keep=keep),
        "ladder": RecoveryLadder(ClineDrop(keep)),
        "cap_state": _peer_cap(policy),
    }


def _cline_half(policy: Policy, archive: Archive, events: EventBus, stats: SessionStats,
                summarizer: Summarizer | None) -> dict[str, Any]:
    return _cline("half", policy, archive, events, stats)


def _cline_quarter(policy: Policy, archive: Archive, events: EventBus, stats: SessionStats,
                   summarizer: Summarizer | None) -> dict[str, Any]:
    return _cline("quarter", policy, archive, events, stats)


def _keep_last(policy: Policy, archive: Archive, events: EventBus, stats: SessionStats,
               summarizer: Summarizer | None) -> dict[str, Any]:
    return {
        "compactor": KeepLastCompactor(policy, archive, events=events, stats=stats),
        "ladder": RecoveryLadder(KeepLastTrim()),
        "cap_state": _peer_cap(policy),
    }


def _masking(policy: Policy, archive: Archive, events: EventBus, stats: SessionStats,
             summarizer: Summarizer | None) -> dict[str, Any]:
    return {
        "compactor": MaskingCompactor(policy, archive, events=events, stats=stats),
        "ladder": RecoveryLadder(MaskObservations()),
        "cap_state": _peer_cap(policy),
    }


def _summarize_everything(policy: Policy, archive: Archive, events: EventBus, stats: SessionStats,
                          summarizer: Summarizer | None) -> dict[str, Any]:
    return {
        "compactor": SummarizeAllCompactor(policy, archive, summarizer=summarizer, events=events,
                                           stats=stats),
        "ladder": RecoveryLadder(SummarizeAll(summarizer, stats)),
        "cap_state": _peer_cap(policy),
    }


def _cap_bisection(policy: Policy, archive: Archive, events: EventBus, stats: SessionStats,
                   summarizer: Summarizer | None) -> dict[str, Any]:
    return {"cap_state": BisectionCapState.from_policy(policy)}


PEERS = tuple(PEER_POLICY_OVERRIDES.items())
CLINE_SOURCE = (
    "Cline, ContextManager.getNextTruncationRange and applyStandardContextTruncationNoticeChange "
    "(src/core/context/context-management/ContextManager.ts, https://github.com/cline/cline)"
)
CLINE_LOSS = (
    " The dropped messages and the first assistant message's text are not archived: chars_lost > 0 "
    "whenever it truncates. No cap learning."
)

BASELINES: Mapping[str, Strategy] = MappingProxyType(
    {
        strategy.name: strategy
        for strategy in (
            Strategy(
                "no-recovery",
                "ctxrecover with recovery and planned compaction switched off: max_recovery_attempts=0 and "
                "a compactor that never compacts (the budget is effectively infinite). The first rejection "
                "of a turn ends the run. The per-turn lossless passes still run; nothing is lost.",
                "ablation of this repository's Session (ctxrecover/session.py)",
                (("max_recovery_attempts", 0),),
                _no_recovery,
            ),
            Strategy(
                "cline-drop-half",
                "Over budget or on an overflow/payload rejection: keep the first user/assistant pair and "
                "drop half of the remaining API messages, no summary." + CLINE_LOSS,
                CLINE_SOURCE,
                PEERS,
                _cline_half,
            ),
            Strategy(
                "cline-drop-three-quarters",
                "As cline-drop-half, dropping three quarters of the remaining API messages (Cline's "
                "'quarter' keep, used when the history is far over the window)." + CLINE_LOSS,
                CLINE_SOURCE,
                PEERS,
                _cline_quarter,
            ),
            Strategy(
                "langchain-keep-last-n",
                "Planned compaction keeps the system message and the last keep_recent messages (fewer until "
                "the history fits the budget), starting on a user message; a rejection re-trims to "
                "keep_recent. Dropped messages are not archived: chars_lost > 0 whenever it trims. "
                "No cap learning.",
                "LangChain langchain_core.messages.trim_messages(strategy='last', token_counter=len, "
                "start_on='human', include_system=True) "
                "(https://python.langchain.com/docs/how_to/trim_messages/)",
                PEERS,
                _keep_last,
            ),
            Strategy(
                "observation-masking",
                f"Over budget or on a rejection: tool results older than the last {OBSERVATION_WINDOW_TURNS} "
                f"agent turns become {MASKED_OBSERVATION!r}, no LLM. Masked results are not archived: "
                "chars_lost > 0 whenever it masks; chat histories (no tool results) cannot shrink. "
                "OpenHands masks on every step; here it runs when the history is over budget or rejected. "
                "No cap learning.",
                "OpenHands ObservationMaskingCondenser (openhands/memory/condenser/impl/"
                "observation_masking_condenser.py, https://github.com/All-Hands-AI/OpenHands); Lindenbauer "
                "et al., 'The Complexity Trap: Simple Observation Masking Is as Efficient as LLM "
                "Summarization for Agent Context Management', JetBrains Research, arXiv:2508.21433",
                PEERS,
                _masking,
            ),
            Strategy(
                "summarize-everything",
                f"Over budget or on a rejection: the whole non-system history but the last "
                f"{SUMMARIZE_KEEP_LAST} messages becomes one LLM summary (no quality gate: a refusal becomes "
                "the summary). The summarized messages are not archived: chars_lost > 0 whenever it "
                "condenses. No cap learning.",
                "OpenHands LLMSummarizingCondenser (openhands/memory/condenser/impl/"
                "llm_summarizing_condenser.py, https://github.com/All-Hands-AI/OpenHands)",
                PEERS,
                _summarize_everything,
            ),
            Strategy(
                "cap-bisection",
                "The default policy, but the payload cap is inferred by bisection between the largest "
                "accepted and the smallest rejected request size (BisectionCapState) instead of ¾ of the "
                "rejected size. Lossless like the default.",
                "this repository: an alternative to PayloadCapState.learn "
                "(ctxrecover/recovery/cap_state.py, SPEC §6 step 1)",
                (),
                _cap_bisection,
            ),
        )
    }
)


def _names(spec: str | Iterable[str]) -> list[str]:
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    return [name.strip() for name in items if name and name.strip()]


def resolve_policies(spec: str | Iterable[str]) -> list[tuple[str, Policy, Strategy | None]]:
    """``(name, policy, strategy)`` for each name of a comma-separated list (or a sequence of names).

    Names are the presets (:data:`POLICY_PRESETS`: ``default``, ``chat``), baseline names
    (:data:`BASELINES`) and ``baselines`` for all of them; duplicates are dropped.
    A baseline's policy is the default policy with its overrides. Raises
    :class:`~ctxrecover.errors.ConfigError` naming the valid names.
    """
    names = _names(spec)
    if not names:
        raise ConfigError(f"no policy given; use {', '.join(_valid_names())}")
    resolved: dict[str, tuple[str, Policy, Strategy | None]] = {}
    for name in names:
        expanded = list(BASELINES) if name == BASELINES_SPEC else [name]
        for one in expanded:
            if one in POLICY_PRESETS:
                resolved.setdefault(one, (one, POLICY_PRESETS[one], None))
            elif one in BASELINES:
                strategy = BASELINES[one]
                resolved.setdefault(one, (one, strategy.apply(DEFAULT_POLICY), strategy))
            else:
                raise ConfigError(f"unknown policy {one!r}; use {', '.join(_valid_names())}")
    return list(resolved.values())


def _valid_names() -> list[str]:
    return [*POLICY_PRESETS, BASELINES_SPEC, *BASELINES]


def strategy_fields(strategy: Strategy) -> dict[str, Any]:
    """A strategy as plain data (for manifests): name, description, source, overrides."""
    return {"name": strategy.name, "description": strategy.description, "source": strategy.source,
            "policy_overrides": dict(strategy.policy_overrides)}
