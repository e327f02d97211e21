"""The incremental index of a history: what changed since the last look, and where each message sits.

A turn's passes cost what changed, not the whole history (DESIGN: "A turn costs
O(what changed)"). :class:`HistoryIndex` keeps the history as last seen; its
:meth:`~HistoryIndex.sync` finds how a new list differs
(:func:`~ctxrecover.archive.live.list_delta`: an appended tail, a few replaced
messages, or a rewritten tail from some position on) and tells each listener —
one per pass, the running weights, the wire size — about exactly those
positions, in three kinds of event: positions cut off the end
(``truncated``), one message replaced by another of the same layout (same
role, tool calls, call id and name: ``replaced``), one message appended
(``appended``). A replacement that changes the layout is a rewrite from there.

It also keeps the *segments* of the history: segment ``j`` runs from the
``j``-th assistant message to the next one (segment 0 is what comes before the
first). A message's age (SPEC §3.3: the assistant messages after it) is the
number of assistants minus its segment; the tool results of one "turn" (§3.2)
and the block an assistant owns (§3.1) are those of its segment.

:class:`SizedHistory` is the smallest use: the running weight and the exact
wire size of whatever list it is shown last.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ctxrecover.archive.live import list_delta
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message
from ctxrecover.sizes import WeightTotals
from ctxrecover.wire.formats import WireFormat
from ctxrecover.wire.size import WireSizeTracker

__all__ = ["HistoryIndex", "HistoryListener", "PositionWatch", "SizedHistory", "TurnState", "same_layout"]

_L = TypeVar("_L", bound="HistoryListener")


class HistoryListener(Protocol):
    """Told by a :class:`HistoryIndex` about each change of its history, position by position."""

    def truncated(self, index: HistoryIndex, length: int) -> None:
        """Positions ``length`` and on are about to go (``index`` still holds them)."""

    def replaced(self, index: HistoryIndex, position: int, old: Message) -> None:
        """``index.messages[position]`` replaced ``old`` (same layout: segments unchanged)."""

    def appended(self, index: HistoryIndex, position: int) -> None:
        """``index.messages[position]`` was appended."""


class PositionWatch:
    """A :class:`HistoryListener` keeping the positions of the messages ``wanted`` accepts, as they change."""

    def __init__(self, wanted: Callable[[Message], bool]) -> None:
        self.wanted = wanted
        self.positions: set[int] = set()

    def truncated(self, index: HistoryIndex, length: int) -> None:
        self.positions = {p for p in self.positions if p < length}

    def replaced(self, index: HistoryIndex, position: int, old: Message) -> None:
        self.appended(index, position)

    def appended(self, index: HistoryIndex, position: int) -> None:
        if self.wanted(index.messages[position]):
            self.positions.add(position)
        else:
            self.positions.discard(position)


def same_layout(old: Message, new: Message) -> bool:
    """True when ``new`` can take ``old``'s place without moving a segment or a wire turn."""
    return (
        old.role == new.role
        and old.tool_calls == new.tool_calls
        and old.tool_call_id == new.tool_call_id
        and old.name == new.name
    )


