"""What a rejected request gets (SPEC §2, §6, §8, §11): the one place a turn decides it.

:func:`answer_rejection` is read top to bottom as the decision table. The failure is
classified once (with the policy's thresholds) and judged once by the gateway model; then:

============================  ===========================================================
judged as                     the turn does
============================  ===========================================================
malformed history             pairing repair, one retry when it changed the request
max_tokens over the limit     lower ``max_tokens`` (the stated limit, else half), retry
header fault (431)            raise :class:`HeaderFaultError`, no retry
content block                 raise :class:`ContentBlockedError`, undo a size misreading
transient / first ambiguous   plain retry after a back-off (``Sleep``), nothing changed
not recoverable               raise :class:`UnrecoverableFailure`
size limit / overflow         learn the cap, floor diagnosis, one ladder step per attempt
                              (never a request known to fail), then retry
============================  ===========================================================

A request known to fail — as large as a size the gateway rejected, or identical (recall keys
aside) to a refused body — is never sent: the next ladder level follows at once, and when the
ladder is spent the floor diagnosis or :class:`RecoveryExhausted` is raised instead.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ctxrecover.cancel import CancelToken
from ctxrecover.errors import (
    ContentBlockedError,
    ContentRefusedError,
    PayloadFloorError,
    PolicyBlockedError,
    RecoveryExhausted,
    UnrecoverableFailure,
)
from ctxrecover.events import PostCompact, PreCompact
from ctxrecover.failure import Failure, FailureKind
from ctxrecover.messages import Message
from ctxrecover.passes.truncate import leading_system_count
from ctxrecover.recovery import (
    BLOCK_BUDGET_CODE,
    BLOCK_BUDGET_SIZE_NOTICE,
    CONTENT_BLOCK_CODE,
    CONTENT_REFUSED_CODE,
    CONTENT_REFUSED_NOTICE,
    HEADER_FAULT_CODE,
    MALFORMED_HISTORY_ATTEMPTS,
    OUTPUT_LIMIT_CODE,
    OUTPUT_LIMIT_DEFAULT_NOTICE,
    OUTPUT_LIMIT_NOTICE,
    RECOVERABLE_FAILURE_CODE,
    GatewayModel,
    Judgement,
    RecoveryContext,
    RecoveryLadder,
    Verdict,
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
from ctxrecover.sizes import format_payload_size, image_tokens
from ctxrecover.transport import ChatRequest
from ctxrecover.turn.actions import Flow, Sleep
from ctxrecover.turn.answer import calibrate, input_tokens
from ctxrecover.turn.blocks import (
    BlockSearch,
    blank_refused,
    find_and_withhold,
    new_parts,
    probe_base,
    probe_route,
    raise_floor,
    size_or_content,
)
from ctxrecover.turn.conversation import Conversation
from ctxrecover.turn.request import (
    char_budget,
    history_request_bytes,
    prepare_request,
    request_body_key,
    request_bytes,
)
from ctxrecover.wire import DEFAULT_ANTHROPIC_MAX_TOKENS, WireFormat, request_size

__all__ = [
    "LEARNED_WINDOW_NOTICE",
    "OUTPUT_LIMIT_RETRIES",
    "TRANSIENT_BACKOFF_S",
    "BeforeRecovery",
    "TurnAttempts",
    "adopt_gateway",
    "content_refused_error",
    "answer_rejection",
    "refuse_known_failure",
]

TRANSIENT_BACKOFF_S = (1.0, 4.0)
OUTPUT_LIMIT_RETRIES = 3  # times one turn may lower max_tokens after "max_tokens is too large"
# Decision beyond the reference: an overflow error that states the real window tightens the session's
# window (like a learned payload cap), so the next turns compact before the provider rejects them.
KEPT_IMAGES_SHARE = 0.5  # of the history's token room, at most, for the images a recovery keeps inline
LEARNED_WINDOW_CODE = "learned_window"
LEARNED_WINDOW_NOTICE = (
    "ℹ Provider reported a context window of %d tokens — budget recomputed for this session"
)
INFERRED_WINDOW_CODE = "inferred_window"
INFERRED_WINDOW_NOTICE = (
    "ℹ Provider refused a request of about %d tokens as too long without stating its context window — "
    "budget recomputed below it for this session"
)


@dataclass(frozen=True, slots=True)
class BeforeRecovery:
    """The conversation before a turn's first size-limit recovery, to undo it if it was for nothing."""

    history: list[Message]
    gateway: GatewayModel
    tool_result_budget_chars: int
    tool_result_max_chars: int


