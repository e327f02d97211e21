"""Events, hooks and session counters.

The library never prints. Everything a user should see leaves as an event:
:class:`Notice` (one line with its exact SPEC text), :class:`StatusEvent`
(one per compaction phase), and the :class:`PreCompact` / :class:`PostCompact`
hooks. A renderer decides how to show them::

    session = Session(sender, on_event=StderrRenderer())

:class:`SessionStats` holds the counters and costs that persist with a session.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, TextIO

__all__ = [
    "Event",
    "EventBus",
    "Notice",
    "PostCompact",
    "PreCompact",
    "SessionStats",
    "StatusEvent",
    "StderrRenderer",
    "Trigger",
]

Trigger = Literal["auto", "manual", "recovery"]
Outcome = Literal["applied", "skipped"]


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every event; ``text`` is what a renderer shows."""

    @property
    def text(self) -> str:
        return type(self).__name__


@dataclass(frozen=True, slots=True)
class Notice(Event):
    """A user-visible line. ``code`` names it for filtering (``learned_cap``, ``preflight``, …)."""

    code: str
    message: str

    @property
    def text(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True)
class StatusEvent(Event):
    """One compaction phase (``start``, ``trim``, ``summary``, ``emergency``, ``cancelled``, …)."""

    phase: str
    message: str

    @property
    def text(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True)
class PreCompact(Event):
    """Fired before any rewrite of the history."""

    trigger: Trigger

    @property
    def text(self) -> str:
        return f"PreCompact(trigger={self.trigger})"


@dataclass(frozen=True, slots=True)
class PostCompact(Event):
    """Fired after a compaction; ``outcome`` is ``skipped`` when nothing changed."""

    trigger: Trigger
    outcome: Outcome

    @property
    def text(self) -> str:
        return f"PostCompact(trigger={self.trigger}, outcome={self.outcome})"


Listener = Callable[[Event], Any]


class EventBus:
    """Dispatch events to catch-all listeners and to listeners of one event type.

    >>> bus = EventBus()
    >>> seen = []
    >>> bus.on(PostCompact, seen.append)
    >>> bus.emit(PostCompact("auto", "applied"))
    >>> seen[0].outcome
    'applied'
    """

    def __init__(self, *listeners: Listener | None) -> None:
        self._all: list[Listener] = [fn for fn in listeners if fn is not None]
        self._typed: list[tuple[type[Event], Listener]] = []
        self._held: list[Event] | None = None

    def on(self, event_type: type[Event], listener: Listener) -> None:
        """Call ``listener`` for every event of ``event_type`` (or a subclass)."""
        self._typed.append((event_type, listener))

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` for every event."""
        self._all.append(listener)

    def emit(self, event: Event) -> None:
        if self._held is not None:
            self._held.append(event)
            return
        self._deliver(event)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold every event emitted inside the block and deliver them, in order, when it ends.

        ``AsyncSession`` runs a heavy turn step in a worker thread inside this block, so
        listeners are always called on the event loop's thread.
        """
        outer, self._held = self._held, []
        try:
            yield
        finally:
            held, self._held = self._held, outer
            for event in held:
                self.emit(event)

    def _deliver(self, event: Event) -> None:
        for listener in self._all:
            listener(event)
        for event_type, listener in self._typed:
            if isinstance(event, event_type):
                listener(event)

    def notice(self, code: str, message: str) -> None:
        self.emit(Notice(code, message))

    def status(self, phase: str, message: str) -> None:
        self.emit(StatusEvent(phase, message))


class StderrRenderer:
    """Print notices and status lines to a stream (stderr by default, so stdout stays pipeable).

    Hook events (``PreCompact``/``PostCompact``) are not printed unless ``hooks=True``.
    """

    def __init__(self, stream: TextIO | None = None, *, hooks: bool = False) -> None:
        self._stream = stream
        self._hooks = hooks

    def __call__(self, event: Event) -> None:
        if isinstance(event, PreCompact | PostCompact) and not self._hooks:
            return
        stream = self._stream if self._stream is not None else sys.stderr
        prefix = "│ " if isinstance(event, StatusEvent) else ""
        print(prefix + event.text, file=stream, flush=True)


#: What archived content for a session: planned compaction (auto and /compact), the recovery
#: ladder, and each pass or step that moves content to the archive (SessionStats.count_archived).
ARCHIVE_SOURCES: tuple[str, ...] = (
    "planned",
    "recovery",
    "microcompact",
    "dedup",
    "tool_budget",
    "pairing",
    "skills",
    "images",
    "context_editing",
    "set_aside",
)


@dataclass(slots=True)
class SessionStats:
    """Counters and costs that persist with a session (see :meth:`to_dict`/:meth:`from_dict`)."""

    turns: int = 0
    requests: int = 0
    rejected_requests: int = 0
    recoveries: int = 0
    recovery_attempts: int = 0
    escalations: int = 0
    compactions: int = 0
    level3_compactions: int = 0
    skipped_compactions: int = 0
    summarizer_calls: int = 0
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    summarizer_cost_usd: float = 0.0
    cache_rebuilds_expected: int = 0
    chars_archived: int = 0  # every source together
    chars_archived_by_source: dict[str, int] = field(default_factory=dict)  # ARCHIVE_SOURCES → chars
    archive_refusals: int = 0  # cuts abandoned because the archive refused to store them
    content_blocks: int = 0  # block pages met (SPEC §12: each settled by experiments)
    block_experiments: int = 0  # requests sent only to tell size, content and policy apart
    withheld_chars: int = 0  # chars of content withheld because a gateway refused it
    provider_input_tokens: int = 0
    provider_output_tokens: int = 0

    def count_archived(self, source: str, chars: int) -> None:
        """``chars`` newly archived for the session by ``source`` (one of :data:`ARCHIVE_SOURCES`)."""
        if chars > 0:
            self.chars_archived += chars
            self.chars_archived_by_source[source] = self.chars_archived_by_source.get(source, 0) + chars

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionStats:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