class HistoryIndex:
    """A history as last seen, its segments and leading system count, and the listeners kept in step.

    ``messages`` is the index's own copy; ``segment_of[i]`` counts the assistant
    messages at or before position ``i``; ``assistants`` lists their positions;
    ``leading`` is the length of the leading run of system messages; ``changes``
    counts the truncations, replacements and appends so far.
    """

    def __init__(self) -> None:
        self.version = 0  # bumped by each step (see TurnState)
        self.changes = 0  # bumped by each change of the indexed history (what a snapshot of it checks)
        self.messages: list[Message] = []
        self.segment_of: list[int] = []
        self.assistants: list[int] = []
        self.leading = 0
        self._listeners: dict[str, tuple[Any, HistoryListener]] = {}

    # -- queries ------------------------------------------------------------------------------
    def age(self, position: int) -> int:
        """Assistant messages after ``position`` (SPEC §3.3)."""
        return len(self.assistants) - self.segment_of[position]

    def segment_span(self, segment: int) -> range:
        """Positions of segment ``segment`` (empty when it no longer exists)."""
        assistants = self.assistants
        if segment > len(assistants):
            return range(0)
        start = assistants[segment - 1] if segment else 0
        end = assistants[segment] if segment < len(assistants) else len(self.messages)
        return range(start, end)

    def listener(self, name: str, key: Any, build: Callable[[], _L]) -> _L:
        """The listener ``name`` for parameters ``key``; (re)built and shown every message when absent
        or made for other parameters (one O(history) pass, then O(what changed) again)."""
        found = self._listeners.get(name)
        if found is not None and found[0] == key:
            return found[1]  # type: ignore[return-value]
        listener = build()
        for position in range(len(self.messages)):
            listener.appended(self, position)
        self._listeners[name] = (key, listener)
        return listener

    # -- changes ----------------------------------------------------------------------------------
    def sync(self, history: Sequence[Message]) -> None:
        """Make ``history`` the indexed history, telling the listeners what changed."""
        delta = list_delta(self.messages, history)
        kept, in_place = delta.kept, []
        for position in delta.replaced:
            if not same_layout(self.messages[position], history[position]):
                kept = position
                break
            in_place.append(position)
        self.truncate(kept)
        for position in in_place:
            self.replace(position, history[position])
        for position in range(len(self.messages), len(history)):
            self.append(history[position])
        if not delta.identical:
            self.messages = list(history)  # hold the very objects shown (equal ones count as unchanged)

    def truncate(self, length: int) -> None:
        """Forget positions ``length`` and on."""
        if length >= len(self.messages):
            return
        self.changes += 1
        for _, listener in self._listeners.values():
            listener.truncated(self, length)
        del self.messages[length:]
        del self.segment_of[length:]
        while self.assistants and self.assistants[-1] >= length:
            self.assistants.pop()
        self.leading = min(self.leading, length)

    def replace(self, position: int, msg: Message) -> None:
        """Put ``msg`` at ``position`` (it must have the same layout as the message there)."""
        old = self.messages[position]
        if old is msg:
            return
        if not same_layout(old, msg):
            raise ConfigError(f"position {position}: a {msg.role} message cannot take a {old.role}'s place")
        self.changes += 1
        self.messages[position] = msg
        for _, listener in self._listeners.values():
            listener.replaced(self, position, old)

    def append(self, msg: Message) -> None:
        """Add ``msg`` at the end."""
        position = len(self.messages)
        self.changes += 1
        self.messages.append(msg)
        assistant = msg.role == "assistant"
        self.segment_of.append((self.segment_of[-1] if position else 0) + assistant)
        if assistant:
            self.assistants.append(position)
        if self.leading == position and msg.role == "system":
            self.leading += 1
        for _, listener in self._listeners.values():
            listener.appended(self, position)


class _Totals:
    """The listener behind :class:`SizedHistory`: running weights and the exact wire size."""

    def __init__(self, fmt: WireFormat | str, model: str) -> None:
        self.weights = WeightTotals(
            wire_format=WireFormat(fmt).value, model=model
        )  # images as it prices them
        self.tracker = WireSizeTracker(fmt, model=model)

    def truncated(self, index: HistoryIndex, length: int) -> None:
        for msg in index.messages[length:]:
            self.weights.remove(msg)
        self.tracker.truncate(length)

    def replaced(self, index: HistoryIndex, position: int, old: Message) -> None:
        msg = index.messages[position]
        self.weights.remove(old)
        self.weights.add(msg)
        if not self.tracker.replace(position, msg):  # same_layout is stricter than the tracker's test
            raise AssertionError(f"position {position}: the wire layout changed in place")

    def appended(self, index: HistoryIndex, position: int) -> None:
        msg = index.messages[position]
        self.weights.add(msg)
        self.tracker.append(msg)


TOTALS = "totals"


def totals(index: HistoryIndex, fmt: WireFormat | str, model: str) -> _Totals:
    """The running weights and wire size of ``index``'s history in ``fmt`` for ``model``."""
    return index.listener(TOTALS, (str(fmt), model), lambda: _Totals(fmt, model))