@dataclass(slots=True)
class TurnAttempts:
    """What one turn tracks across its requests: the ``max_tokens`` it sends, the plain retries
    left, the recovery attempts spent, and what a size misreading would have to undo."""

    max_tokens: int | None
    transient_left: int
    attempts: int = 0
    malformed_retried: int = 0
    output_lowerings: int = 0
    before_recovery: BeforeRecovery | None = None
    size_signatures: set[str] = field(default_factory=set)
    blocked: int = 0
    route_open: bool = False  # an experiment of this turn passed: the route is not what refuses

    def accepted(self) -> bool:
        """The gateway accepted a request: what the turn risked undoing is settled. True when
        recovery attempts had been spent (the turn recovered)."""
        recovered = self.attempts > 0
        self.attempts = 0
        self.before_recovery, self.size_signatures = None, set()
        return recovered


def _sent_size(exc: BaseException) -> int | None:
    size = getattr(exc, "request_bytes", None)
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def answer_rejection(
    conv: Conversation, turn: TurnAttempts, exc: Exception, request: ChatRequest, cancel: CancelToken | None
) -> Flow[ChatRequest]:
    """The request to send after ``request`` was rejected with ``exc``, or raise (module docstring)."""
    size = _sent_size(exc)
    history_chars = conv.passes.weight(conv.history)
    failure = conv.classify(
        exc,
        request_bytes=size,
        history_chars=history_chars,
        large_history_chars=conv.policy.suspected_payload_history_chars,
    )
    conv.stats.rejected_requests += 1
    if failure.kind is FailureKind.MALFORMED_HISTORY:
        return (yield from _repair_and_retry(conv, turn, failure, request, exc, cancel))
    if failure.kind is FailureKind.OUTPUT_LIMIT:
        return _lower_max_tokens(conv, turn, failure, request, exc)
    if failure.kind is FailureKind.CONTENT_REFUSED:
        raise content_refused_error(conv, failure) from exc
    before = conv.gateway
    judged = before.judge(failure, request_bytes=size, policy=conv.policy, body=response_text(exc))
    failure = judged.failure
    if judged.verdict is Verdict.HEADER_FAULT:
        conv.gateway = judged.model
        fault = header_fault_error(getattr(exc, "header_bytes", None), request_bytes(conv, request), failure)
        conv.events.notice(HEADER_FAULT_CODE, str(fault))
        raise fault from exc
    if failure.kind is FailureKind.WAF_REJECTION and judged.verdict in (Verdict.BLOCK, Verdict.CONTENT_BLOCK):
        settled = yield from _settle_block(conv, turn, judged, request, cancel)
        if settled is not None:
            return settled
        # the experiments read it as size: the evidence they gathered, and this rejection, teach the cap
        before = conv.gateway
        learned = before.size_rejected(judged.signature, request_bytes(conv, request), policy=conv.policy)
        judged = dataclasses.replace(judged, verdict=Verdict.SIZE_LIMIT, model=learned)
    if judged.verdict is Verdict.CONTENT_BLOCK:
        raise _content_block(conv, turn, judged, request) from exc
    if judged.verdict is Verdict.RETRY or failure.kind is FailureKind.TRANSIENT_NETWORK:
        conv.gateway = judged.model
        if turn.transient_left > 0:
            yield Sleep(TRANSIENT_BACKOFF_S[min(conv.transient_retries - turn.transient_left, 1)])
            turn.transient_left -= 1
            return request  # a plain retry: nothing about the request was wrong
    if not failure.recoverable:
        raise UnrecoverableFailure(
            f"{failure.kind}: {failure.evidence or failure.kind}", failure=failure, attempts=turn.attempts
        ) from exc

    announced = False
    if judged.verdict is Verdict.SIZE_LIMIT:
        if failure.notice:  # SPEC §6's order: the retry notice, then what the rejection teaches
            conv.events.notice(RECOVERABLE_FAILURE_CODE, failure.notice)
            announced = True
        if turn.before_recovery is None:
            turn.before_recovery = BeforeRecovery(
                list(conv.history), before, conv.tool_result_budget_chars, conv.tool_result_max_chars
            )
        turn.size_signatures.add(judged.signature)
        adopt_gateway(conv, judged.model)
        error = _floor_error(conv, turn, failure, request.max_tokens, warn=True)
        if error is not None:
            yield from _ask_route(conv, turn, judged, request)
            raise error from exc
    conv.gateway = conv.gateway.refuse(
        request_body_key(conv, request), request_bytes(conv, request), judged.verdict
    )

    retry = request
    fill = judged.verdict is Verdict.SIZE_LIMIT and failure.is_payload  # SPEC §12: the retry fills the cap
    while turn.attempts < conv.policy.max_recovery_attempts:
        turn.attempts += 1
        if not announced and failure.notice:
            conv.events.notice(RECOVERABLE_FAILURE_CODE, failure.notice)
        if not announced and failure.kind is FailureKind.CONTEXT_OVERFLOW:
            _learn_window(conv, failure, request)  # SPEC §6's order: the retry notice, then what it teaches
        announced = True  # one notice per rejected request, however many levels it takes to retry
        _recover(conv, failure, turn.attempts, max_tokens=turn.max_tokens, fill=fill)
        retry = yield from prepare_request(conv, turn.max_tokens, cancel, fill=fill)
        if _known_failure(conv, retry) is None:
            return retry
    # Compaction did all it could: when its smallest request is still as large as a rejected one,
    # the floor diagnosis says so (whatever the cap strategy: the evidence is the same).
    retry_size = request_bytes(conv, retry)
    gateway = conv.gateway
    limit = gateway.hard_limit or gateway.smallest_rejected or failure.rejected_bytes
    floor_reached = limit is not None and retry_size >= limit
    if judged.verdict is Verdict.SIZE_LIMIT and retry is not request and floor_reached:
        error = _floor_error(conv, turn, failure, retry.max_tokens, smallest=retry_size)
        if error is not None:
            yield from _ask_route(conv, turn, judged, request)
            raise error from exc
    yield from _ask_route(conv, turn, judged, request)
    raise RecoveryExhausted(
        f"recovery exhausted after {turn.attempts} attempt(s): {failure.reason_text or failure.kind}",
        failure=failure,
        attempts=turn.attempts,
    ) from exc


