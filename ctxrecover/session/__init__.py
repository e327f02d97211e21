"""The sessions: one conversation each, driving the turn engine; the one-shot and panel loops.

::

    session = Session(sender, policy=Policy.from_env(), archive=DiskArchive(path),
                      summarizer=..., on_event=StderrRenderer())
    session.add(Message.user("..."))
    reply = session.complete()            # AsyncSession: reply = await session.complete()

``complete()`` runs one turn of :func:`ctxrecover.turn.turn_flow` — the turn-boundary
passes, pre-flight, planned compaction (by weight, then by real wire bytes under a
payload cap), pairing repair and the tool-result budget on the outgoing copy, the send,
classification, recovery (learned cap, floor diagnosis, the ladder, the payload notice)
or output escalation, and the retry. It returns the assistant message or raises a
:class:`~ctxrecover.errors.RecoveryError` carrying the classified failure;
``session.history`` stays intact and every character cut from it is recallable from
``session.archive``. :class:`Session` carries the turn's actions out blocking,
:class:`AsyncSession` awaiting them; they decide nothing themselves.

Everything the session learns lives in its :class:`~ctxrecover.turn.Conversation` and
persists with ``state()``: the gateway model (SPEC §11), back-off, halved tool limits,
a learned output cap, counters, the undo stack and the calibrated chars-per-token.

The archive is wrapped in a :class:`~ctxrecover.archive.SessionArchive`: whenever
the history (or the outgoing copy) changes, the keys it holds are pinned in a
bounded store, so nothing the conversation still points to is evicted. When the
store refuses a write (full of pinned entries, read-only, disk full), the turn
raises that :class:`~ctxrecover.errors.ArchiveError` *before* the cut that
needed it (cuts already archived earlier in the turn stay), so nothing is lost;
the refusal is counted (``stats.archive_refusals``) and announced (notice
``archive_refused``), and the session stays usable.
Messages enter through :meth:`Session.add` / :meth:`Session.extend` /
``history=``, which refuse text no provider accepts (a lone surrogate:
:class:`~ctxrecover.errors.UnencodableTextError` naming the message index, field
and char offset) and anything that is not a :class:`Message`.
"""

from __future__ import annotations

from ctxrecover.session.async_session import AsyncSession
from ctxrecover.session.core import Session
from ctxrecover.session.loops import AsyncPanel, Panel, PanelAnswer, aoneshot, oneshot
from ctxrecover.session.summarizer import resolve_summarizer
from ctxrecover.turn import Mode

__all__ = [
    "AsyncPanel",
    "AsyncSession",
    "Mode",
    "Panel",
    "PanelAnswer",
    "Session",
    "aoneshot",
    "oneshot",
    "resolve_summarizer",
]