class SizedHistory:
    """The weight and exact wire size of a list that changes a little between looks.

    Each query is shown the list (:meth:`HistoryIndex.sync`: O(what changed)),
    so it may be a new list every time, e.g. each outgoing request.

    >>> sized = SizedHistory("openai-chat", model="m")
    >>> history = [Message.user("hi")]
    >>> sized.size(history) == len(b'{"model":"m","messages":[{"role":"user","content":"hi"}]}')
    True
    >>> sized.weights([*history, Message.assistant("hello")]).weight
    7
    """

    def __init__(self, fmt: WireFormat | str, *, model: str) -> None:
        self.index = HistoryIndex()
        self._totals = totals(self.index, fmt, model)

    def size(
        self,
        history: Sequence[Message],
        *,
        max_tokens: int | None = None,
        tools: Any = None,
        extra: Mapping[str, Any] | None = None,
    ) -> int:
        """``request_size(history, ...)``, from what changed since the last look."""
        self.index.sync(history)
        return self._totals.tracker.size_for(max_tokens, tools, extra)

    def weights(self, history: Sequence[Message]) -> WeightTotals:
        """The running weight, image chars and image tokens of ``history`` (read, do not modify)."""
        self.index.sync(history)
        return self._totals.weights


@dataclass(frozen=True, slots=True, eq=False)
class TurnState:
    """The incremental state of the turn-boundary passes (DESIGN: "A turn costs O(what changed)").

    A value handed to each incremental step — :func:`~ctxrecover.passes.microcompact.microcompact_step`,
    :func:`~ctxrecover.passes.dedup_reads.dedup_step`, :func:`~ctxrecover.passes.floor.age_skills_step`,
    :func:`~ctxrecover.passes.pairing.pairing_step`,
    :func:`~ctxrecover.passes.tool_budget.tool_budget_step` — which returns the same
    result as its full pass and the state's successor. The steps share one
    :class:`HistoryIndex` (each pass keeps its own listener on it: what it may
    still change, its reads by file, its segments' previews), so a state is used
    once: the one a step consumed raises :class:`~ctxrecover.errors.ConfigError`
    if given again. It is derived from the history alone: nothing needs saving
    (a fresh state indexes the whole history on its first step, then costs what
    changed). :meth:`request_size`, :meth:`weights` and :meth:`synced` (for other
    queries, e.g. :func:`~ctxrecover.passes.facts.indexed_facts`) read the current state.

    >>> state = TurnState.new("openai-chat", model="m")
    >>> state.weights([Message.user("hi")]).weight
    2
    """

    index: HistoryIndex = field(default_factory=HistoryIndex)
    version: int = 0
    wire_format: str = WireFormat.OPENAI_CHAT.value
    model: str = ""

    @classmethod
    def new(cls, wire_format: WireFormat | str = WireFormat.OPENAI_CHAT, *, model: str = "") -> TurnState:
        """An empty state; request sizes are taken in ``wire_format`` for ``model``."""
        return cls(HistoryIndex(), 0, WireFormat(wire_format).value, model)

    def begin(self, history: Sequence[Message]) -> HistoryIndex:
        """For a step: consume this state and index ``history``."""
        index = self._current()
        index.version += 1
        index.sync(history)
        return index

    def successor(self) -> TurnState:
        """The state a step returns (after :meth:`begin`)."""
        return TurnState(self.index, self.index.version, self.wire_format, self.model)

    def synced(self, history: Sequence[Message]) -> HistoryIndex:
        """The index, made to hold ``history``, for a query that reads it (the state is not consumed)."""
        index = self._current()
        index.sync(history)
        return index

    def request_size(
        self,
        history: Sequence[Message],
        *,
        max_tokens: int | None = None,
        tools: Any = None,
        extra: Mapping[str, Any] | None = None,
    ) -> int:
        """``request_size(history, ...)`` in the state's wire format, from what changed."""
        index = self.synced(history)
        return totals(index, self.wire_format, self.model).tracker.size_for(max_tokens, tools, extra)

    def weights(self, history: Sequence[Message]) -> WeightTotals:
        """Running weight, image chars and image tokens of ``history`` (read them, do not modify)."""
        return totals(self.synced(history), self.wire_format, self.model).weights

    def _current(self) -> HistoryIndex:
        if self.index.version != self.version:
            raise ConfigError(
                "this TurnState was already used by a step: pass the state the last step returned"
            )
        return self.index