def refuse_known_failure(conv: Conversation, turn: TurnAttempts, request: ChatRequest) -> None:
    """Raise before sending a turn's first request when it is known to fail."""
    known = _known_failure(conv, request)
    if known is None:
        return
    size, why = known
    if why == Verdict.CONTENT_BLOCK:
        raise _content_block_error(conv, turn, size, None)
    if why == Verdict.SIZE_LIMIT and _worth_sending(conv, request):
        return
    if why == Verdict.SIZE_LIMIT:
        error = _floor_error(conv, turn, None, request.max_tokens, smallest=size)
        if error is not None:
            raise error
    raise RecoveryExhausted(
        f"not sent: the request is identical (recall keys aside) to one the provider refused ({why})"
    )


def content_refused_error(conv: Conversation, failure: Failure) -> ContentRefusedError:
    """The provider refused the content itself (SPEC §12): said once, raised with its reason."""
    message = CONTENT_REFUSED_NOTICE % failure.evidence
    conv.events.notice(CONTENT_REFUSED_CODE, message)
    return ContentRefusedError(message, reason=failure.stop_reason or failure.evidence, failure=failure)


def adopt_gateway(conv: Conversation, model: GatewayModel, *, accepted: bool = False) -> None:
    """Adopt ``model``; say so when the learned cap was set or moved (SPEC §6.1)."""
    notice = cap_notice(conv.gateway, model, accepted=accepted)
    conv.gateway = model
    if notice is not None:
        conv.events.emit(notice)


# -- the branches -------------------------------------------------------------------------------------


