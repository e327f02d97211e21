"""What a session already knows about its history, handed as a value to whoever cuts it.

A recovery step (:mod:`ctxrecover.recovery.ladder`) reads the same few facts of the history it
is given before it cuts: whether the tool pairing is valid (SPEC §3.1: repair first), how many
content chars it holds (its report), and where its system messages are (what it keeps). A
:class:`~ctxrecover.passes.turn.TurnPasses` already knows them at the cost of what changed —
its :class:`~ctxrecover.passes.history_index.HistoryIndex` keeps pairing validity per segment
and, through :class:`_FactsIndex`, the running content chars and system count — so a session
hands them over (:meth:`TurnPasses.facts <ctxrecover.passes.turn.TurnPasses.facts>`) instead of
letting each step scan the whole history again.

:class:`HistoryFacts` is that knowledge for one list, which it names by identity and length (the
engine replaces lists or appends to them, never edits them in place); :func:`facts_for` gives the
handed facts when they describe the list at hand and computes them from scratch otherwise
(:func:`history_facts`, the reference the incremental facts are tested against), so a step that
receives a list another step rewrote still reads true facts.

>>> from ctxrecover.messages import Message
>>> history = [Message.system("rules"), Message.user("hi"), Message.assistant("hello")]
>>> facts = history_facts(history)
>>> facts.pairing_valid, facts.content_chars, facts.system_count, facts.leading_systems
(True, 12, 1, 1)
>>> facts_for(history, facts) is facts, facts_for(list(history), facts) is facts
(True, False)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter, countOf

from ctxrecover.archive.ranges import RangeParts, range_entry, range_parts
from ctxrecover.messages import Message
from ctxrecover.passes.history_index import HistoryIndex, TurnState
from ctxrecover.passes.pairing import pairing_valid, validate_pairing

__all__ = [
    "FACTS_LISTENER",
    "HistoryFacts",
    "content_chars",
    "facts_for",
    "history_facts",
    "indexed_facts",
    "leading_system_count",
    "watch_facts",
]

FACTS_LISTENER = "facts"
_CONTENT = attrgetter("content")
_ROLE = attrgetter("role")


def content_chars(history: Sequence[Message]) -> int:
    """Total ``len(content)`` of the messages (what a recovery step's report counts as chars)."""
    return sum(map(len, map(_CONTENT, history)))  # no Python frame per message


@dataclass(frozen=True, slots=True)
class HistoryFacts:
    """Facts of one history list: tool pairing valid (:func:`~ctxrecover.passes.pairing.validate_pairing`),
    content chars (:func:`content_chars`), system messages in all and in the leading run, and what
    archiving a range of it stores (:meth:`range_parts`).

    ``history`` is the list described, kept by identity (it takes no part in equality: two facts
    are equal when they say the same); :meth:`describes` tells whether a list is that one, as long.
    """

    history: Sequence[Message] = field(compare=False, repr=False)
    length: int
    pairing_valid: bool
    content_chars: int
    system_count: int
    leading_systems: int
    _indexed: _Snapshot | None = field(default=None, compare=False, repr=False)

    def describes(self, history: Sequence[Message]) -> bool:
        """True when ``history`` is the very list these facts were taken of, at the same length."""
        return history is self.history and len(history) == self.length

    def range_parts(self, start: int, stop: int) -> RangeParts:
        """The :class:`~ctxrecover.archive.RangeParts` of ``history[start:stop]``: handed from the
        session's index while it still holds this history (slices of what it keeps as messages
        enter), else gathered from the messages."""
        indexed = self._indexed
        if indexed is not None and indexed.index.changes == indexed.changes:
            return indexed.parts.range_parts(start, stop)
        return range_parts(self.history[start:stop])


def leading_system_count(history: Sequence[Message]) -> int:
    """Length of the maximal prefix of ``system`` messages (the floor)."""
    count = 0
    for msg in history:
        if msg.role != "system":
            break
        count += 1
    return count


def history_facts(history: list[Message]) -> HistoryFacts:
    """The facts of ``history`` computed from scratch (a few passes over it, in C where it can)."""
    return HistoryFacts(
        history,
        len(history),
        validate_pairing(history),
        content_chars(history),
        countOf(map(_ROLE, history), "system"),
        leading_system_count(history),
    )


def facts_for(history: list[Message], facts: HistoryFacts | None) -> HistoryFacts:
    """``facts`` when they describe ``history``, else its facts computed from scratch."""
    if facts is not None and facts.describes(history):
        return facts
    return history_facts(history)


class _FactsIndex:
    """A :class:`~ctxrecover.passes.history_index.HistoryListener`: running content chars and system count,
    and what archiving each position stores — its index block and its members, flattened in order
    (``starts[p]`` is where position ``p``'s members begin), so a range's parts are three slices."""

    def __init__(self) -> None:
        self.content_chars = 0
        self.system_count = 0
        self.blocks: list[str | None] = []
        self.members: list[tuple[str, str]] = []
        self.starts: list[int] = []

    def _count(self, message: Message, sign: int) -> None:
        self.content_chars += sign * len(message.content)
        self.system_count += sign * (message.role == "system")

    def truncated(self, index: HistoryIndex, length: int) -> None:
        gone = index.messages[length:]
        self.content_chars -= content_chars(gone)
        self.system_count -= countOf(map(_ROLE, gone), "system")
        del self.members[self.starts[length] :]
        del self.starts[length:]
        del self.blocks[length:]

    def replaced(self, index: HistoryIndex, position: int, old: Message) -> None:
        message = index.messages[position]
        self._count(old, -1)
        self._count(message, +1)
        block, members = range_entry(message)  # a fold or a stub: small, hashed once as it enters
        start = self.starts[position]
        stop = self.starts[position + 1] if position + 1 < len(self.starts) else len(self.members)
        self.members[start:stop] = members
        self.blocks[position] = block
        shift = len(members) - (stop - start)  # same layout, other images: the later members move
        if shift:
            self.starts[position + 1 :] = [first + shift for first in self.starts[position + 1 :]]

    def appended(self, index: HistoryIndex, position: int) -> None:
        message = index.messages[position]
        self._count(message, +1)
        block, members = range_entry(message)
        self.starts.append(len(self.members))
        self.members.extend(members)
        self.blocks.append(block)

    def range_parts(self, start: int, stop: int) -> RangeParts:
        first = self.starts[start] if start < len(self.starts) else len(self.members)
        last = self.starts[stop] if stop < len(self.starts) else len(self.members)
        return RangeParts(self.blocks[start:stop], self.members[first:last])


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """Where indexed facts came from: the index, its facts listener, and the index's change count then."""

    index: HistoryIndex
    parts: _FactsIndex
    changes: int


def watch_facts(state: TurnState) -> None:
    """Keep the facts on ``state``'s index from now on (O(1) on a new state; a state that indexed a
    history already shows it every message once)."""
    state.index.listener(FACTS_LISTENER, None, _FactsIndex)


def indexed_facts(state: TurnState, history: list[Message]) -> HistoryFacts:
    """The facts of ``history`` from a :class:`~ctxrecover.passes.history_index.TurnState`, at the cost
    of what changed since its last look (the state is read, not consumed; see :func:`watch_facts`)."""
    index = state.synced(history)
    counts = index.listener(FACTS_LISTENER, None, _FactsIndex)
    return HistoryFacts(
        history,
        len(history),
        pairing_valid(index),
        counts.content_chars,
        counts.system_count,
        index.leading,
        _Snapshot(index, counts, index.changes),
    )
