"""The exact loss ledger: which occurrences of the original conversation can still be given back.

Every original message is broken into pieces (:func:`simulator.research.pieces.message_pieces`):
its role, its content, each tool call's id, name and arguments, a tool result's
call id and each image's bytes. A piece is **kept** only when *its own
occurrence* survives, counted with multiplicity:

- in the final history (each message field is one occurrence), or
- in an archive entry that recall reaches from a ``<<ccr:KEY>>`` marker in the
  final history, following markers transitively. An entry stands for one
  occurrence per occurrence of each live container naming it: two stubs naming
  one entry stand for two occurrences, one stub for one, and a range index
  holding a message twice names its member twice. A range index or a rendered
  transcript offers the role, ids, names and images of each message it records
  (:func:`simulator.research.pieces.parse_entry`).

Nothing is matched by substring: a dropped ``"please run rm -rf build now"``
quoted inside a later message is lost; of two identical tool results, the one
dropped is lost although the other's text is still there.

When the caller reports every archive write (:meth:`LossLedger.archived`, as the
replay's recorder does), an entry stands for no more occurrences than it was
written, which makes the count exact and its updates local.

Incremental: each original message, each history message object and each
archive entry is examined once; :meth:`LossLedger.observe` costs what changed
since the last call (the identities of the history's messages, then the entries
whose occurrences changed, parents before children), so per-turn cost stays
flat over long replays.

>>> from ctxrecover.archive import MemoryArchive, marker
>>> from ctxrecover.messages import Message
>>> store = MemoryArchive()
>>> ledger = LossLedger(store)
>>> ledger.add_originals([Message.user("go"), Message.assistant("a long answer")])
>>> ledger.observe([Message.user("go"), Message.assistant(f"[cut {marker(store.put('a long answer'))}]")])
>>> ledger.losses.total
0
>>> ledger.observe([Message.user("go")])
>>> ledger.losses
Losses(role=9, content=13, tool_name=0, call_id=0, arguments=0, image=0)
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.research.pieces import (
    ARGUMENTS,
    DATA_URL_RE,
    EDGE_POOLS,
    IMAGE,
    POOL_FIELDS,
    Edge,
    Piece,
    message_pieces,
    offered_values,
    parse_entry,
    text_edges,
)

if TYPE_CHECKING:
    from ctxrecover.archive import Archive
    from ctxrecover.messages import Message

__all__ = ["LOSS_FIELDS", "LossLedger", "Losses"]

LOSS_FIELDS: tuple[str, ...] = ("role", "content", "tool_name", "call_id", "arguments", "image")
# The order in which an entry's occurrences (capped by its writes) serve the kinds of edge reaching it.
EDGE_ORDER: tuple[int, ...] = tuple(range(len(EDGE_POOLS)))
IMAGE_FIRST: tuple[int, ...] = (IMAGE, *(pool for pool in EDGE_ORDER if pool != IMAGE))


@dataclass(frozen=True, slots=True)
class Losses:
    """Original chars irrecoverably lost, per field (an image counts the chars of its data or url)."""

    role: int = 0
    content: int = 0
    tool_name: int = 0
    call_id: int = 0
    arguments: int = 0
    image: int = 0

    @property
    def total(self) -> int:
        """All fields together: the ``chars_lost`` of the run schema."""
        return sum(getattr(self, name) for name in LOSS_FIELDS)

    def nonzero(self) -> dict[str, int]:
        """The fields with a loss, in :data:`LOSS_FIELDS` order."""
        return {name: getattr(self, name) for name in LOSS_FIELDS if getattr(self, name)}


# -- the ledger ------------------------------------------------------------------------------------
class _Node:
    """One archive entry, parsed once, and the occurrences it stands for now."""

    __slots__ = ("credit", "edges", "inflow", "occurrences", "offers", "order", "pieces", "rank", "text")

    def __init__(self, text: str | None, edges: list[Edge], pieces: list[Piece], rank: int) -> None:
        self.text = text
        self.offers = offered_values(text) if text else ()  # the text as each edge pool reads it
        # the pools its occurrences serve first: a data: URL is an image to whoever recalls it
        self.order = IMAGE_FIRST if text and DATA_URL_RE.match(text) else EDGE_ORDER
        self.edges = edges
        self.pieces = pieces
        self.rank = rank  # above every entry it points to: parents settle before children
        self.inflow = [0] * len(EDGE_POOLS)  # occurrences of live containers naming it, per edge kind
        self.occurrences = 0
        self.credit = (0,) * (1 + len(EDGE_POOLS))  # offered: each piece, then its text in each edge pool


@dataclass(slots=True)
class _Root:
    """A message object of the observed history, how often it occurs there, and what it offers."""

    message: Message
    count: int
    pieces: list[Piece]
    edges: list[Edge]


class LossLedger:
    """Occurrence-exact loss accounting between an original conversation and its compacted history.

    Feed the originals with :meth:`add_original` (each once, in any order), show
    the current history with :meth:`observe` (as often as needed) and read
    :attr:`losses`. ``archive`` resolves the history's markers; an entry is read
    (``archive.get``) and parsed the first time a marker reaches it.

    An entry stands for as many occurrences as reach it — one per occurrence of
    each live container (a history message, or an entry standing for
    occurrences itself) that names it, times the times it names it — but, with
    ``track_writes=True``, never more than it was written: the caller reports
    every write with :meth:`archived` (each ``put`` and each member of a
    ``put_keyed``, also of content already stored). That cap makes the ledger
    exact (a stub that names both an entry and the marker inside it gives that
    inner entry one occurrence, not two) and keeps its updates local: a change
    stops where an entry already stands for all its writes. Without write counts
    the ledger never reports a false loss but counts such redundant references
    twice, and an update may walk every entry below a changed marker: use it
    one-shot (:func:`simulator.research.retention.chars_lost`) or report writes.
    """

    def __init__(self, archive: Archive | None = None, *, track_writes: bool = False) -> None:
        self.archive = archive
        self.track_writes = track_writes
        self._need: dict[Piece, int] = {}
        self._have: dict[Piece, int] = {}
        self._lost: dict[str, int] = dict.fromkeys(LOSS_FIELDS, 0)
        self._roots: dict[int, _Root] = {}
        self._nodes: dict[str, _Node] = {}
        self._missing: set[str] = set()
        self._pending: dict[str, list[int]] = {}  # key → change of inflow per edge kind
        self._writes: Counter[str] = Counter()
        self._written: set[str] = set()

    # -- inputs --------------------------------------------------------------------------------
    def add_original(self, msg: Message) -> None:
        """Account for one original message (its pieces must survive)."""
        for piece in message_pieces(msg):
            self._shift(piece, need=1)

    def add_originals(self, messages: Iterable[Message]) -> None:
        """:meth:`add_original` for each message."""
        for msg in messages:
            self.add_original(msg)

    def archived(self, key: str) -> None:
        """The archive was written under ``key`` (one call per write, even of content already stored)."""
        self._writes[key] += 1
        self._written.add(key)

    def observe(self, history: Sequence[Message]) -> None:
        """Make ``history`` the final history; costs the messages and entries that changed."""
        current: dict[int, _Root] = {}
        for msg in history:
            root = current.get(id(msg))
            if root is not None:
                root.count += 1
                continue
            known = self._roots.get(id(msg))  # the previous history's messages are alive: ids are theirs
            if known is not None:
                current[id(msg)] = _Root(msg, 1, known.pieces, known.edges)
            else:
                arguments = [call.arguments for call in msg.tool_calls]
                edges = text_edges([msg.content]) + text_edges(arguments, ARGUMENTS)
                current[id(msg)] = _Root(msg, 1, message_pieces(msg), edges)
        for ident, root in self._roots.items():
            now = current.get(ident)
            self._offer_root(root, (now.count if now is not None else 0) - root.count)
        for ident, root in current.items():
            if ident not in self._roots:
                self._offer_root(root, root.count)
        self._roots = current
        self._settle()

    # -- results -------------------------------------------------------------------------------
    @property
    def losses(self) -> Losses:
        """Chars lost per field, for the last observed history."""
        self._settle()
        return Losses(**self._lost)

    @property
    def dangling_markers(self) -> int:
        """Distinct keys that live markers name but the archive does not hold."""
        self._settle()
        return sum(1 for key in self._missing if self._nodes[key].occurrences > 0)

    def deficits(self) -> list[tuple[str, str, int]]:
        """Every lost piece as ``(field, value, occurrences missing)``, largest loss first (scans all)."""
        self._settle()
        rows = [
            (POOL_FIELDS[pool], value, need - self._have.get((pool, value), 0))
            for (pool, value), need in self._need.items()
            if need > self._have.get((pool, value), 0)
        ]
        return sorted(rows, key=lambda row: -len(row[1]) * row[2])

    # -- bookkeeping ---------------------------------------------------------------------------
    def _shift(self, piece: Piece, *, need: int = 0, have: int = 0) -> None:
        needed, had = self._need.get(piece, 0), self._have.get(piece, 0)
        before = needed - had if needed > had else 0
        needed, had = needed + need, had + have
        after = needed - had if needed > had else 0
        if needed:
            self._need[piece] = needed
        else:
            self._need.pop(piece, None)
        if had:
            self._have[piece] = had
        else:
            self._have.pop(piece, None)
        if after != before:
            self._lost[POOL_FIELDS[piece[0]]] += (after - before) * len(piece[1])

    def _offer_root(self, root: _Root, delta: int) -> None:
        if not delta:
            return
        for piece in root.pieces:
            self._shift(piece, have=delta)
        for key, kind, count in root.edges:
            self._mark(key, kind, delta * count)

    def _mark(self, key: str, kind: int, inflow: int) -> None:
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = [0] * len(EDGE_POOLS)
        pending[kind] += inflow

    def _settle(self) -> None:
        """Apply the pending writes and changes of inflow, parents before children."""
        if self._written:
            written, self._written = self._written, set()
            if written & self._missing:
                self._rebuild()  # an entry a marker already named arrived late: recount everything
            for key in written & self._nodes.keys():
                self._mark(key, 0, 0)  # its cap changed
        heap = [(-self._node(key).rank, key) for key in self._pending]
        heapq.heapify(heap)
        while heap:
            key = heapq.heappop(heap)[1]
            node = self._nodes[key]
            changes = self._pending.pop(key)
            node.inflow = [now + change for now, change in zip(node.inflow, changes, strict=True)]
            before = node.occurrences
            self._evaluate(key, node)
            change = node.occurrences - before
            if change:
                for child, kind, count in node.edges:
                    if child not in self._pending:
                        heapq.heappush(heap, (-self._nodes[child].rank, child))
                    self._mark(child, kind, change * count)

    def _evaluate(self, key: str, node: _Node) -> None:
        """Set the node's occurrences from its inflow and cap, and offer them."""
        total = sum(node.inflow)
        if self.track_writes:
            total = min(total, self._writes[key])
        node.occurrences = total
        credit, left = [total] + [0] * len(EDGE_POOLS), total
        for kind in node.order:  # the text is offered to the pools of the edges that reach it, in order
            credit[1 + kind] = min(node.inflow[kind], left)
            left -= credit[1 + kind]
        old, node.credit = node.credit, tuple(credit)
        if credit[0] != old[0]:
            for piece in node.pieces:
                self._shift(piece, have=credit[0] - old[0])
        if node.text:
            for pool, value, now, before in zip(EDGE_POOLS, node.offers, credit[1:], old[1:], strict=True):
                if now != before and value:
                    self._shift((pool, value), have=now - before)

    def _node(self, key: str) -> _Node:
        """The parsed entry under ``key``; a first visit parses it and everything it names (once)."""
        node = self._nodes.get(key)
        if node is not None:
            return node
        parsed: dict[str, tuple[str | None, list[Edge], list[Piece]]] = {}
        stack = [key]
        while stack:
            current = stack[-1]
            if current in self._nodes:
                stack.pop()
                continue
            if current not in parsed:
                text = self.archive.get(current) if self.archive is not None else None
                edges, pieces = parse_entry(text) if text is not None else ([], [])
                # ``parsed`` holds the walk's open ancestors: an edge back to one would close a
                # cycle (impossible with content-addressed keys), so it is dropped
                edges = [edge for edge in edges if edge[0] not in parsed and edge[0] != current]
                parsed[current] = (text, edges, pieces)
                stack += [edge[0] for edge in edges if edge[0] not in self._nodes]
                continue
            text, edges, pieces = parsed.pop(current)
            rank = 1 + max((self._nodes[edge[0]].rank for edge in edges), default=0)
            self._nodes[current] = _Node(text, edges, pieces, rank)
            if text is None:
                self._missing.add(current)
            stack.pop()
        return self._nodes[key]

    def _rebuild(self) -> None:
        """Forget every parsed entry and recount from the current history."""
        for key, node in self._nodes.items():
            node.inflow = [0] * len(EDGE_POOLS)
            self._evaluate(key, node)
        self._nodes.clear()
        self._missing.clear()
        self._pending.clear()
        for root in self._roots.values():
            for key, kind, count in root.edges:
                self._mark(key, kind, root.count * count)
