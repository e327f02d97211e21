"""The turn as one sans-IO generator: :func:`turn_flow`, and :func:`manual_compaction_flow` for ``/compact``.

A turn never sends, sleeps or calls a summarizer itself: it yields an action
(:mod:`ctxrecover.turn.actions`) and is sent the outcome, the way httpx's ``auth_flow`` is
written once and driven by ``sync_auth_flow`` and ``async_auth_flow``. ``Session.complete()``
and ``AsyncSession.complete()`` drive it; they differ only in how they carry actions out.

One turn, in order:

1. the request (:func:`~ctxrecover.turn.request.prepare_request`): turn-boundary passes,
   pre-flight, planned compaction to the budget and to the cap in real bytes;
2. never a request known to fail (:func:`~ctxrecover.turn.rejection.refuse_known_failure`);
3. ``Send``; a rejection is answered by :func:`~ctxrecover.turn.rejection.answer_rejection`
   (the one module that decides what a rejected request gets) with the next request, or raises;
   an exception that is not the provider's answer (a bug, a ``TypeError``) is raised as itself;
4. an accepted answer teaches the gateway model and the calibration
   (:mod:`ctxrecover.turn.answer`); an answer cut at ``max_tokens`` escalates (SPEC §8);
5. the answer joins the history and is returned.
"""

from __future__ import annotations

from ctxrecover.cancel import CancelToken
from ctxrecover.classify import content_refusal, refused
from ctxrecover.compaction import MANUAL_KEEP_RECENT, CompactionReport
from ctxrecover.messages import Message
from ctxrecover.passes.parts import archive_images
from ctxrecover.transport import ChatResponse
from ctxrecover.turn.actions import Flow, Send, is_provider_failure
from ctxrecover.turn.answer import account, continuation, input_tokens
from ctxrecover.turn.conversation import Conversation
from ctxrecover.turn.rejection import (
    TurnAttempts,
    adopt_gateway,
    answer_rejection,
    content_refused_error,
    refuse_known_failure,
)
from ctxrecover.turn.request import char_budget, prepare_request

__all__ = ["manual_compaction_flow", "turn_flow"]


def turn_flow(
    conv: Conversation, *, max_tokens: int | None, cancel: CancelToken | None = None
) -> Flow[Message]:
    """One turn of ``conv``: the assistant's message, appended to the history (see the module docstring).

    ``max_tokens`` is the user's setting for this turn (None: the provider's default). Raises
    the typed errors of :mod:`ctxrecover.errors` when the turn cannot be completed; the history
    stays intact and everything cut from it is recallable.
    """
    if not conv.env_reported:
        conv.env_reported = True
        for problem in conv.policy.env_problems:
            conv.events.notice("config", problem)
    conv.stats.turns += 1
    conv.escalation.start_turn()
    turn = TurnAttempts(conv.escalation.observe_user_override(max_tokens), conv.transient_retries)
    request = yield from prepare_request(conv, turn.max_tokens, cancel)
    refuse_known_failure(conv, turn, request)
    while True:
        conv.stats.requests += 1
        try:
            response: ChatResponse = yield Send(request)
        except Exception as exc:
            if not is_provider_failure(exc):
                raise  # a bug (ours or the caller's), never disguised as a provider's failure
            request = yield from answer_rejection(conv, turn, exc, request, cancel)
            continue
        refusal = content_refusal(response.raw)
        if refusal is not None:  # the provider itself refused the content: never an answer, never retried
            raise content_refused_error(conv, refused(refusal))
        account(conv, request, response)
        conv.unproven = {id(response.message): response.message}  # the answer was never sent
        conv.last_accepted = request.messages
        adopt_gateway(conv, conv.gateway.accepted(response.request_bytes, policy=conv.policy), accepted=True)
        if turn.accepted():
            conv.stats.recoveries += 1
        if response.truncated:
            room = conv.context_window - input_tokens(conv, request, response)
            grown = conv.escalation.next_max_tokens(turn.max_tokens, room=room)
            if grown is not None:
                conv.stats.escalations += 1
                conv.history = continuation(conv, response.message)
                turn.max_tokens = grown
                request = yield from prepare_request(conv, turn.max_tokens, cancel)
                continue
        conv.append((response.message,))
        return response.message


def manual_compaction_flow(
    conv: Conversation, instruction: str | None = None, *, cancel: CancelToken | None = None
) -> Flow[CompactionReport]:
    """``/compact [instruction]``: compact now at the manual budget ratio (0.50); with an
    instruction, a guided summary that keeps the last :data:`MANUAL_KEEP_RECENT` messages."""
    budget = char_budget(conv, conv.policy.manual_budget_ratio)
    keep = MANUAL_KEEP_RECENT if instruction else conv.keep_recent
    with conv.archive.attributed("images"):
        conv.history, _ = archive_images(
            conv.history, archive=conv.archive, keep_recent=keep, user_first=False
        )
    result = yield from conv.compactor.compact_flow(
        conv.history,
        budget_chars=budget,
        keep_recent=keep,
        trigger="manual",
        cancel=cancel,
        instruction=instruction,
    )
    conv.history = result.history
    return result.report
