"""The archive as one session uses it: what its histories reach stays pinned, failures are reported.

A :class:`SessionArchive` wraps the store a session was given. It is the
:class:`~ctxrecover.archive.Archive` every pass of that session writes to, and
it keeps the store's pins in step with the session's *live lists* — the
history and the last outgoing request (whose tool-result previews carry
markers the model has seen):

- each message's keys (the markers in its content, tool-call arguments and
  system parts) are found once and memoized on the immutable message;
- :meth:`SessionArchive.track` compares a list with the one it last saw *by
  identity* (one set difference; a list the session grew in place costs only
  its new tail) and counts, per key, the live messages that hold it;
- only keys whose count goes 0 → 1 or 1 → 0 are sent to the store, in one
  :meth:`~ctxrecover.archive.PinningArchive.pin` call: the store's work per turn
  is O(what changed), never O(history).

Puts carry the session as ``owner``, so what a cut stores is held until the
next ``track`` (the new history pins what it keeps). Stores that evict nothing
(:class:`~ctxrecover.archive.MemoryArchive`) are used as they are, untracked.
A write the store refuses is passed to ``on_error`` and re-raised; a pin
change the store could not record is reported once and retried with the next
change (never raised: the session stays usable while its disk is full). Once what
live histories hold passes :data:`~ctxrecover.archive.pressure.PRESSURE_WARN_FRACTION`
of a capped store's ``max_bytes`` (a store with ``pressure()``, like
:class:`~ctxrecover.archive.DiskArchive`), ``on_pressure`` hears it, once, with the
:class:`~ctxrecover.archive.ArchivePressure` report: who holds what, what frees room.

Writes made inside :meth:`SessionArchive.attributed` are counted for their
source: ``on_archived(source, chars)`` hears of each content the session had
not archived before (a byte-stable preview re-archived every turn counts once).
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import is_, itemgetter
from typing import TYPE_CHECKING, Literal, TypeVar

from ctxrecover.archive.keys import archive_key, extract_keys, has_marker
from ctxrecover.archive.pressure import PRESSURE_WARN_FRACTION, ArchivePressure
from ctxrecover.archive.store import Archive, PinningArchive, put_entries
from ctxrecover.errors import ArchiveError

if TYPE_CHECKING:
    from ctxrecover.messages import Message

__all__ = ["WITHHELD_RECALL", "ListDelta", "SessionArchive", "list_delta", "message_keys"]

_T = TypeVar("_T")
#: What recalling withheld content through the session gives back (SPEC §12): the explanation.
WITHHELD_RECALL = (
    "[withheld: the gateway refused this content; it is archived as <<ccr:%s>> on this machine and is not "
    "resent through this gateway — recall it locally]"
)
MAX_REPLACED = 64  # beyond this many replaced positions a change counts as a rewrite from the first
# Past the warning line, the full pressure report (a walk of every held entry) is read again only
# after this share of max_bytes was written since the last one: the per-write check stays one counter.
PRESSURE_RECHECK_SHARE = 0.01
_KEYS_CACHE = "archive:keys"  # msg._cache entry: the keys the message refers to
_KEY_OF, _CONTENT_OF = itemgetter(0), itemgetter(1)  # of a (key, content) entry
Stage = Literal["put", "pin"]


def _takes_owner(method: object) -> bool:
    if method is None:
        return False
    try:
        return "owner" in inspect.signature(method).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def message_keys(msg: Message) -> tuple[str, ...]:
    """The archive keys ``msg`` refers to (markers in content, tool-call arguments, system parts).

    Memoized on the message."""
    keys: tuple[str, ...] | None = msg._cache.get(_KEYS_CACHE)
    if keys is None:
        texts = [msg.content, *(call.arguments for call in msg.tool_calls), *msg.system_parts]
        keys = tuple(dict.fromkeys(key for text in texts for key in extract_keys(text)))
        msg._cache[_KEYS_CACHE] = keys
    return keys


@dataclass(frozen=True, slots=True)
class ListDelta:
    """How a list of messages differs from the one seen before it.

    Positions below ``kept`` hold the same messages (equal, usually the very same
    objects) except those in ``replaced``, which hold new ones; whatever the old
    list held from ``kept`` on is gone, and the new list's messages from ``kept``
    on are new (appended, or a rewritten tail). ``identical``: every position below
    ``kept`` holds the very same object in both lists.
    """

    kept: int
    replaced: tuple[int, ...] = ()
    identical: bool = False


def list_delta(
    old: Sequence[Message], new: Sequence[Message], *, max_replaced: int = MAX_REPLACED
) -> ListDelta:
    """What changed from ``old`` to ``new``, found by list comparisons (C speed, identity first).

    An appended tail costs one comparison of the common length; ``k`` replaced
    positions cost O(k · log n) comparisons of halving slices. More than
    ``max_replaced`` replacements (a shifted or rewritten history) make the
    delta a rewrite from the first difference. Tuples are compared as lists.
    """
    old = old if isinstance(old, list) else list(old)
    new = new if isinstance(new, list) else list(new)
    common = min(len(old), len(new))
    if common == 0:
        return ListDelta(0, identical=True)
    if all(map(is_, old, new)):  # the usual turn: pointers compared, no message (nor a slice) touched
        return ListDelta(common, identical=True)
    head_old = old if len(old) == common else old[:common]
    head_new = new if len(new) == common else new[:common]
    if head_old == head_new:
        return ListDelta(common)
    found: list[int] = []
    if _differing(old, new, 0, common, found, max_replaced):
        return ListDelta(common, tuple(found))
    return ListDelta(found[0])


def _differing(
    old: Sequence[Message], new: Sequence[Message], lo: int, hi: int, found: list[int], limit: int
) -> bool:
    """Append to ``found`` the positions in ``[lo, hi)`` (known to differ somewhere), left first;
    False as soon as there are more than ``limit``."""
    if hi - lo == 1:
        found.append(lo)
        return len(found) <= limit
    mid = (lo + hi) // 2
    if old[lo:mid] != new[lo:mid]:
        if not _differing(old, new, lo, mid, found, limit):
            return False
        if old[mid:hi] == new[mid:hi]:
            return True
    return _differing(old, new, mid, hi, found, limit)


@dataclass(slots=True)
class _Tracked:
    """One live list as last seen: its messages by identity (holding them keeps ids unique)."""

    members: dict[int, Message] = field(default_factory=dict)
    source: Sequence[Message] | None = None
    length: int = 0


class SessionArchive:
    """A session's view of its store: the Archive protocol, with the session's pins kept in step.

    ``store`` is the wrapped store (for what only it offers, e.g. ``DiskArchive.stats``).
    ``owner`` names the session in the store (a fresh random id by default; a
    resumed session :meth:`adopt` s its saved one). ``on_error(exc, stage)`` is
    told about every :class:`~ctxrecover.errors.ArchiveError` on a write
    (``"put"``, then re-raised) or a pin change (``"pin"``, retried later);
    ``on_pressure(report)`` once, when live histories hold the warning share of the cap.
    """

    def __init__(
        self,
        store: Archive,
        *,
        owner: str | None = None,
        on_error: Callable[[ArchiveError, Stage], object] | None = None,
        on_archived: Callable[[str, int], object] | None = None,
        on_pressure: Callable[[ArchivePressure], object] | None = None,
    ) -> None:
        self.store: Archive = store.store if isinstance(store, SessionArchive) else store
        self.owner = owner or uuid.uuid4().hex
        # A store that pins but whose put takes no owner (a subclass) still gets its pins, not fresh holds.
        self.pinning = isinstance(self.store, PinningArchive)
        self._put_owner = self.pinning and _takes_owner(self.store.put)
        self._put_keyed_owner = self.pinning and _takes_owner(getattr(self.store, "put_keyed", None))
        self._on_error = on_error
        self._on_archived = on_archived
        self._on_pressure = on_pressure
        self._pressure_told = False
        self._written_since_report: int | None = None  # None: no report read yet
        self._source: str | None = None
        self._counted: set[str] = set()  # keys already counted for a source
        self._lists: dict[str, _Tracked] = {}
        self._counts: dict[str, int] = {}
        self._to_pin: set[str] = set()
        self._to_unpin: set[str] = set()
        self._stored_since_pin = False
        self._needs_reset = True  # the first pin declares the whole live set
        self._pin_failing = False
        self._journal: set[str] | None = None  # keys new to the store since begin_journal()
        #: Keys of content the session's gateway refused (SPEC §12): :meth:`get` explains, never returns it.
        self.withheld: frozenset[str] = frozenset()

    # -- the Archive protocol ------------------------------------------------------------
    def put(self, content: str) -> str:
        if self._journal is not None:
            self._note_new((archive_key(content),))
        if self._put_owner:
            key = self._write(lambda: self.store.put(content, owner=self.owner), lambda: len(content))  # type: ignore[call-arg]
        else:
            key = self._write(lambda: self.store.put(content), lambda: len(content))
        self._counted_write(((key, content),))
        return key

    def put_keyed(self, entries: Sequence[tuple[str, str]]) -> None:
        """Store pre-keyed entries in one step (see :func:`~ctxrecover.archive.put_entries`)."""
        if self._journal is not None:
            self._note_new(key for key, _ in entries)

        def written() -> int:
            return sum(map(len, map(_CONTENT_OF, entries)))

        if self._put_keyed_owner:
            self._write(lambda: self.store.put_keyed(entries, owner=self.owner), written)  # type: ignore[attr-defined]
        else:
            self._write(lambda: put_entries(self.store, entries), written)
        self._counted_write(entries)

    @contextmanager
    def attributed(self, source: str) -> Iterator[None]:
        """Count the writes made inside the block for ``source`` (see ``on_archived``)."""
        outer, self._source = self._source, source
        try:
            yield
        finally:
            self._source = outer

    def archive(self, content: str) -> str | None:
        return None if has_marker(content) else self.put(content)

    def get(self, key: str) -> str | None:
        """The entry under ``key`` — or, for content a gateway refused (:attr:`withheld`), the
        explanation: what this view returns may be resent through that gateway. The store itself
        (``self.store``) still returns the content, for local recall."""
        if key in self.withheld:
            return WITHHELD_RECALL % key
        return self.store.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self.store

    def __len__(self) -> int:
        return len(self.store)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"SessionArchive({self.store!r}, owner={self.owner!r})"

    # -- what the session's lists reach ---------------------------------------------------------
    @property
    def live_keys(self) -> frozenset[str]:
        """Keys the tracked lists hold directly (empty for a store that evicts nothing)."""
        return frozenset(self._counts)

    def track(self, name: str, messages: Sequence[Message]) -> None:
        """``messages`` is now the live list ``name``: pin what it holds, unpin what it dropped."""
        if not self.pinning:
            return
        tracked = self._lists.get(name)
        if tracked is not None and messages is tracked.source and len(messages) >= tracked.length:
            added: list[Message] = []
            for msg in messages[tracked.length :]:  # grown in place: only the tail is new
                if id(msg) not in tracked.members:
                    tracked.members[id(msg)] = msg
                    added.append(msg)
            removed: list[Message] = []
        else:
            members = {id(m): m for m in messages}
            old = tracked.members if tracked is not None else {}
            added = [members[i] for i in members.keys() - old.keys()]
            removed = [old[i] for i in old.keys() - members.keys()]
            tracked = self._lists[name] = _Tracked(members)
        tracked.source, tracked.length = messages, len(messages)
        for msg in added:
            for key in message_keys(msg):
                self._count(key, +1)
        for msg in removed:
            for key in message_keys(msg):
                self._count(key, -1)
        self._flush()

    def begin_journal(self) -> None:
        """Remember, from now on, the keys this session stores that the store did not hold
        (the start of a turn that may be cancelled; only a pinning store is journaled)."""
        self._journal = set() if self.pinning else None

    def end_journal(self, *, discard: bool = False) -> None:
        """Stop journaling; with ``discard`` (the turn was cancelled and its history rolled back),
        delete from the store what it stored that no live list of any session holds."""
        written, self._journal = self._journal, None
        if not discard or not written:
            return
        remove = getattr(self.store, "discard", None)
        if remove is None:
            return
        try:
            remove(written - self._counts.keys())
        except ArchiveError as exc:
            self._report(exc, "pin")

    def adopt(self, owner: str) -> None:
        """Take over ``owner``'s pins (a resumed session): they become this session's live set at the
        next :meth:`track`; the pins of the id used so far are released."""
        if owner == self.owner:
            return
        if self.pinning:
            try:
                self.store.release(self.owner)  # type: ignore[attr-defined]
            except ArchiveError as exc:
                self._report(exc, "pin")
        self.owner = owner
        self._needs_reset = True

    # -- internals ----------------------------------------------------------------------
    def _note_new(self, keys: Iterable[str]) -> None:
        assert self._journal is not None
        self._journal.update(key for key in keys if key not in self._journal and key not in self.store)

    def _counted_write(self, entries: Sequence[tuple[str, str]]) -> None:
        if self._source is None or self._on_archived is None:
            return
        # Set operations in C: a dropped range has thousands of members.
        new = set(map(_KEY_OF, entries)) - self._counted
        if not new:
            return
        self._counted |= new
        if len(new) == len(entries):  # each entry new and distinct (the usual range): all of it is fresh
            fresh = sum(map(len, map(_CONTENT_OF, entries)))
        else:  # a key counted before or repeated here: the chars of each new key, once
            by_key = dict(entries)
            fresh = sum(map(len, map(by_key.__getitem__, new)))
        if fresh:
            self._on_archived(self._source, fresh)

    def _write(self, action: Callable[[], _T], written: Callable[[], int]) -> _T:
        """``action()`` (a store write of ``written()`` chars, read only when the pressure is watched)."""
        self._stored_since_pin = True
        try:
            result = action()
        except ArchiveError as exc:
            self._report(exc, "put")
            raise
        self._check_pressure(written)
        return result

    def _check_pressure(self, written_chars: Callable[[], int]) -> None:
        """After a write: tell ``on_pressure`` (once) when live histories hold the warning share."""
        pressure = getattr(self.store, "pressure", None)
        max_bytes = getattr(self.store, "max_bytes", None)
        if self._on_pressure is None or self._pressure_told or pressure is None or not max_bytes:
            return
        line = PRESSURE_WARN_FRACTION * max_bytes
        written = written_chars()
        since = self._written_since_report
        self._written_since_report = None if since is None else since + written
        if since is not None and since + written < PRESSURE_RECHECK_SHARE * max_bytes:
            return
        try:
            if self.store.total_bytes < line:  # type: ignore[attr-defined]
                return  # what is held is at most what is stored: one counter read
            report: ArchivePressure = pressure(self.owner)
        except ArchiveError:
            return  # advisory only: the next write looks again
        self._written_since_report = 0
        if report.held_bytes >= line:
            self._pressure_told = True
            self._on_pressure(report)

    def _count(self, key: str, delta: int) -> None:
        count = self._counts.get(key, 0) + delta
        if count > 0:
            self._counts[key] = count
        else:
            self._counts.pop(key, None)
        if delta > 0 and count == 1:
            if key in self._to_unpin:
                self._to_unpin.discard(key)  # unpinned and pinned again before the store heard
            else:
                self._to_pin.add(key)
        elif delta < 0 and count == 0:
            if key in self._to_pin:
                self._to_pin.discard(key)
            else:
                self._to_unpin.add(key)

    def _flush(self) -> None:
        if not (self._needs_reset or self._to_pin or self._to_unpin or self._stored_since_pin):
            return
        store: PinningArchive = self.store  # type: ignore[assignment]
        try:
            if self._needs_reset:
                store.pin(self.owner, list(self._counts), reset=True)
            else:
                store.pin(self.owner, sorted(self._to_pin), sorted(self._to_unpin))
        except ArchiveError as exc:
            if not self._pin_failing:
                self._pin_failing = True
                self._report(exc, "pin")
            return
        self._to_pin.clear()
        self._to_unpin.clear()
        self._stored_since_pin = self._needs_reset = self._pin_failing = False

    def _report(self, exc: ArchiveError, stage: Stage) -> None:
        if self._on_error is not None:
            self._on_error(exc, stage)
