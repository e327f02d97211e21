"""Every loop recovers: one-shot prompts and multi-participant panels (SPEC §6).

The agent and chat loops are a :class:`~ctxrecover.session.Session` (``mode="agent"``
or ``"chat"``). This module adds the two other shapes:

- :func:`oneshot`: one prompt, one answer; notices go to stderr so stdout stays pipeable.
- :class:`Panel`: several participants answer the same prompt, each compacting
  its own thread; one participant's failure — whatever it is — is reported for
  that participant and does not fail the panel.

:func:`aoneshot` and :class:`AsyncPanel` are the same for asyncio programs (the panel's
participants answer concurrently).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from ctxrecover.errors import ConfigError
from ctxrecover.events import StderrRenderer
from ctxrecover.messages import Message
from ctxrecover.session.async_session import AsyncSession
from ctxrecover.session.core import Session
from ctxrecover.transport import Sender

__all__ = ["AsyncPanel", "Panel", "PanelAnswer", "aoneshot", "oneshot"]


def oneshot(
    sender: Sender,
    prompt: str,
    *,
    system: str | None = None,
    stream: TextIO | None = None,
    **session_options: Any,
) -> str:
    """Answer one prompt with full recovery; notices are printed to ``stream`` (stderr).

    Extra keyword arguments go to :class:`~ctxrecover.session.Session`
    (``policy``, ``archive``, ``summarizer``, …). Raises the session's typed
    errors when the turn cannot be completed.
    """
    renderer = StderrRenderer(stream if stream is not None else sys.stderr)
    session = Session(sender, on_event=renderer, mode="chat", **session_options)
    if system:
        session.add(Message.system(system))
    session.add(Message.user(prompt))
    return session.complete().content


@dataclass(frozen=True, slots=True)
class PanelAnswer:
    """One participant's answer, or the error that ended its turn.

    ``error`` is the exception as raised: a :class:`~ctxrecover.errors.RecoveryError`
    (with its classified failure), another library error such as an
    :class:`~ctxrecover.errors.ArchiveError`, or whatever the participant's sender raised.
    """

    name: str
    message: Message | None
    error: Exception | None

    @property
    def ok(self) -> bool:
        return self.error is None


class Panel:
    """Participants (each a Session with its own thread and state) answering together.

    >>> # panel = Panel({"critic": Session(s1), "author": Session(s2)})
    >>> # answers = panel.ask("Review the plan")
    """

    def __init__(self, participants: Mapping[str, Session]) -> None:
        if not participants:
            raise ConfigError("a Panel needs at least one participant: Panel({'name': Session(sender)})")
        self.participants = dict(participants)

    def ask(self, prompt: str) -> dict[str, PanelAnswer]:
        """Give ``prompt`` to every participant; a failure stays that participant's.

        Every participant receives the prompt and gets an answer, in order, whatever
        an earlier one raised: an exception ends only its own participant's turn and
        is returned in its :class:`PanelAnswer` (interrupts such as
        ``KeyboardInterrupt`` still stop the panel).
        """
        answers: dict[str, PanelAnswer] = {}
        for name, session in self.participants.items():
            try:
                session.add(Message.user(prompt))
                answers[name] = PanelAnswer(name, session.complete(), None)
            except Exception as exc:  # noqa: BLE001 — one participant's failure never fails the panel
                answers[name] = PanelAnswer(name, None, exc)
        return answers


async def aoneshot(
    sender: Any,
    prompt: str,
    *,
    system: str | None = None,
    stream: TextIO | None = None,
    **session_options: Any,
) -> str:
    """:func:`oneshot` for asyncio programs: an :class:`~ctxrecover.session.AsyncSession` answers."""
    renderer = StderrRenderer(stream if stream is not None else sys.stderr)
    session = AsyncSession(sender, on_event=renderer, mode="chat", **session_options)
    if system:
        session.add(Message.system(system))
    session.add(Message.user(prompt))
    return (await session.complete()).content


class AsyncPanel:
    """:class:`Panel` for asyncio programs: participants (each an
    :class:`~ctxrecover.session.AsyncSession`) answer the same prompt concurrently."""

    def __init__(self, participants: Mapping[str, AsyncSession]) -> None:
        if not participants:
            raise ConfigError(
                "an AsyncPanel needs at least one participant: AsyncPanel({'name': AsyncSession(s)})"
            )
        self.participants = dict(participants)

    async def ask(self, prompt: str) -> dict[str, PanelAnswer]:
        """Give ``prompt`` to every participant at once; a failure stays that participant's.

        An exception ends only its own participant's turn and is returned in its
        :class:`PanelAnswer`; cancelling the panel's task cancels every participant's turn
        (each rolls back) and propagates.
        """

        async def answer(name: str, session: AsyncSession) -> PanelAnswer:
            try:
                session.add(Message.user(prompt))
                return PanelAnswer(name, await session.complete(), None)
            except Exception as exc:  # noqa: BLE001 — one participant's failure never fails the panel
                return PanelAnswer(name, None, exc)

        answers = await asyncio.gather(*(answer(name, s) for name, s in self.participants.items()))
        return {a.name: a for a in answers}
