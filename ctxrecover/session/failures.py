"""What one turn does when a send fails: classify, let the gateway model judge, recover, or raise."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from ctxrecover.classify import Failure, FailureKind
from ctxrecover.errors import ContentBlockedError, PayloadFloorError, RecoveryExhausted, UnrecoverableFailure
from ctxrecover.messages import Message
from ctxrecover.passes.truncate import leading_system_count
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
from ctxrecover.recovery.probe import CapProven, keep_from, mark_unproven, unmarked, unproven
from ctxrecover.session.host import LIVE_HISTORY, SessionHost
from ctxrecover.summarize import CancelToken
from ctxrecover.transport import ChatRequest
from ctxrecover.wire import DEFAULT_ANTHROPIC_MAX_TOKENS, WireFormat, encode_request, request_size

__all__ = ["Checkpoint", "FailureHandler", "Turn"]

TRANSIENT_BACKOFF_S = (1.0, 4.0)
OUTPUT_LIMIT_RETRIES = 3  # times one turn may lower max_tokens after "max_tokens is too large"
# Decision beyond the reference: an overflow error that states the real window tightens the session's
# window (like a learned payload cap), so the next turns compact before the provider rejects them.
LEARNED_WINDOW_NOTICE = (
    "ℹ Provider reported a context window of %d tokens — budget recomputed for this session"
)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The session before a turn's first size-limit recovery, to undo it if it was for nothing."""

    history: list[Message]
    gateway: GatewayModel
    tool_result_budget_chars: int
    tool_result_max_chars: int


@dataclass(slots=True)
class Turn:
    """What one ``complete()`` call tracks across its attempts."""

    max_tokens: int | None
    transient_left: int
    attempts: int = 0
    malformed_retried: bool = False
    output_lowerings: int = 0
    before_recovery: Checkpoint | None = None
    size_signatures: set[str] = field(default_factory=set)


