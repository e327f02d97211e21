"""``Session``: the blocking driver of the turn engine (:func:`ctxrecover.turn.turn_flow`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar, assert_never

from ctxrecover.compaction import CompactionReport
from ctxrecover.messages import Message
from ctxrecover.session.base import SessionBase
from ctxrecover.summarize import CancelToken, SummarizeCall
from ctxrecover.transport import Sender
from ctxrecover.turn import Action, Flow, Send, Sleep, manual_compaction_flow, turn_flow

__all__ = ["Session"]

_T = TypeVar("_T")


class Session(SessionBase):
    """One conversation with a provider, recovering from every recoverable failure.

    ``sender`` is a :class:`~ctxrecover.transport.Sender` (:class:`~ctxrecover.transport.HttpxSender`
    or an SDK adapter); ``sleep`` waits between plain retries of a network fault. The other
    arguments are :class:`~ctxrecover.session.base.SessionBase`'s. :meth:`complete` drives one
    turn of :func:`~ctxrecover.turn.turn_flow`: it sends, sleeps and summarizes blocking, and
    decides nothing itself. A turn interrupted by ``KeyboardInterrupt`` leaves the conversation
    as it was before the turn.
    """

    def __init__(
        self, sender: Sender, *, sleep: Callable[[float], object] = time.sleep, **options: Any
    ) -> None:
        super().__init__(sender, **options)
        self._sleep = sleep

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
        one — is never sent. An exception that is not the provider's answer (a bug
        in a sender, say) is raised as itself.
        """
        wanted = max_tokens if max_tokens is not None else self.max_tokens
        return self._drive(turn_flow(self.conversation, max_tokens=wanted, cancel=cancel))

    def compact(
        self, instruction: str | None = None, *, cancel: CancelToken | None = None
    ) -> CompactionReport:
        """``/compact [instruction]``: compact now at the manual budget ratio (0.50).

        With an instruction, a guided summary that keeps the last 4 messages.
        """
        return self._drive(manual_compaction_flow(self.conversation, instruction, cancel=cancel))

    def _drive(self, flow: Flow[_T]) -> _T:
        """Carry out ``flow``'s actions until it returns; an interrupt rolls the conversation back."""
        checkpoint = self.conversation.checkpoint()
        try:
            result = self._run(flow)
        except (KeyboardInterrupt, GeneratorExit):
            flow.close()
            self.conversation.rollback(checkpoint)
            raise
        except BaseException:
            self.conversation.commit()  # a typed error: what the turn did (compaction, evidence) stays
            raise
        self.conversation.commit()
        return result

    def _run(self, flow: Flow[_T]) -> _T:
        reply: Any = None
        error: Exception | None = None
        while True:
            try:
                action = flow.send(reply) if error is None else flow.throw(error)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            reply, error = None, None
            try:
                reply = self._perform(action)
            except Exception as exc:  # the flow decides what a failed action means
                error = exc

    def _perform(self, action: Action) -> Any:
        if isinstance(action, Send):
            return self.sender.send(action.request)
        if isinstance(action, Sleep):
            return self._sleep(action.seconds)
        if isinstance(action, SummarizeCall):
            return action()
        assert_never(action)