def _settle_block(
    conv: Conversation,
    turn: TurnAttempts,
    judged: Judgement,
    request: ChatRequest,
    cancel: CancelToken | None,
) -> Flow[ChatRequest | None]:
    """A block page (SPEC §12, :mod:`ctxrecover.turn.blocks`): the next request, with what the gateway
    refused withheld, or None when the experiments read the block as a size limit (recovered the usual
    way, the cap learned from it)."""
    failure = judged.failure
    size = request_bytes(conv, request)
    turn.blocked += 1
    conv.stats.content_blocks += 1
    if turn.blocked > conv.policy.max_blocked_requests:
        # the page the budget could not prevent (a retry refused again): nothing more is sent this turn
        message = BLOCK_BUDGET_SIZE_NOTICE % (
            turn.blocked,
            conv.policy.max_blocked_requests,
            format_payload_size(size),
        )
        conv.events.notice(BLOCK_BUDGET_CODE, message)
        raise RecoveryExhausted(message, failure=failure, attempts=turn.attempts)
    search = BlockSearch.start(
        conv, failure, size, turn.blocked, judged.signature, route_open=turn.route_open
    )
    accepted = conv.gateway.accepted_requests
    try:
        first = accepted == 0
        base_over = first and _base_over(conv, request, size)
        yield from probe_route(search)  # the cheapest question first: is it the route itself (policy)?
        if first and not base_over:
            floor = yield from probe_base(search)
            if floor is not None:  # refused with the base, and as large without it: a size limit under it
                conv.gateway = conv.gateway.size_rejected(judged.signature, floor, policy=conv.policy)
                conv.gateway = conv.gateway.read_block(judged.signature, "size")
                return None
        if size <= conv.gateway.largest_accepted:
            return (yield from find_and_withhold(search, request))  # not size: the content
        if conv.gateway.reading(judged.signature) == "size" and judged.signature not in turn.size_signatures:
            return None  # this page was a size limit before this turn: the size way, no experiment more
        if (yield from blank_refused(search, size)):
            conv.gateway = conv.gateway.read_block(judged.signature, "size")
            return None  # blanks as large, with nothing of the conversation, refused too: size
        new = new_parts(conv, request)
        if base_over and (not new or (yield from size_or_content(search, request, new))):
            yield from raise_floor(search)  # not size, and nothing new to blame: the base itself
        # content: on a first request (or one no compaction shrinks) the base passed, so it is in the
        # conversation's parts; later, anywhere — the new parts are searched first
        return (yield from find_and_withhold(search, request, scope=new if first else None))
    except PolicyBlockedError:
        # the route refused even nothing: no cap from it, and the bodies it refused may be sent again later
        _undo_size_reading(conv, turn, judged.signature, refusals=True)
        raise
    finally:
        turn.blocked = search.blocked
        turn.route_open = search.route_open or conv.gateway.accepted_requests > accepted


def _ask_route(conv: Conversation, turn: TurnAttempts, judged: Judgement, request: ChatRequest) -> Flow[None]:
    """A block page read as size is about to end the turn (the floor, or the ladder spent) and no request
    of the turn passed: a one-word request first asks whether the route itself is refused — then it is
    policy, not size (SPEC §12), and the size reading is undone (no cap kept, nothing compacted for it)."""
    if judged.failure.kind is not FailureKind.WAF_REJECTION or turn.route_open:
        return
    if conv.policy.max_recovery_attempts == 0:
        return  # recovery is off: the turn ends on the size reading, with no request more
    search = BlockSearch.start(
        conv, judged.failure, request_bytes(conv, request), turn.blocked, judged.signature, route_open=False
    )
    try:
        yield from probe_route(search)
    except PolicyBlockedError:
        _undo_size_reading(conv, turn, judged.signature, refusals=True)
        raise
    finally:
        turn.blocked = search.blocked


def _base_over(conv: Conversation, request: ChatRequest, size: int) -> bool:
    """True when the least any compaction leaves of the request (the base and the newest message at
    its floor) is as large as the refused request: a one-word probe with the base could tell nothing
    a size reading would not; only the content reading is tested, then the floor diagnosis speaks."""
    least = least_history(conv.history, conv.policy)
    return history_request_bytes(conv, least, request.max_tokens) >= size


def _repair_and_retry(
    conv: Conversation,
    turn: TurnAttempts,
    failure: Failure,
    request: ChatRequest,
    exc: Exception,
    cancel: CancelToken | None,
) -> Flow[ChatRequest]:
    """Malformed history: pairing repair and one retry, never truncation. The outgoing copy is
    repaired before every send, so a retry only happens when the repair changes the request."""
    with conv.archive.attributed("pairing"):
        conv.history, _ = repair_malformed(conv.history, conv.archive)
    retry = yield from prepare_request(conv, turn.max_tokens, cancel)
    if turn.malformed_retried < MALFORMED_HISTORY_ATTEMPTS and retry.messages != request.messages:
        turn.malformed_retried += 1
        return retry
    raise UnrecoverableFailure(
        f"malformed history the provider rejects: {failure.evidence}", failure=failure
    ) from exc


