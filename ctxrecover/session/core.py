"""The Session class: a conversation's state and history, and the turn loop that sends and recovers."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import ctxrecover.catalog as catalog
from ctxrecover.archive import Archive, MemoryArchive, SessionArchive, member_keys
from ctxrecover.classify import Failure, FailureKind, classify
from ctxrecover.compactor import CompactionReport, HistoryCompactor
from ctxrecover.errors import (
    ArchiveError,
    ContentBlockedError,
    MessageError,
    PayloadFloorError,
    RecoveryExhausted,
    UnrecoverableFailure,
)
from ctxrecover.events import Event, EventBus, SessionStats
from ctxrecover.messages import Message, check_encodable
from ctxrecover.passes.parts import archive_images, set_aside
from ctxrecover.passes.truncate import leading_system_count
from ctxrecover.passes.turn import TurnPasses
from ctxrecover.policy import DEFAULT_POLICY, Policy
from ctxrecover.recovery import (
    CONTENT_BLOCK_CODE,
    HEADER_FAULT_CODE,
    OUTPUT_LIMIT_CODE,
    OUTPUT_LIMIT_DEFAULT_NOTICE,
    OUTPUT_LIMIT_NOTICE,
    RECOVERABLE_FAILURE_CODE,
    GatewayModel,
    Judgement,
    Level2,
    RecoveryContext,
    RecoveryLadder,
    Verdict,
    body_key,
    cap_notice,
    preflight,
    recover,
    repair_malformed,
    response_text,
)
from ctxrecover.recovery.diagnosis import (
    content_block_error,
    floor_error,
    header_fault_error,
    least_history,
    lowered_max_tokens,
)
from ctxrecover.recovery.escalation import OutputEscalation
from ctxrecover.recovery.probe import CapProven, keep_from, mark_unproven, unmarked, unproven
from ctxrecover.senders import ChatRequest, ChatResponse, Sender
from ctxrecover.sizes import char_budget, total_weight
from ctxrecover.summarize import (
    CancelToken,
    ContextEngine,
    ContextEngineSummarizer,
    HttpSummarizer,
    Summarizer,
)
from ctxrecover.summarize.context_editing import context_management_request, mirror_applied_edits
from ctxrecover.wire import (
    DEFAULT_ANTHROPIC_MAX_TOKENS,
    WireFormat,
    encode_request,
    request_size,
)

__all__ = ["Mode", "Session", "resolve_summarizer"]

Mode = Literal["agent", "chat"]

PROVIDER_BY_FORMAT: dict[WireFormat, str] = {
    WireFormat.OPENAI_CHAT: "openai",
    WireFormat.OPENAI_RESPONSES: "openai",
    WireFormat.ANTHROPIC: "anthropic",
    WireFormat.GEMINI: "google",
    WireFormat.BEDROCK_CONVERSE: "bedrock",
}
TRANSIENT_RETRIES = 2
TRANSIENT_BACKOFF_S = (1.0, 4.0)
BYTE_FIT_ROUNDS = 4  # planned compaction rounds to bring real wire bytes under a cap
BYTE_FIT_MARGIN = 0.95
BYTE_FIT_MIN_KEEP = 2  # fewest recent messages a byte-fit round keeps (keep_recent halves each round)
CALIBRATION_MIN_TOKENS = 200  # ignore tiny requests when calibrating chars per token
CALIBRATION_WEIGHT = 0.3  # exponential moving average of observed chars per token
CALIBRATION_BOUNDS = (1.0, 8.0)
OUTPUT_LIMIT_RETRIES = 3  # times one turn may lower max_tokens after "max_tokens is too large"
# Decision beyond the reference: an overflow error that states the real window tightens the session's
# window (like a learned payload cap), so the next turns compact before the provider rejects them.
LEARNED_WINDOW_NOTICE = (
    "ℹ Provider reported a context window of %d tokens — budget recomputed for this session"
)
# Decision beyond the reference: the archive never evicts what the history reaches, so it may refuse.
ARCHIVE_REFUSED_NOTICE = (
    "⚠ CCR archive refused to store what this turn would cut — that cut was not made, nothing is lost: %s"
)
ARCHIVE_PINS_NOTICE = "⚠ CCR archive could not record which entries this session still uses (will retry): %s"
LIVE_HISTORY = "history"  # the SessionArchive lists a session keeps pinned
LIVE_OUTGOING = "outgoing"


def resolve_summarizer(
    policy: Policy,
    summarizer: Summarizer | None,
    context_engine: ContextEngine | None = None,
    *,
    env: Mapping[str, str] = os.environ,
) -> Summarizer | None:
    """The level-2 summarizer a session uses (SPEC §5 "Summarizer choice").

    The given ``summarizer`` or, when ``policy.compact_model`` is set, a dedicated
    OpenAI-compatible :class:`~ctxrecover.summarize.HttpSummarizer` (base URL and key
    from ``env``). An external context engine — ``context_engine`` (a callable
    implementing ``context_compact``) or an http(s) URL in ``policy.context_engine`` —
    goes first and falls back to that summarizer on error, timeout or empty answer.
    ``CHATCLI_CONTEXT_ENGINE=mcp:<server>`` needs the MCP tool passed as
    ``context_engine``; ``provider`` means Anthropic context editing, not a summarizer.
    """
    built_in = summarizer
    if built_in is None and policy.compact_model:
        built_in = HttpSummarizer.from_env({**env, "CHATCLI_COMPACT_MODEL": policy.compact_model})
    engine: ContextEngine | str | None = context_engine
    if engine is None and policy.context_engine and policy.context_engine.startswith(("http://", "https://")):
        engine = policy.context_engine
    if engine is None:
        return built_in
    return ContextEngineSummarizer(engine, fallback=built_in, timeout=policy.summarizer_timeout_s)


@dataclass(frozen=True, slots=True)
class _Checkpoint:
    """The session before a turn's first size-limit recovery, to undo it if it was for nothing."""

    history: list[Message]
    gateway: GatewayModel
    tool_result_budget_chars: int
    tool_result_max_chars: int