class FailureHandler:
    """The failure handling of a :class:`~ctxrecover.session.Session`'s turns (SPEC §6, §11).

    It changes the session's history, gateway model, tool-result limits and window through
    ``session`` (:class:`~ctxrecover.session.host.SessionHost`); ``classifier`` reads a failed
    send, ``sleep`` waits between the ``transient_retries`` plain retries of a network fault.
    """

    def __init__(
        self,
        session: SessionHost,
        *,
        classifier: Callable[..., Failure],
        sleep: Callable[[float], None],
        transient_retries: int,
    ) -> None:
        self.session = session
        self._classify = classifier
        self._sleep = sleep
        self._transient_retries = transient_retries

    def new_turn(self, max_tokens: int | None) -> Turn:
        """What a new ``complete()`` call starts from: ``max_tokens`` and the full transient retries."""
        return Turn(max_tokens=max_tokens, transient_left=self._transient_retries)

    def after_failure(
        self, exc: Exception, request: ChatRequest, turn: Turn, cancel: CancelToken | None
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
        history_chars = self.session.passes.weight(self.session._history)
        failure = self._classify(exc, request_bytes=size, history_chars=history_chars)
        self.session.stats.rejected_requests += 1
        if failure.kind is FailureKind.MALFORMED_HISTORY:
            # Pairing repair and one retry, never truncation. The outgoing copy is repaired
            # before every send, so a retry only happens when the repair changes the request.
            with self.session.archive.attributed("pairing"):
                self.session._history, _ = repair_malformed(self.session._history, self.session.archive)
            retry = self.session._prologue(turn.max_tokens, cancel)
            if not turn.malformed_retried and retry.messages != request.messages:
                turn.malformed_retried = True
                return retry
            raise UnrecoverableFailure(
                f"malformed history the provider rejects: {failure.evidence}", failure=failure
            ) from exc
        if failure.kind is FailureKind.OUTPUT_LIMIT:
            return self._lower_max_tokens(failure, request, turn, exc)
        before = self.session._gateway
        body = response_text(exc)
        judged = before.judge(
            failure, request_bytes=size, policy=self.session.policy, body=body, history_chars=history_chars
        )
        failure = judged.failure
        if judged.verdict is Verdict.HEADER_FAULT:
            self.session._gateway = judged.model
            fault = header_fault_error(
                getattr(exc, "header_bytes", None), self.session._size_of(request), failure
            )
            self.session.events.notice(HEADER_FAULT_CODE, str(fault))
            raise fault from exc
        if judged.verdict is Verdict.CONTENT_BLOCK:
            raise self._content_block(judged, request, turn) from exc
        if judged.verdict is Verdict.RETRY or failure.kind is FailureKind.TRANSIENT_NETWORK:
            self.session._gateway = judged.model
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
                self.session.events.notice(RECOVERABLE_FAILURE_CODE, failure.notice)
                announced = True
            if turn.before_recovery is None:
                turn.before_recovery = Checkpoint(
                    list(self.session._history),
                    before,
                    self.session.tool_result_budget_chars,
                    self.session.tool_result_max_chars,
                )
            turn.size_signatures.add(judged.signature)
            self.update_gateway(judged.model)
            error = self._floor_error(failure, turn, request.max_tokens, warn=True)
            if error is not None:
                raise error from exc
        self.session._gateway = self.session._gateway.refuse(
            self._body_key(request), self.session._size_of(request), judged.verdict
        )
        retry = request
        while turn.attempts < self.session.policy.max_recovery_attempts:
            turn.attempts += 1
            if probe:  # this attempt keeps what the gateway never accepted whole (recovery.probe)
                retry = self._probe_retry(failure, turn, probe, announce=not announced, cancel=cancel)
                probe = ()
            else:
                self._recover(failure, turn.attempts, announce=not announced)
                self._learn_window(failure)
                retry = self.session._prologue(turn.max_tokens, cancel)
            announced = True  # one notice per rejected request, however many levels it takes to retry
            if self._known_failure(retry) is None:
                return retry
        # Compaction did all it could: when its smallest request is still as large as a rejected one,
        # the floor diagnosis says so (whatever the cap strategy: the evidence is the same).
        retry_size = self.session._size_of(retry)
        gateway = self.session._gateway
        limit = gateway.hard_limit or gateway.smallest_rejected or failure.rejected_bytes
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
        turn: Turn,
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
        unproven_weight = sum(self.session.passes.weight([self.session._history[i]]) for i in indices)
        budget = self.session.char_budget(max_tokens=turn.max_tokens)
        share = budget * self.session.policy.verbatim_budget_fraction
        self.session._history, marks = mark_unproven(self.session._history, indices)
        self.session._marked = marks
        if unproven_weight <= share:
            self._recover(failure, turn.attempts, announce=announce)
            retry = self.session._prologue(turn.max_tokens, cancel)
        else:
            keep = keep_from(self.session._history, indices[0])
            ladder = RecoveryLadder(Level2(keep=keep) + CapProven())
            self._recover(failure, turn.attempts, announce=announce, ladder=ladder)
            retry = self.session._outgoing(turn.max_tokens)
        self.session._history = unmarked(self.session._history, marks)
        self.session.archive.track(LIVE_HISTORY, self.session._history)
        retry = dataclasses.replace(retry, messages=tuple(unmarked(retry.messages, marks)))
        if self.session._size_of(retry) > self.session._gateway.largest_accepted:
            retry = self.session._prologue(turn.max_tokens, cancel)  # it tells nothing: compact as usual
        return retry

    def _probe_indices(self, failure: Failure, turn: Turn) -> tuple[int, ...]:
        """The messages the retry for a size reading keeps whole, to tell it from a content rule
        (:mod:`ctxrecover.recovery.probe`): only for a WAF refusal (a 413 names the size; a 403
        does not), the turn's first, and only when those messages fit under what the gateway
        accepted with the system messages — else no retry keeping them could tell anything."""
        if failure.kind is not FailureKind.WAF_REJECTION or turn.before_recovery is not None:
            return ()
        indices = unproven(self.session._history, self.session._unproven)
        if not indices:
            return ()
        system = self.session._history[: leading_system_count(self.session._history)]
        kept = [*system, *(self.session._history[i] for i in indices)]
        if self.session._request_bytes(kept, turn.max_tokens) > self.session._gateway.largest_accepted:
            return ()
        return indices

    def update_gateway(self, model: GatewayModel, *, accepted: bool = False) -> None:
        """Adopt ``model``; say so when a rejection set or moved the learned cap (SPEC §6.1)."""
        notice = cap_notice(self.session._gateway, model, accepted=accepted)
        self.session._gateway = model
        if notice is not None:
            self.session.events.emit(notice)

    def _known_failure(self, request: ChatRequest) -> tuple[int, str] | None:
        """(size, why) when ``request`` is known to fail — too large, or a refused body — else None."""
        size = self.session._size_of(request)
        refused = self.session._gateway.refusal(size, lambda: self._body_key(request))
        if refused is not None:
            return size, refused.verdict
        if self.session._gateway.known_too_large(size):
            return size, Verdict.SIZE_LIMIT.value
        return None

    def refuse_known_failure(self, request: ChatRequest, turn: Turn) -> None:
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

    def _body_key(self, request: ChatRequest) -> str:
        body = encode_request(
            request.messages,
            self.session.wire_format,
            model=self.session.model,
            max_tokens=request.max_tokens,
            tools=request.tools,
            extra=request.extra or None,
        )
        return body_key(body)

    def _base_sizes(self, max_tokens: int | None) -> tuple[int, int]:
        """Real bytes of a request carrying only the system messages, and what tool definitions add."""
        system = self.session._history[: leading_system_count(self.session._history)]
        alone = request_size(
            system, self.session.wire_format, model=self.session.model, max_tokens=max_tokens
        )
        return alone, self.session._request_bytes(system, max_tokens) - alone

    def _floor_error(
        self,
        failure: Failure | None,
        turn: Turn,
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
        rejected = self.session._gateway.smallest_rejected or (failure.rejected_bytes if failure else None)
        if not rejected:
            return None
        system, tools = self._base_sizes(max_tokens)
        error, warning = floor_error(
            system_bytes=system,
            tools_bytes=tools,
            rejected_bytes=rejected,
            limit_bytes=self.session._gateway.hard_limit,
            smallest=smallest
            if smallest is not None
            else lambda: self.session._request_bytes(
                least_history(self.session._history, self.session.policy), max_tokens
            ),
            policy=self.session.policy,
            failure=failure,
            attempts=turn.attempts,
        )
        if error is None:
            if warn and warning is not None:
                self.session.events.emit(warning)
            return None
        if turn.before_recovery is not None:
            self._restore(turn.before_recovery)
        return error

    def _restore(self, checkpoint: Checkpoint) -> None:
        self.session._history = list(checkpoint.history)
        self.session.tool_result_budget_chars = checkpoint.tool_result_budget_chars
        self.session.tool_result_max_chars = checkpoint.tool_result_max_chars

    def _content_block(self, judged: Judgement, request: ChatRequest, turn: Turn) -> ContentBlockedError:
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
        size = self.session._size_of(request)
        self.session._gateway = model.refuse(self._body_key(request), size, Verdict.CONTENT_BLOCK)
        return self._content_block_error(judged.failure.rejected_bytes or size, judged.failure, turn)

    def _content_block_error(self, size: int, failure: Failure | None, turn: Turn) -> ContentBlockedError:
        error = content_block_error(
            self.session._history,
            self.session.wire_format,
            request_bytes=size,
            largest_accepted=self.session._gateway.largest_accepted,
            failure=failure,
            attempts=turn.attempts,
        )
        self.session.events.notice(CONTENT_BLOCK_CODE, str(error))
        return error

    def _lower_max_tokens(
        self, failure: Failure, request: ChatRequest, turn: Turn, exc: Exception
    ) -> ChatRequest:
        """A 400 saying max_tokens is too large: retry with the limit it states (else half), never
        compact; the lower value holds for the rest of the session (SPEC §11)."""
        current = request.max_tokens
        if current is None and self.session.wire_format is WireFormat.ANTHROPIC:
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
        self.session.escalation.learn_output_cap(lowered)
        notice = (
            OUTPUT_LIMIT_DEFAULT_NOTICE % lowered
            if current is None
            else OUTPUT_LIMIT_NOTICE % (current, lowered)
        )
        self.session.events.notice(OUTPUT_LIMIT_CODE, notice)
        turn.max_tokens = lowered
        return dataclasses.replace(request, max_tokens=lowered)

    def _learn_window(self, failure: Failure) -> None:
        limit = failure.context_limit_tokens
        if limit and limit < self.session.context_window:
            self.session.context_window = limit
            self.session.events.notice("learned_window", LEARNED_WINDOW_NOTICE % limit)

    def _recover(
        self, failure: Failure, attempt: int, *, announce: bool = True, ladder: RecoveryLadder | None = None
    ) -> None:
        """One recovery attempt (SPEC §6 steps 3–7): the ladder step (``ladder``'s, else the
        session's) and, once, the payload notice."""
        ctx = RecoveryContext(
            policy=self.session.policy,
            archive=self.session.archive,
            failure=failure,
            tool_result_budget_chars=self.session.tool_result_budget_chars,
            tool_result_max_chars=self.session.tool_result_max_chars,
        )
        payload_notice = failure.is_payload and not self.session._gateway.payload_notice_sent
        with self.session.archive.attributed("recovery"):
            result = recover(
                self.session._history,
                failure,
                attempt,
                ladder=ladder or self.session.ladder,
                ctx=ctx,
                events=self.session.events,
                before_rewrite=self.session.compactor.prepare_rewrite,
                payload_notice=payload_notice,
                announce=announce,
            )
        if payload_notice:
            self.session._gateway = self.session._gateway.replace(payload_notice_sent=True)
        self.session.stats.recovery_attempts += 1
        if result.changed:
            self.session.stats.compactions += 1  # a recovery rewrite is a compaction (trigger "recovery")
            self.session.compactor.record_rewrite(result.history)
        else:
            self.session.compactor.discard_snapshot()
        self.session._history = result.history
        self.session.tool_result_budget_chars = result.tool_result_budget_chars
        self.session.tool_result_max_chars = result.tool_result_max_chars