def _lower_max_tokens(
    conv: Conversation, turn: TurnAttempts, failure: Failure, request: ChatRequest, exc: Exception
) -> ChatRequest:
    """A 400 saying max_tokens is too large: retry with the limit it states (else half), never
    compact; the lower value holds for the rest of the session (SPEC §11)."""
    current = request.max_tokens
    if current is None and conv.wire_format is WireFormat.ANTHROPIC:
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
    conv.escalation.learn_output_cap(lowered)
    notice = (
        OUTPUT_LIMIT_DEFAULT_NOTICE % lowered if current is None else OUTPUT_LIMIT_NOTICE % (current, lowered)
    )
    conv.events.notice(OUTPUT_LIMIT_CODE, notice)
    turn.max_tokens = lowered
    return dataclasses.replace(request, max_tokens=lowered)


def _content_block(
    conv: Conversation, turn: TurnAttempts, judged: Judgement, request: ChatRequest
) -> ContentBlockedError:
    """A refusal at or below an accepted size: no cap, no compaction, a notice and a typed error.

    When this turn already took a rejection with the same signature for a size
    limit, that was the same rule firing on content: its evidence and the
    compaction done for it are undone.
    """
    conv.gateway = judged.model
    _undo_size_reading(conv, turn, judged.signature)
    size = request_bytes(conv, request)
    conv.gateway = conv.gateway.refuse(request_body_key(conv, request), size, Verdict.CONTENT_BLOCK)
    return _content_block_error(conv, turn, judged.failure.rejected_bytes or size, judged.failure)


def _content_block_error(
    conv: Conversation, turn: TurnAttempts, size: int, failure: Failure | None
) -> ContentBlockedError:
    error = content_block_error(
        conv.history,
        conv.wire_format,
        request_bytes=size,
        largest_accepted=conv.gateway.largest_accepted,
        failure=failure,
        attempts=turn.attempts,
    )
    conv.events.notice(CONTENT_BLOCK_CODE, str(error))
    return error


def _recover(
    conv: Conversation,
    failure: Failure,
    attempt: int,
    *,
    ladder: RecoveryLadder | None = None,
    max_tokens: int | None = None,
    fill: bool = False,
) -> None:
    """One recovery rewrite (SPEC §6 steps 3–7): memory flush and undo snapshot, ``PreCompact``,
    the ladder step (``ladder``'s, else the conversation's), once the payload notice,
    ``PostCompact``. ``fill``: the rewrite of a size rejection under a cap, which cuts only
    down to the budget that fills the cap (SPEC §12)."""
    fill_chars = (
        char_budget(conv, max_tokens=max_tokens, fill=True) if fill and conv.gateway.effective_cap else None
    )
    ctx = RecoveryContext(
        policy=conv.policy,
        archive=conv.archive,
        failure=failure,
        tool_result_budget_chars=conv.tool_result_budget_chars,
        tool_result_max_chars=conv.tool_result_max_chars,
        facts=conv.passes.facts(conv.history),  # what the session knows: no step scans it again
        fill_chars=fill_chars,
    )
    payload_notice = failure.is_payload and not conv.gateway.payload_notice_sent
    conv.compactor.prepare_rewrite(conv.history)
    conv.events.emit(PreCompact("recovery"))
    with conv.archive.attributed("recovery"):
        result = recover(
            conv.history,
            failure,
            attempt,
            ladder=ladder or conv.ladder,
            ctx=ctx,
            payload_notice=payload_notice,
            keep_images=_kept_images_fit(conv, failure, max_tokens),
        )
    if payload_notice:
        conv.gateway = conv.gateway.replace(payload_notice_sent=True)
    conv.stats.recovery_attempts += 1
    if result.changed:
        conv.stats.compactions += 1  # a recovery rewrite is a compaction (trigger "recovery")
        conv.compactor.record_rewrite(result.history)
    else:
        conv.compactor.discard_snapshot()
    conv.events.emit(PostCompact("recovery", "applied" if result.changed else "skipped"))
    conv.history = result.history
    conv.tool_result_budget_chars = result.tool_result_budget_chars
    conv.tool_result_max_chars = result.tool_result_max_chars


def _kept_images_fit(conv: Conversation, failure: Failure, max_tokens: int | None) -> bool:
    """False when a context overflow's recovery would keep messages whose images cost more than half
    the tokens the window leaves the history (its budget, the answer's reservation taken out): they
    are archived too (recallable), or the retry overflows again beside the text it must keep."""
    if failure.kind is not FailureKind.CONTEXT_OVERFLOW:
        return True
    keep = conv.policy.nuclear_keep_messages
    kept = conv.history[-keep:] if keep else []
    tokens = sum(image_tokens(m, conv.wire_format.value, conv.model) for m in kept)
    room = char_budget(conv, max_tokens=max_tokens) / conv.chars_per_token
    return tokens <= room * KEPT_IMAGES_SHARE