@dataclass(slots=True)
class _Turn:
    """What one ``complete()`` call tracks across its attempts."""

    max_tokens: int | None
    transient_left: int
    attempts: int = 0
    malformed_retried: bool = False
    output_lowerings: int = 0
    before_recovery: _Checkpoint | None = None
    size_signatures: set[str] = field(default_factory=set)


class Session:
    """One conversation with a provider, recovering from every recoverable failure.

    ``sender`` is the one-method network seam (:class:`~ctxrecover.senders.HttpxSender`
    or an SDK adapter); its ``wire_format`` decides how requests are sized.
    ``mode="chat"`` uses the chat budget (ratio 0.75, keep 10) instead of the
    agent's (0.60, keep 8). ``sleep`` is injected for transient-network retries.
    ``gateway`` starts the session from a known :class:`~ctxrecover.recovery.GatewayModel`
    (default: none learned, ``policy.payload_cap`` configured, ``policy.cap_strategy``);
    ``classifier`` replaces :func:`~ctxrecover.classify.classify` (same signature).

    A turn costs what changed since the last one, not the whole history: the
    turn-boundary passes and every size a decision reads are kept incrementally
    (:class:`~ctxrecover.passes.turn.TurnPasses`), and each message's archive keys
    are computed once, as it enters (:func:`~ctxrecover.archive.member_keys`).
    ``incremental=False`` runs every pass over the whole history at every turn
    instead: the same results, the reference the incremental path is tested against.
    """

    def __init__(
        self,
        sender: Sender,
        *,
        policy: Policy | None = None,
        archive: Archive | None = None,
        summarizer: Summarizer | None = None,
        on_event: Callable[[Event], Any] | None = None,
        mode: Mode = "agent",
        provider: str | None = None,
        model: str | None = None,
        max_tokens: int | None = None,
        tools: Any = None,
        memory_sink: Callable[[list[Message]], None] | None = None,
        history: Iterable[Message] = (),
        stats: SessionStats | None = None,
        ladder: RecoveryLadder | None = None,
        compactor: HistoryCompactor | None = None,
        gateway: GatewayModel | None = None,
        context_engine: ContextEngine | None = None,
        env: Mapping[str, str] | None = None,
        transient_retries: int = TRANSIENT_RETRIES,
        sleep: Callable[[float], None] = time.sleep,
        classifier: Callable[..., Failure] = classify,
        incremental: bool = True,
    ) -> None:
        if mode not in ("agent", "chat"):
            raise ValueError(f"mode must be 'agent' or 'chat', got {mode!r}")
        self.sender = sender
        self.policy = policy or DEFAULT_POLICY
        self.events = EventBus(on_event)
        self.stats = stats or SessionStats()
        self.archive = SessionArchive(
            archive if archive is not None else MemoryArchive(),
            on_error=self._archive_failed,
            on_archived=lambda source, chars: self.stats.count_archived(source, chars),
        )
        self.mode: Mode = mode
        self.wire_format = WireFormat(getattr(sender, "wire_format", WireFormat.OPENAI_CHAT))
        self.model = model or str(getattr(sender, "model", "") or "")
        self.provider = provider or PROVIDER_BY_FORMAT[self.wire_format]
        self.context_window = self.policy.context_window or catalog.context_window(
            self.provider, self.model, env={}
        )
        self.output_cap = min(
            catalog.max_output_tokens(self.provider, self.model), self.policy.max_output_tokens_cap
        )
        self.max_tokens = max_tokens
        self.tools = tools
        # Tool definitions ride along with every request: measured once, reserved from the budget.
        self.reserved_chars = len(json.dumps(tools, ensure_ascii=False)) if tools else 0
        self._gateway = gateway or GatewayModel.from_policy(self.policy)
        self._classify = classifier
        self.compactor = compactor or HistoryCompactor(
            self.policy,
            self.archive,
            summarizer=resolve_summarizer(
                self.policy, summarizer, context_engine, env=os.environ if env is None else env
            ),
            events=self.events,
            stats=self.stats,
            memory_sink=memory_sink,
        )
        self.ladder = ladder or RecoveryLadder.default(self.policy)
        self.escalation = OutputEscalation(self.policy, provider_cap=self.output_cap)
        self.tool_result_budget_chars = self.policy.tool_result_budget_chars
        self.tool_result_max_chars = self.policy.tool_result_max_chars
        self.chars_per_token = self.policy.chars_per_token
        self.context_editing = (
            self.policy.context_engine == "provider" and self.wire_format is WireFormat.ANTHROPIC
        )
        self._transient_retries = transient_retries
        self._sleep = sleep
        self.passes = TurnPasses(
            self.policy, self.archive, self.wire_format, model=self.model, incremental=incremental
        )
        self._history = self._admitted(history, start=0)
        self._env_reported = False
        # Messages no accepted request carried yet (added, or answered, since the last one), by id.
        self._unproven: dict[int, Message] = {}
        self._marked: dict[int, tuple[Message, Message]] = {}  # probe marks, for undo snapshots

    # -- state ----------------------------------------------------------------
    @property
    def history(self) -> list[Message]:
        """A copy of the current (compacted) history."""
        return list(self._history)

    @property
    def gateway(self) -> GatewayModel:
        """What the session has learned of its gateway (SPEC §11): a frozen value, replaced as it learns."""
        return self._gateway

    @property
    def _history(self) -> list[Message]:
        return self._live_history

    @_history.setter
    def _history(self, messages: list[Message]) -> None:
        # Every change of the history reaches the archive's pins (O(changed); see SessionArchive).
        self._live_history = messages
        self.archive.track(LIVE_HISTORY, messages)

    @property
    def learned_cap(self) -> int | None:
        """The payload cap learned from the gateway's answers, if any."""
        return self._gateway.learned_cap

    @property
    def payload_cap(self) -> int:
        """The payload cap in force (configured or learned, the tighter one); 0 = none."""
        return self._gateway.effective_cap

    def add(self, message: Message) -> None:
        """Append one message (a user turn, a tool result, …).

        Raises :class:`~ctxrecover.errors.MessageError` for anything but a
        :class:`Message`, and its :class:`~ctxrecover.errors.UnencodableTextError`
        for text holding a lone surrogate (naming the index the message would
        take, the field and the char offset); the history is then unchanged.
        """
        self.extend((message,))

    def extend(self, messages: Iterable[Message]) -> None:
        """Append several messages; all are checked first (like :meth:`add`), so none or all enter."""
        admitted = self._admitted(messages, start=len(self._history))
        self._history.extend(admitted)
        self._unproven.update((id(m), m) for m in admitted)
        self.archive.track(LIVE_HISTORY, self._history)

    @staticmethod
    def _admitted(messages: Iterable[Message], *, start: int) -> list[Message]:
        admitted = list(messages)
        for index, message in enumerate(admitted, start):
            if not isinstance(message, Message):
                raise MessageError(
                    f"message {index}: Session.add needs a Message (e.g. Message.user(text)), "
                    f"got {type(message).__name__}",
                    field="message",
                    index=index,
                )
            check_encodable(message, index=index)
        for message in admitted:
            member_keys(message)  # archive on append: hashed now, so a later cut stores by key
        return admitted

    def set_aside(self, index: int) -> str:
        """Archive message ``index`` of the history whole and leave a stub with its recall marker.

        For the message a gateway's content rule refuses to carry
        (:attr:`ContentBlockedError.message_index`); tool-call pairing is kept.
        Returns the archive key of its text.
        """
        with self.archive.attributed("set_aside"):
            self._history, key = set_aside(self._history, index, archive=self.archive)
        return key

    def char_budget(self, budget_ratio: float | None = None, *, max_tokens: int | None = None) -> int:
        """The char budget the history must fit at ``budget_ratio`` (the mode's by default).

        When the request asks for ``max_tokens`` (Anthropic always does), the
        provider reserves them inside the window: the budget never exceeds the
        window minus that reservation, even at a generous ratio.

        Under a payload cap, the budget keeps ``1 − policy.payload_cap_headroom``
        (30%) of the room the cap leaves *beyond the non-compactable base*
        (system prompt, tool definitions): ``system weight + 70% × (cap − base)``.
        **Decision (SPEC §11):** with §1.3's ``70% × cap`` a system prompt over 30%
        of the cap made every turn compact to a budget it could never reach.
        """
        ratio = budget_ratio if budget_ratio is not None else self._mode_ratio
        budget = char_budget(
            self.context_window,
            ratio,
            chars_per_token=self.chars_per_token,
            reserved_chars=self.reserved_chars,
        )
        anthropic_default = DEFAULT_ANTHROPIC_MAX_TOKENS if self.wire_format is WireFormat.ANTHROPIC else 0
        reserve = max_tokens or anthropic_default
        room = self.context_window - reserve
        if reserve and room > 0:
            budget = min(budget, int(room * self.chars_per_token) - self.reserved_chars)
        cap = self._gateway.effective_cap
        if not cap:
            return budget
        system = self._history[: leading_system_count(self._history)]
        room = max(0, cap - self._request_bytes(system, max_tokens))
        # The policy's headroom, not sizes' module default: the knob must take effect.
        return min(budget, total_weight(system) + int(room * self.policy.payload_cap_headroom))

    @property
    def _mode_ratio(self) -> float:
        return self.policy.chat_budget_ratio if self.mode == "chat" else self.policy.budget_ratio

    @property
    def _keep_recent(self) -> int:
        return self.policy.chat_keep_recent if self.mode == "chat" else self.policy.keep_recent

    # -- the turn -------------------------------------------------------------
    def complete(self, *, max_tokens: int | None = None, cancel: CancelToken | None = None) -> Message:
        """Run one turn and return the assistant's message (appended to the history).

        Raises :class:`~ctxrecover.errors.PayloadFloorError` when what compaction
        cannot shrink is over the gateway's limit (no request wasted on it),
        :class:`~ctxrecover.errors.ContentBlockedError` when the gateway refuses the
        content rather than the size, :class:`~ctxrecover.errors.HeaderFaultError`
        for an HTTP 431, :class:`~ctxrecover.errors.UnrecoverableFailure` for
        failures compaction cannot fix (auth, rate limit, …),
        :class:`~ctxrecover.errors.RecoveryExhausted` after the last attempt, and
        :class:`~ctxrecover.errors.CompactionCancelled` when ``cancel`` fires during
        compaction (history untouched). A request known to fail — as large as a
        size the gateway rejected, or identical (recall keys aside) to a refused
        one — is never sent.
        """
        self._report_env_problems()
        self.stats.turns += 1
        self.escalation.start_turn()
        turn = _Turn(
            max_tokens=self.escalation.observe_user_override(
                max_tokens if max_tokens is not None else self.max_tokens
            ),
            transient_left=self._transient_retries,
        )
        request = self._prologue(turn.max_tokens, cancel)
        self._refuse_known_failure(request, turn)
        while True:
            self.stats.requests += 1
            try:
                response = self.sender.send(request)
            except Exception as exc:  # every failure is classified, never swallowed
                request = self._after_failure(exc, request, turn, cancel)
                continue
            self._account(request, response)
            self._unproven = {id(response.message): response.message}  # the answer was never sent
            accepted = self._gateway.accepted(response.request_bytes, policy=self.policy)
            self._update_gateway(accepted, accepted=True)
            turn.before_recovery, turn.size_signatures = None, set()
            if turn.attempts:
                self.stats.recoveries += 1
                turn.attempts = 0
            if response.truncated:
                room = self.context_window - self._input_tokens(request, response)
                grown = self.escalation.next_max_tokens(turn.max_tokens, room=room)
                if grown is not None:
                    self.stats.escalations += 1
                    known = len(self._history)
                    self._history = self.escalation.continuation(self._history, response.message)
                    self._unproven.update((id(m), m) for m in self._history[known:])
                    turn.max_tokens = grown
                    request = self._prologue(turn.max_tokens, cancel)
                    continue
            member_keys(response.message)
            self._history.append(response.message)
            return response.message

    def _after_failure(
        self, exc: Exception, request: ChatRequest, turn: _Turn, cancel: CancelToken | None
    ) -> ChatRequest:
        """Classify a failed send, let the gateway model judge it, and return the request to send
        next, or raise.

        Never returns a request known to fail: a ladder level whose request is as
        large as a rejected size, or identical (recall keys aside) to a refused
        body, is followed at once by the next level; when the ladder is spent the
        failure (or the floor diagnosis) is raised instead of a wasted request.
        """
        size = getattr(exc, "request_bytes", None)
        size = size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None
        history_chars = self.passes.weight(self._history)
        failure = self._classify(exc, request_bytes=size, history_chars=history_chars)
        self.stats.rejected_requests += 1
        if failure.kind is FailureKind.MALFORMED_HISTORY:
            # Pairing repair and one retry, never truncation. The outgoing copy is repaired
            # before every send, so a retry only happens when the repair changes the request.
            with self.archive.attributed("pairing"):
                self._history, _ = repair_malformed(self._history, self.archive)
            retry = self._prologue(turn.max_tokens, cancel)
            if not turn.malformed_retried and retry.messages != request.messages:
                turn.malformed_retried = True
                return retry
            raise UnrecoverableFailure(
                f"malformed history the provider rejects: {failure.evidence}", failure=failure
            ) from exc
        if failure.kind is FailureKind.OUTPUT_LIMIT:
            return self._lower_max_tokens(failure, request, turn, exc)
        before = self._gateway
        body = response_text(exc)
        judged = before.judge(
            failure, request_bytes=size, policy=self.policy, body=body, history_chars=history_chars
        )
        failure = judged.failure
        if judged.verdict is Verdict.HEADER_FAULT:
            self._gateway = judged.model
            fault = header_fault_error(getattr(exc, "header_bytes", None), self._size_of(request), failure)
            self.events.notice(HEADER_FAULT_CODE, str(fault))
            raise fault from exc
        if judged.verdict is Verdict.CONTENT_BLOCK:
            raise self._content_block(judged, request, turn) from exc
        if judged.verdict is Verdict.RETRY or failure.kind is FailureKind.TRANSIENT_NETWORK:
            self._gateway = judged.model
            if turn.transient_left > 0:
                self._sleep(TRANSIENT_BACKOFF_S[min(self._transient_retries - turn.transient_left, 1)])
                turn.transient_left -= 1
                return request  # a plain retry: nothing about the request was wrong
        if not failure.recoverable:
            raise UnrecoverableFailure(
                f"{failure.kind}: {failure.evidence or failure.kind}", failure=failure, attempts=turn.attempts
            ) from exc
        announced = False
        probe: tuple[int, ...] = ()
        if judged.verdict is Verdict.SIZE_LIMIT:
            probe = self._probe_indices(failure, turn)
            if failure.notice:  # SPEC §6's order: the retry notice, then what the rejection teaches
                self.events.notice(RECOVERABLE_FAILURE_CODE, failure.notice)
                announced = True
            if turn.before_recovery is None:
                turn.before_recovery = _Checkpoint(
                    list(self._history), before, self.tool_result_budget_chars, self.tool_result_max_chars
                )
            turn.size_signatures.add(judged.signature)
            self._update_gateway(judged.model)
            error = self._floor_error(failure, turn, request.max_tokens, warn=True)
            if error is not None:
                raise error from exc
        self._gateway = self._gateway.refuse(self._body_key(request), self._size_of(request), judged.verdict)
        retry = request
        while turn.attempts < self.policy.max_recovery_attempts:
            turn.attempts += 1
            if probe:  # this attempt keeps what the gateway never accepted whole (recovery.probe)
                retry = self._probe_retry(failure, turn, probe, announce=not announced, cancel=cancel)
                probe = ()
            else:
                self._recover(failure, turn.attempts, announce=not announced)
                self._learn_window(failure)
                retry = self._prologue(turn.max_tokens, cancel)
            announced = True  # one notice per rejected request, however many levels it takes to retry
            if self._known_failure(retry) is None:
                return retry
        # Compaction did all it could: when its smallest request is still as large as a rejected one,
        # the floor diagnosis says so (whatever the cap strategy: the evidence is the same).
        retry_size = self._size_of(retry)
        limit = self._gateway.hard_limit or self._gateway.smallest_rejected or failure.rejected_bytes
        floor_reached = limit is not None and retry_size >= limit
        if judged.verdict is Verdict.SIZE_LIMIT and retry is not request and floor_reached:
            error = self._floor_error(failure, turn, retry.max_tokens, smallest=retry_size)
            if error is not None:
                raise error from exc
        raise RecoveryExhausted(
            f"recovery exhausted after {turn.attempts} attempt(s): {failure.reason_text or failure.kind}",
            failure=failure,
            attempts=turn.attempts,
        ) from exc

    def _probe_retry(
        self,
        failure: Failure,
        turn: _Turn,
        indices: tuple[int, ...],
        *,
        announce: bool,
        cancel: CancelToken | None,
    ) -> ChatRequest:
        """The recovery attempt for a WAF's size reading that keeps the unproven messages whole.

        Marked ``preserve_verbatim`` for this attempt, they survive the ladder step and the
        prologue's compaction while they fit the verbatim share of the budget (SPEC §5);
        larger, the attempt keeps the conversation from the user message before the first of
        them (:class:`~ctxrecover.recovery.Level2`, older messages archived, the proven ones cut
        to the shrink floor: :class:`~ctxrecover.recovery.probe.CapProven`) and sends it without
        further compaction. A retry larger than what the gateway accepted tells nothing: it is
        compacted as usual.
        """
        unproven_weight = sum(self.passes.weight([self._history[i]]) for i in indices)
        share = self.char_budget(max_tokens=turn.max_tokens) * self.policy.verbatim_budget_fraction
        self._history, marks = mark_unproven(self._history, indices)
        self._marked = marks
        if unproven_weight <= share:
            self._recover(failure, turn.attempts, announce=announce)
            retry = self._prologue(turn.max_tokens, cancel)
        else:
            keep = keep_from(self._history, indices[0])
            ladder = RecoveryLadder(Level2(keep=keep) + CapProven())
            self._recover(failure, turn.attempts, announce=announce, ladder=ladder)
            retry = self._outgoing(turn.max_tokens)
        self._history = unmarked(self._history, marks)
        self.archive.track(LIVE_HISTORY, self._history)
        retry = dataclasses.replace(retry, messages=tuple(unmarked(retry.messages, marks)))
        if self._size_of(retry) > self._gateway.largest_accepted:
            retry = self._prologue(turn.max_tokens, cancel)  # it tells nothing: compact as usual
        return retry

    def _probe_indices(self, failure: Failure, turn: _Turn) -> tuple[int, ...]:
        """The messages the retry for a size reading keeps whole, to tell it from a content rule
        (:mod:`ctxrecover.recovery.probe`): only for a WAF refusal (a 413 names the size; a 403
        does not), the turn's first, and only when those messages fit under what the gateway
        accepted with the system messages — else no retry keeping them could tell anything."""
        if failure.kind is not FailureKind.WAF_REJECTION or turn.before_recovery is not None:
            return ()
        indices = unproven(self._history, self._unproven)
        if not indices:
            return ()
        system = self._history[: leading_system_count(self._history)]
        kept = [*system, *(self._history[i] for i in indices)]
        if self._request_bytes(kept, turn.max_tokens) > self._gateway.largest_accepted:
            return ()
        return indices

    # -- what the gateway model decides ----------------------------------------------------------
    def _update_gateway(self, model: GatewayModel, *, accepted: bool = False) -> None:
        """Adopt ``model``; say so when a rejection set or moved the learned cap (SPEC §6.1)."""
        notice = cap_notice(self._gateway, model, accepted=accepted)
        self._gateway = model
        if notice is not None:
            self.events.emit(notice)

    def _size_of(self, request: ChatRequest) -> int:
        return self.passes.request_bytes(
            request.messages, max_tokens=request.max_tokens, tools=request.tools, extra=request.extra or None
        )

    def _body_key(self, request: ChatRequest) -> str:
        body = encode_request(
            request.messages,
            self.wire_format,
            model=self.model,
            max_tokens=request.max_tokens,
            tools=request.tools,
            extra=request.extra or None,
        )
        return body_key(body)

    def _known_failure(self, request: ChatRequest) -> tuple[int, str] | None:
        """(size, why) when ``request`` is known to fail — too large, or a refused body — else None."""
        size = self._size_of(request)
        refused = self._gateway.refusal(size, lambda: self._body_key(request))
        if refused is not None:
            return size, refused.verdict
        if self._gateway.known_too_large(size):
            return size, Verdict.SIZE_LIMIT.value
        return None

    def _refuse_known_failure(self, request: ChatRequest, turn: _Turn) -> None:
        """Raise before sending a turn's first request when it is known to fail."""
        known = self._known_failure(request)
        if known is None:
            return
        size, why = known
        if why == Verdict.CONTENT_BLOCK:
            raise self._content_block_error(size, None, turn)
        if why == Verdict.SIZE_LIMIT:
            error = self._floor_error(None, turn, request.max_tokens, smallest=size)
            if error is not None:
                raise error
        raise RecoveryExhausted(
            f"not sent: the request is identical (recall keys aside) to one the provider refused ({why})"
        )

    def _base_sizes(self, max_tokens: int | None) -> tuple[int, int]:
        """Real bytes of a request carrying only the system messages, and what tool definitions add."""
        system = self._history[: leading_system_count(self._history)]
        alone = request_size(system, self.wire_format, model=self.model, max_tokens=max_tokens)
        return alone, self._request_bytes(system, max_tokens) - alone

    def _floor_error(
        self,
        failure: Failure | None,
        turn: _Turn,
        max_tokens: int | None,
        *,
        smallest: int | None = None,
        warn: bool = False,
    ) -> PayloadFloorError | None:
        """The floor diagnosis (SPEC §6.2, §11) against the smallest rejected size, in real bytes.

        ``smallest`` is the smallest request compaction produced, when it did; else the
        least any compaction could leave is measured. Returns the error to raise (the
        history goes back to before this turn's recovery), or None — after the ``⚠``
        warning when ``warn``.
        """
        rejected = self._gateway.smallest_rejected or (failure.rejected_bytes if failure else None)
        if not rejected:
            return None
        system, tools = self._base_sizes(max_tokens)
        error, warning = floor_error(
            system_bytes=system,
            tools_bytes=tools,
            rejected_bytes=rejected,
            limit_bytes=self._gateway.hard_limit,
            smallest=smallest
            if smallest is not None
            else lambda: self._request_bytes(least_history(self._history, self.policy), max_tokens),
            policy=self.policy,
            failure=failure,
            attempts=turn.attempts,
        )
        if error is None:
            if warn and warning is not None:
                self.events.emit(warning)
            return None
        if turn.before_recovery is not None:
            self._restore(turn.before_recovery)
        return error

    def _restore(self, checkpoint: _Checkpoint) -> None:
        self._history = list(checkpoint.history)
        self.tool_result_budget_chars = checkpoint.tool_result_budget_chars
        self.tool_result_max_chars = checkpoint.tool_result_max_chars

    def _content_block(self, judged: Judgement, request: ChatRequest, turn: _Turn) -> ContentBlockedError:
        """A refusal at or below an accepted size: no cap, no compaction, a notice and a typed error.

        When this turn already took a rejection with the same signature for a size
        limit, that was the same rule firing on content: its evidence and the
        compaction done for it are undone.
        """
        model = judged.model
        checkpoint = turn.before_recovery
        if checkpoint is not None and judged.signature in turn.size_signatures:
            model = model.retract_to(checkpoint.gateway)
            self._restore(checkpoint)
            turn.before_recovery, turn.size_signatures = None, set()
        size = self._size_of(request)
        self._gateway = model.refuse(self._body_key(request), size, Verdict.CONTENT_BLOCK)
        return self._content_block_error(judged.failure.rejected_bytes or size, judged.failure, turn)

    def _content_block_error(self, size: int, failure: Failure | None, turn: _Turn) -> ContentBlockedError:
        error = content_block_error(
            self._history,
            self.wire_format,
            request_bytes=size,
            largest_accepted=self._gateway.largest_accepted,
            failure=failure,
            attempts=turn.attempts,
        )
        self.events.notice(CONTENT_BLOCK_CODE, str(error))
        return error

    def _lower_max_tokens(
        self, failure: Failure, request: ChatRequest, turn: _Turn, exc: Exception
    ) -> ChatRequest:
        """A 400 saying max_tokens is too large: retry with the limit it states (else half), never
        compact; the lower value holds for the rest of the session (SPEC §11)."""
        current = request.max_tokens
        if current is None and self.wire_format is WireFormat.ANTHROPIC:
            current = DEFAULT_ANTHROPIC_MAX_TOKENS
        lowered = lowered_max_tokens(failure, current)
        if lowered is None or turn.output_lowerings >= OUTPUT_LIMIT_RETRIES:
            asked = "not set" if current is None else current
            raise UnrecoverableFailure(
                f"output_limit: {failure.evidence or 'max_tokens rejected'} (max_tokens={asked})",
                failure=failure,
                attempts=turn.attempts,
            ) from exc
        turn.output_lowerings += 1
        self.escalation.learn_output_cap(lowered)
        notice = OUTPUT_LIMIT_DEFAULT_NOTICE % lowered if current is None else OUTPUT_LIMIT_NOTICE % (
            current, lowered
        )
        self.events.notice(OUTPUT_LIMIT_CODE, notice)
        turn.max_tokens = lowered
        return dataclasses.replace(request, max_tokens=lowered)

    def _prologue(self, max_tokens: int | None, cancel: CancelToken | None) -> ChatRequest:
        """SPEC §3 order: microcompact, dedup, pre-flight, compaction, then the outgoing copy."""
        self.archive.track(LIVE_HISTORY, self._history)  # messages appended in place since
        policy, passes = self.policy, self.passes
        history, micro = passes.microcompact(self._history)
        if micro.truncated or micro.summarized:
            self.events.notice("microcompact", micro.notice)
        history = passes.dedup(history)
        history, aging = passes.age_skills(history)
        if aging.blocks_archived:
            self.events.notice("skill_aging", aging.notice)
        self._history = history

        system_count = leading_system_count(history)
        base = self._request_bytes(history[:system_count], max_tokens)
        size = passes.history_bytes(history, max_tokens=max_tokens, tools=self.tools)
        check = preflight(size, self._gateway, policy, base_bytes=base)
        self._gateway = check.gateway
        if check.notice is not None:
            self.events.emit(check.notice)
        budget = self.char_budget(check.budget_ratio_override, max_tokens=max_tokens)
        if passes.weight(self._history) > budget:
            self._compact_to(budget, "auto", cancel)
        request = self._outgoing(max_tokens)
        # Under a payload cap the real bytes decide. Each round tightens the budget to the
        # measured overshoot and, when the kept recent messages alone are over it (every
        # other message already at the shrink floor), keeps fewer of them: never send a
        # request the session already knows is over its own cap while compaction can help.
        cap = self._gateway.effective_cap
        keep = self._keep_recent
        for _ in range(BYTE_FIT_ROUNDS):
            size = self._size_of(request)
            if not cap or size <= cap:
                return request
            budget = int(min(budget, passes.weight(self._history)) * cap / size * BYTE_FIT_MARGIN)
            changed = self._compact_to(budget, "auto", cancel, keep_recent=keep)
            if not changed and keep <= BYTE_FIT_MIN_KEEP:
                break
            keep = max(BYTE_FIT_MIN_KEEP, keep // 2)
            request = self._outgoing(max_tokens)
        if cap and self._size_of(request) > cap:
            # The last resort before a request known to be over the cap: images too large for the
            # gateway, the newest included, go to the archive behind their notes.
            with self.archive.attributed("images"):
                history, images = archive_images(self._history, archive=self.archive, keep_recent=0)
            if images.images_archived:
                self.events.notice("images_archived", images.notice)
                self._history = history
                request = self._outgoing(max_tokens)
        return request

    def _compact_to(
        self,
        budget: int,
        trigger: Literal["auto", "manual"],
        cancel: CancelToken | None,
        *,
        keep_recent: int | None = None,
    ) -> bool:
        """Planned compaction to ``budget``; inline images outside the kept messages are archived
        first (so compaction never drops a pixel), which may be enough. True when anything changed."""
        keep = self._keep_recent if keep_recent is None else keep_recent
        with self.archive.attributed("images"):
            history, images = archive_images(
                self._history, archive=self.archive, keep_recent=keep, user_first=False
            )
        if images.images_archived:
            self.events.notice("images_archived", images.notice)
            self._history = history
            if self.passes.weight(history) <= budget:
                return True
        result = self.compactor.compact(
            self._history, budget_chars=budget, keep_recent=keep, trigger=trigger, cancel=cancel
        )
        changed = result.history is not self._history and result.history != self._history
        self._history = result.history
        return changed or bool(images.images_archived)

    def _outgoing(self, max_tokens: int | None) -> ChatRequest:
        """The request for the history: pairing repair and the tool-result budget applied to a copy,
        never to the history itself."""
        outgoing = self.passes.outgoing(
            self._history, budget_chars=self.tool_result_budget_chars, max_chars=self.tool_result_max_chars
        )
        self.archive.track(LIVE_OUTGOING, outgoing)  # the model sees the previews' markers: keep them too
        headers: dict[str, str] = {}
        extra: dict[str, Any] = {}
        if self.context_editing:
            headers, extra = context_management_request()
        return ChatRequest(
            tuple(outgoing), max_tokens=max_tokens, tools=self.tools, headers=headers, extra=extra
        )

    def _request_bytes(self, history: Sequence[Message], max_tokens: int | None) -> int:
        return request_size(
            history, self.wire_format, model=self.model, max_tokens=max_tokens, tools=self.tools
        )

    def _learn_window(self, failure: Failure) -> None:
        limit = failure.context_limit_tokens
        if limit and limit < self.context_window:
            self.context_window = limit
            self.events.notice("learned_window", LEARNED_WINDOW_NOTICE % limit)

    def _recover(
        self, failure: Failure, attempt: int, *, announce: bool = True, ladder: RecoveryLadder | None = None
    ) -> None:
        """One recovery attempt (SPEC §6 steps 3–7): the ladder step (``ladder``'s, else the
        session's) and, once, the payload notice."""
        ctx = RecoveryContext(
            policy=self.policy,
            archive=self.archive,
            failure=failure,
            tool_result_budget_chars=self.tool_result_budget_chars,
            tool_result_max_chars=self.tool_result_max_chars,
        )
        payload_notice = failure.is_payload and not self._gateway.payload_notice_sent
        with self.archive.attributed("recovery"):
            result = recover(
                self._history,
                failure,
                attempt,
                ladder=ladder or self.ladder,
                ctx=ctx,
                events=self.events,
                before_rewrite=self.compactor.prepare_rewrite,
                payload_notice=payload_notice,
                announce=announce,
            )
        if payload_notice:
            self._gateway = self._gateway.replace(payload_notice_sent=True)
        self.stats.recovery_attempts += 1
        if result.changed:
            self.stats.compactions += 1  # a recovery rewrite is a compaction (trigger "recovery")
            self.compactor.record_rewrite(result.history)
        else:
            self.compactor.discard_snapshot()
        self._history = result.history
        self.tool_result_budget_chars = result.tool_result_budget_chars
        self.tool_result_max_chars = result.tool_result_max_chars

    def _input_tokens(self, request: ChatRequest, response: ChatResponse | None = None) -> int:
        """The request's input tokens: the provider's count when it reported one, else an estimate
        (text at the session's chars per token, images at their token cost)."""
        if response is not None:
            usage = response.usage
            reported = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
            if reported:
                return reported
        weights = self.passes.request_weights(request.messages)
        text = weights.weight - weights.image_chars + self.reserved_chars
        return math.ceil(text / self.chars_per_token) + weights.image_tokens

    def _account(self, request: ChatRequest, response: ChatResponse) -> None:
        usage = response.usage
        self.stats.provider_input_tokens += (
            usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        )
        self.stats.provider_output_tokens += usage.output_tokens
        edited = False
        if self.context_editing:
            with self.archive.attributed("context_editing"):
                self._history, report = mirror_applied_edits(
                    self._history, response.raw, archive=self.archive
                )
            if report.applied:
                edited = True
                self.stats.cache_rebuilds_expected += 1
                self.events.notice(
                    "context_editing",
                    f"ℹ provider context editing cleared {report.cleared_tool_uses} tool result(s), "
                    f"{report.cleared_input_tokens} tokens — mirrored locally (recoverable via @recall)",
                )
        # Calibrate on text only: images weigh their wire bytes but cost the model their token estimate.
        weights = self.passes.request_weights(request.messages)
        prompt_tokens = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        text_tokens = prompt_tokens - weights.image_tokens
        if not edited and text_tokens >= CALIBRATION_MIN_TOKENS:
            chars = weights.weight - weights.image_chars + self.reserved_chars
            observed = chars / text_tokens
            low, high = CALIBRATION_BOUNDS
            blended = (1 - CALIBRATION_WEIGHT) * self.chars_per_token + CALIBRATION_WEIGHT * observed
            self.chars_per_token = min(high, max(low, blended))

    def _archive_failed(self, exc: ArchiveError, stage: str) -> None:
        """The archive refused a write (the cut was abandoned) or a pin change: count it and say so."""
        if stage == "put":
            self.stats.archive_refusals += 1
            self.events.notice("archive_refused", ARCHIVE_REFUSED_NOTICE % exc)
        else:
            self.events.notice("archive_pins", ARCHIVE_PINS_NOTICE % exc)

    def _report_env_problems(self) -> None:
        if self._env_reported:
            return
        self._env_reported = True
        for problem in self.policy.env_problems:
            self.events.notice("config", problem)

    # -- manual compaction ------------------------------------------------------
    def compact(
        self, instruction: str | None = None, *, cancel: CancelToken | None = None
    ) -> CompactionReport:
        """``/compact [instruction]``: compact now at the manual budget ratio (0.50).

        With an instruction, a guided summary that keeps the last 4 messages.
        """
        budget = self.char_budget(self.policy.manual_budget_ratio)
        keep = 4 if instruction else self._keep_recent
        with self.archive.attributed("images"):
            self._history, _ = archive_images(
                self._history, archive=self.archive, keep_recent=keep, user_first=False
            )
        result = self.compactor.compact(
            self._history,
            budget_chars=budget,
            keep_recent=keep,
            trigger="manual",
            cancel=cancel,
            instruction=instruction,
        )
        self._history = result.history
        return result.report

    def undo_compaction(self) -> bool:
        """Restore the history from before the newest compaction; False when there is none."""
        snapshot = self.compactor.undo()
        if snapshot is None:
            return False
        self._history = unmarked(snapshot, self._marked)
        return True

    # -- persistence --------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """What persists with the session: history, counters, the gateway model, the learned output
        cap, calibration and the session's tool-result limits (plain JSON-ready data)."""
        return {
            "history": [m.to_dict() for m in self._history],
            "stats": self.stats.to_dict(),
            "gateway": self._gateway.to_dict(),
            "output_cap": self.escalation.learned_cap,
            "chars_per_token": self.chars_per_token,
            "context_window": self.context_window,
            "tool_result_budget_chars": self.tool_result_budget_chars,
            "tool_result_max_chars": self.tool_result_max_chars,
            "archive_owner": self.archive.owner,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Load what :meth:`state` saved (into a session built with the same sender and policy).

        The session takes over the archive pins its saved self held (``archive_owner``),
        so what the restored history reaches is still there however long ago it was saved.
        """
        owner = state.get("archive_owner")
        if isinstance(owner, str) and owner:
            self.archive.adopt(owner)
        history = [Message.from_dict(d) for d in state.get("history", [])]
        for message in history:
            member_keys(message)  # as if each entered now (see _admitted)
        self._history = history
        self.stats = SessionStats.from_dict(state.get("stats", {}))
        self.compactor.stats = self.stats
        if "gateway" in state:
            self._gateway = GatewayModel.from_dict(state["gateway"])
        if state.get("output_cap"):
            self.escalation.learn_output_cap(int(state["output_cap"]))
        self.chars_per_token = float(state.get("chars_per_token", self.chars_per_token))
        self.context_window = int(state.get("context_window", self.context_window))
        self.tool_result_budget_chars = int(
            state.get("tool_result_budget_chars", self.tool_result_budget_chars)
        )
        self.tool_result_max_chars = int(state.get("tool_result_max_chars", self.tool_result_max_chars))
