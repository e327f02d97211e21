"""``AsyncSession``: the asyncio driver of the turn engine (:func:`ctxrecover.turn.turn_flow`).

It carries out the very actions ``Session`` does — the same flow, the same decisions — by
awaiting them: the sender's ``send`` (an ``AsyncSender``'s coroutine, or a blocking sender's in
a worker thread), ``asyncio.sleep`` and the summarizer (its ``asummarize`` coroutine when it has
one, else ``summarize`` in a worker thread). A step of the flow that may take long — any step
while the history weighs more than ``thread_above_chars``, where a compaction costs
milliseconds per megabyte — runs in a worker thread, so the event loop stays responsive; its
events are held and delivered on the loop's thread, in order.

Cancelling the task leaves the conversation exactly as it was before the turn: the flow is
closed, a step still running in its thread is told to stop (the turn's cancel token) and
waited for, then the conversation rolls back (history, gateway model, limits, escalation,
undo stack; the archive's pins follow the history).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any, TypeVar, assert_never, cast

from ctxrecover.compaction import CompactionReport
from ctxrecover.messages import Message
from ctxrecover.session.base import SessionBase
from ctxrecover.summarize import CancelToken, SummarizeCall
from ctxrecover.transport import AsyncSender, Sender
from ctxrecover.turn import Action, Flow, Send, Sleep, manual_compaction_flow, turn_flow

__all__ = ["THREAD_ABOVE_CHARS", "AsyncSession"]

_T = TypeVar("_T")

#: History weight (chars) above which the async driver advances the flow in a worker thread.
THREAD_ABOVE_CHARS = 256_000


class _Returned:
    """What advancing a flow gave when it returned instead of yielding an action."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class AsyncSession(SessionBase):
    """One conversation with a provider, recovering as :class:`~ctxrecover.session.Session` does, for
    asyncio programs: ``reply = await session.complete()``.

    ``sender`` is an ``AsyncSender`` (``AsyncHttpxSender``, the async SDK senders) — or a
    blocking :class:`~ctxrecover.transport.Sender`, whose sends then run in a worker thread.
    ``sleep`` is awaited between plain retries; ``thread_above_chars`` is the history weight
    past which turn steps leave the event loop (see the module docstring). The other
    arguments are :class:`~ctxrecover.session.base.SessionBase`'s.
    """

    def __init__(
        self,
        sender: AsyncSender | Sender,
        *,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        thread_above_chars: int = THREAD_ABOVE_CHARS,
        **options: Any,
    ) -> None:
        super().__init__(sender, **options)
        self._sleep = sleep
        self.thread_above_chars = thread_above_chars
        self._async_send = inspect.iscoroutinefunction(getattr(sender, "send", None))

    async def complete(self, *, max_tokens: int | None = None, cancel: CancelToken | None = None) -> Message:
        """Run one turn and return the assistant's message (appended to the history).

        Raises what :meth:`Session.complete <ctxrecover.session.Session.complete>` raises;
        cancelling the awaiting task rolls the conversation back to before the turn.
        """
        token = CancelToken(parent=cancel)
        wanted = max_tokens if max_tokens is not None else self.max_tokens
        return await self._drive(turn_flow(self.conversation, max_tokens=wanted, cancel=token), token)

    async def compact(
        self, instruction: str | None = None, *, cancel: CancelToken | None = None
    ) -> CompactionReport:
        """``/compact [instruction]`` (see :meth:`Session.compact <ctxrecover.session.Session.compact>`)."""
        token = CancelToken(parent=cancel)
        return await self._drive(manual_compaction_flow(self.conversation, instruction, cancel=token), token)

    async def _drive(self, flow: Flow[_T], token: CancelToken) -> _T:
        """Carry out ``flow``'s actions until it returns; a cancelled task rolls the conversation back."""
        checkpoint = self.conversation.checkpoint()
        try:
            result = await self._run(flow, token)
        except (asyncio.CancelledError, KeyboardInterrupt, GeneratorExit):
            token.cancel()
            flow.close()
            self.conversation.rollback(checkpoint)
            raise
        except BaseException:
            self.conversation.commit()  # a typed error: what the turn did (compaction, evidence) stays
            raise
        self.conversation.commit()
        return result

    async def _run(self, flow: Flow[_T], token: CancelToken) -> _T:
        reply: Any = None
        error: Exception | None = None
        while True:
            step = await self._advance(flow, reply, error, token)
            if isinstance(step, _Returned):
                return step.value  # type: ignore[no-any-return]
            reply, error = None, None
            try:
                reply = await self._perform(step, token)
            except Exception as exc:  # the flow decides what a failed action means
                error = exc

    async def _advance(
        self, flow: Flow[_T], reply: Any, error: Exception | None, token: CancelToken
    ) -> Action | _Returned:
        """The flow's next action (or its result), computed in a worker thread when the step may be long."""

        def advance() -> Action | _Returned:
            try:
                return flow.send(reply) if error is None else flow.throw(error)
            except StopIteration as done:
                return _Returned(done.value)

        if self.conversation.passes.weight(self.conversation.history) <= self.thread_above_chars:
            return advance()
        with self.events.held():
            work = asyncio.get_running_loop().run_in_executor(None, advance)
            try:
                return await asyncio.shield(work)
            except asyncio.CancelledError:
                token.cancel()  # compaction stops at its next check; the step must end before a rollback
                while not work.done():
                    with suppress(asyncio.CancelledError):
                        await asyncio.wait({work})
                raise

    async def _perform(self, action: Action, token: CancelToken) -> Any:
        if isinstance(action, Send):
            if self._async_send:
                return await cast(AsyncSender, self.sender).send(action.request)
            return await asyncio.to_thread(cast(Sender, self.sender).send, action.request)
        if isinstance(action, Sleep):
            return await self._sleep(action.seconds)
        if isinstance(action, SummarizeCall):
            asummarize = getattr(action.summarizer, "asummarize", None)
            if asummarize is not None:
                return await asummarize(
                    action.prompt,
                    instruction=action.instruction,
                    timeout=action.timeout,
                    cancel=action.cancel,
                )
            return await asyncio.to_thread(action)
        assert_never(action)