def _learn_window(conv: Conversation, failure: Failure, request: ChatRequest) -> None:
    """What a context overflow of ``request`` teaches about the window. The provider's count of the
    refused request, when stated, calibrates chars per token at once (token-dense text, images counted
    otherwise); the window it states is adopted. With no number, the window lies between the largest
    prompt the provider accepted and the refused request's estimate — the same evidence §11 uses for
    the body cap, and the same rule (SPEC §6.1): ¾ of the refused, never below what was accepted."""
    if failure.input_tokens:
        calibrate(conv, request, failure.input_tokens, weight=1.0, clamp=False)
    limit = failure.context_limit_tokens
    if limit:
        if limit < conv.context_window:
            conv.context_window = limit
            conv.events.notice(LEARNED_WINDOW_CODE, LEARNED_WINDOW_NOTICE % limit)
        return
    estimate = input_tokens(conv, request)
    window = max(conv.accepted_prompt_tokens, estimate * 3 // 4)
    if 0 < window < conv.context_window:
        conv.context_window = window
        conv.events.notice(INFERRED_WINDOW_CODE, INFERRED_WINDOW_NOTICE % estimate)


# -- what is known to fail ------------------------------------------------------------------------------


def _worth_sending(conv: Conversation, request: ChatRequest) -> bool:
    """True when a turn's first request is known to fail only by the gateway model's resolution:
    smaller than every size-consistent rejection (SPEC §11 never resends at or above one), within a
    hair of the smallest, and no body already refused. It is sent rather than the turn failed on a
    floor that may not be over the limit: a growing conversation crosses a limit by a few bytes, so
    its first rejection sits just above it. Refused, it becomes the smallest rejection and the floor
    diagnosis speaks (within the turn, the ladder never sends such a retry)."""
    gateway = conv.gateway
    size = request_bytes(conv, request)
    rejected = gateway.smallest_rejected
    if rejected is None or size >= rejected:
        return False
    return gateway.refusal(size, lambda: request_body_key(conv, request)) is None


def _known_failure(conv: Conversation, request: ChatRequest) -> tuple[int, str] | None:
    """(size, why) when ``request`` is known to fail — too large, or a refused body — else None."""
    size = request_bytes(conv, request)
    refused = conv.gateway.refusal(size, lambda: request_body_key(conv, request))
    if refused is not None:
        return size, refused.verdict
    if conv.gateway.known_too_large(size):
        return size, Verdict.SIZE_LIMIT.value
    return None


def _floor_error(
    conv: Conversation,
    turn: TurnAttempts,
    failure: Failure | None,
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
    rejected = conv.gateway.smallest_rejected or (failure.rejected_bytes if failure else None)
    if not rejected:
        return None
    system = conv.history[: leading_system_count(conv.history)]
    alone = request_size(system, conv.wire_format, model=conv.model, max_tokens=max_tokens)
    with_tools = history_request_bytes(conv, system, max_tokens)
    error, warning = floor_error(
        system_bytes=alone,
        tools_bytes=with_tools - alone,
        rejected_bytes=rejected,
        limit_bytes=conv.gateway.hard_limit,
        smallest=smallest
        if smallest is not None
        else lambda: history_request_bytes(conv, least_history(conv.history, conv.policy), max_tokens),
        policy=conv.policy,
        failure=failure,
        attempts=turn.attempts,
    )
    if error is None:
        if warn and warning is not None:
            conv.events.emit(warning)
        return None
    if turn.before_recovery is not None:
        _restore(conv, turn.before_recovery)
    return error


def _undo_size_reading(
    conv: Conversation, turn: TurnAttempts, signature: str, *, refusals: bool = False
) -> None:
    """This turn read a rejection of ``signature`` as a size limit, and the same rule now shows it was
    not (content or policy): its cap evidence and the compaction done for it are undone (with
    ``refusals``, the bodies refused since then are forgotten too)."""
    before = turn.before_recovery
    if before is not None and signature in turn.size_signatures:
        conv.gateway = conv.gateway.retract_to(before.gateway, refusals=refusals)
        _restore(conv, before)
        turn.before_recovery, turn.size_signatures = None, set()


def _restore(conv: Conversation, before: BeforeRecovery) -> None:
    conv.history = list(before.history)
    conv.tool_result_budget_chars = before.tool_result_budget_chars
    conv.tool_result_max_chars = before.tool_result_max_chars
