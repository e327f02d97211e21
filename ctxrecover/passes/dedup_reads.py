"""Dedup repeated reads: keep one current view per file (SPEC §3.4).

Coding agents read the same file again and again. When a later read of a path
covers the same or a wider line range (or the whole file), every earlier read
of it becomes a one-line stub (the original archived first, so ``@recall``
restores it); the newest read stays intact. A narrower later read never
supersedes a wider earlier one. ``preserve_verbatim`` messages (``@recall``
output) and summaries are never touched and never supersede anything — a
recalled old version is not a current read.

What counts as a read is pluggable: a :class:`ReadParser` turns a tool message
(and the tool call that owns it, when there is one) into :class:`ReadBlock`
values. Two parsers ship in :data:`DEFAULT_READ_PARSERS`; the first parser
that finds blocks in a message wins.

**File-block format** (:func:`parse_file_blocks`) — one or more blocks, each a
header line followed by numbered lines (``   12\\tcode`` or ``12: code``)::

    <<< FILE: src/app.py >>>                 whole file
    <<< FILE: src/app.py (lines 10-40) >>>   lines 10 to 40

A header without a range is a whole-file read, unless its first numbered
line is above 1: then the block covers the first to the last numbered line.

**cat -n output** (:func:`parse_cat_n`) — every line numbered like ``cat -n``
(``%6d\\t``; ``→`` is accepted as the separator too), the path taken from the
owning call's arguments (``path``, ``file_path`` or ``filename``). Without
range arguments (``offset``/``limit``/``start_line``/``end_line``) it is a
whole-file read; with them it covers the first to the last numbered line
printed, because tools disagree on whether ``offset`` counts from 0 or 1 and
the printed numbers are the truth.

>>> from ctxrecover.archive import MemoryArchive
>>> from ctxrecover.messages import Message
>>> read = "<<< FILE: a.py >>>\\n" + "".join(f"{n}: x = {n}\\n" for n in range(1, 21))
>>> h = [Message.tool("r1", read), Message.tool("r2", read)]
>>> out, report = dedup_repeated_reads(h, archive=MemoryArchive())
>>> out[0].content.splitlines()[0]
'[Earlier read of a.py superseded by a later read of the same file — 221 chars cleared]'
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ctxrecover.archive import Archive, archive_message, extract_keys
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.history_index import HistoryIndex, TurnState
from ctxrecover.passes.microcompact import recall_suffixes

__all__ = [
    "CAT_N_LINE_RE",
    "CAT_N_PATH_KEYS",
    "CAT_N_RANGE_KEYS",
    "DEFAULT_READ_PARSERS",
    "DedupReport",
    "FILE_HEADER_RE",
    "FILE_LINE_RE",
    "ReadBlock",
    "ReadParser",
    "SUPERSEDED_TEXT",
    "dedup_repeated_reads",
    "dedup_step",
    "parse_cat_n",
    "parse_file_blocks",
]

SUPERSEDED_TEXT = "[Earlier read of %s superseded by a later read of the same file — %d chars cleared]"
PATH_SEPARATOR = ", "  # joins the paths of a multi-file read in its stub
READS_CACHE_KEY = "dedup:reads"  # msg._cache entry: (owning call, parsers, blocks found)

FILE_HEADER_RE = re.compile(
    r"^<<< FILE: (?P<path>.+?)(?: \(lines (?P<start>\d+)-(?P<end>\d+)\))? >>>[ \t]*$", re.MULTILINE
)
FILE_LINE_RE = re.compile(r"^[ \t]*(\d+)(?:\t|:(?: |$))", re.MULTILINE)

CAT_N_LINE_RE = re.compile(r"^[ \t]*(\d+)(?:\t|→)")
CAT_N_PATH_KEYS = ("path", "file_path", "filename")
CAT_N_RANGE_KEYS = ("offset", "limit", "start_line", "end_line")


@dataclass(frozen=True, slots=True)
class ReadBlock:
    """Lines ``start_line``..``end_line`` of ``path`` shown by a read; ``end_line=None`` reads to the end."""

    path: str
    start_line: int = 1
    end_line: int | None = None

    def covers(self, other: ReadBlock) -> bool:
        """True when this read shows every line ``other`` shows, of the same path."""
        if self.path != other.path or self.start_line > other.start_line:
            return False
        if self.end_line is None:
            return True
        return other.end_line is not None and self.end_line >= other.end_line


class ReadParser(Protocol):
    """Finds the file reads in a tool message; ``call`` is its owning tool call, or None.

    A parser must be a pure function of its arguments: its answer is memoized on
    the (immutable) message, so each message is parsed once, not at every turn.
    """

    def __call__(self, message: Message, call: ToolCall | None) -> list[ReadBlock]: ...


def _normalise(path: str) -> str:
    return posixpath.normpath(path.strip())


def _block(path: str, numbers: list[int], ranged: bool) -> ReadBlock:
    """A read of ``path`` that printed line ``numbers``; whole-file unless ranged or starting past 1."""
    if not numbers or (not ranged and numbers[0] == 1):
        return ReadBlock(_normalise(path))
    return ReadBlock(_normalise(path), numbers[0], numbers[-1])


def parse_file_blocks(message: Message, call: ToolCall | None = None) -> list[ReadBlock]:
    """Reads in the ``<<< FILE: path >>>`` block format (see the module docstring)."""
    text = message.content
    if "<<< FILE: " not in text:
        return []
    headers = list(FILE_HEADER_RE.finditer(text))
    blocks: list[ReadBlock] = []
    for n, header in enumerate(headers):
        if header["start"] is not None:
            blocks.append(ReadBlock(_normalise(header["path"]), int(header["start"]), int(header["end"])))
            continue
        end = headers[n + 1].start() if n + 1 < len(headers) else len(text)
        numbers = [int(m.group(1)) for m in FILE_LINE_RE.finditer(text, header.end(), end)]
        blocks.append(_block(header["path"], numbers, ranged=False))
    return blocks


def parse_cat_n(message: Message, call: ToolCall | None) -> list[ReadBlock]:
    """A ``cat -n``-style read whose path is in the owning call's arguments (see the module docstring)."""
    if call is None:
        return []
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        return []
    if not isinstance(arguments, dict):
        return []
    path = next((v for k in CAT_N_PATH_KEYS if isinstance(v := arguments.get(k), str) and v.strip()), None)
    if path is None:
        return []
    lines = [line for line in message.content.splitlines() if line.strip()]
    if not lines or not CAT_N_LINE_RE.match(lines[0]):
        return []
    numbers = [int(m.group(1)) for line in lines if (m := CAT_N_LINE_RE.match(line))]
    ranged = any(arguments.get(k) is not None for k in CAT_N_RANGE_KEYS)
    return [_block(path, numbers, ranged)]


DEFAULT_READ_PARSERS: tuple[ReadParser, ...] = (parse_file_blocks, parse_cat_n)


@dataclass(frozen=True, slots=True)
class DedupReport:
    """What :func:`dedup_repeated_reads` did.

    ``chars_cleared`` is the net number of characters removed from the history
    (each original minus its stub).
    """

    reads_superseded: int = 0
    chars_cleared: int = 0

    @property
    def changed(self) -> bool:
        """True when at least one read was superseded."""
        return self.reads_superseded > 0


def _owning_calls(history: list[Message]) -> list[ToolCall | None]:
    """For each message, the tool call of the nearest preceding assistant that it answers."""
    owners: list[ToolCall | None] = []
    calls: dict[str, ToolCall] = {}
    for msg in history:
        if msg.role == "assistant":
            calls = {}
            for call in msg.tool_calls:
                calls.setdefault(call.id, call)
        owners.append(calls.get(msg.tool_call_id) if msg.tool_call_id is not None else None)
    return owners


def _parsed(msg: Message, call: ToolCall | None, parsers: Sequence[ReadParser]) -> list[ReadBlock]:
    """The blocks of the first parser that finds any, memoized on the message (parsed once, not per turn)."""
    memo = msg._cache.get(READS_CACHE_KEY)
    if memo is not None:
        cached_call, cached_parsers, cached_blocks = memo
        if (cached_call is call or cached_call == call) and (
            cached_parsers is parsers or cached_parsers == parsers
        ):
            known: list[ReadBlock] = cached_blocks
            return known
    blocks = next((found for parser in parsers if (found := parser(msg, call))), [])
    msg._cache[READS_CACHE_KEY] = (call, parsers, blocks)
    return blocks


def _reads(history: list[Message], parsers: Sequence[ReadParser]) -> list[tuple[int, list[ReadBlock]]]:
    reads: list[tuple[int, list[ReadBlock]]] = []
    for i, (msg, call) in enumerate(zip(history, _owning_calls(history), strict=True)):
        if msg.preserve_verbatim or msg.is_summary:
            continue
        if msg.role != "tool" and not (msg.role == "user" and msg.agent_feedback):
            continue
        blocks = _parsed(msg, call, parsers)
        if blocks:
            reads.append((i, blocks))
    return reads


def _superseded(
    reads: Sequence[tuple[int, list[ReadBlock]]], messages: Sequence[Message], archive: Archive
) -> tuple[dict[int, Message], int]:
    """The stubs of the reads (in position order) that a later one supersedes, and the chars cleared."""
    later: dict[str, list[ReadBlock]] = {}
    stubs: dict[int, Message] = {}
    cleared = 0
    for i, blocks in reversed(reads):
        msg = messages[i]
        if all(any(c.covers(b) for c in later.get(b.path, ())) for b in blocks):
            key = archive_message(archive, msg)
            paths = PATH_SEPARATOR.join(dict.fromkeys(b.path for b in blocks))
            stub = SUPERSEDED_TEXT % (paths, len(msg.content))
            stub += recall_suffixes([key, *extract_keys(msg.content)])
            if len(stub) < len(msg.content):
                stubs[i] = msg.with_content(stub)
                cleared += len(msg.content) - len(stub)
                continue
        for block in blocks:
            later.setdefault(block.path, []).append(block)
    return stubs, cleared


def dedup_repeated_reads(
    history: list[Message],
    *,
    archive: Archive,
    parsers: Sequence[ReadParser] = DEFAULT_READ_PARSERS,
) -> tuple[list[Message], DedupReport]:
    """Replace reads superseded by a later read of the same file with recall stubs.

    A read (one message, possibly several blocks) is superseded when each of
    its blocks is covered by a block of one later read, and only when its stub
    is shorter than it (a tiny read is left as it is). Returns a new list (the
    input itself when nothing changed); stubs keep ``tool_call_id``, ``name``
    and flags. Idempotent; the input is never mutated.
    """
    stubs, cleared = _superseded(_reads(history, parsers), history, archive)
    if not stubs:
        return history, DedupReport()
    out = list(history)
    for i, stub in stubs.items():
        out[i] = stub
    return out, DedupReport(reads_superseded=len(stubs), chars_cleared=cleared)


# -- the incremental pass ------------------------------------------------------------------------
DEDUP_LISTENER = "dedup"


class _ReadIndex:
    """Dedup's listener: the reads of the history by position and by path, and the paths changed since
    the last step (a read added, replaced or gone)."""

    def __init__(self, parsers: Sequence[ReadParser]) -> None:
        self.parsers = parsers
        self.reads: dict[int, list[ReadBlock]] = {}
        self.by_path: dict[str, set[int]] = {}
        self.dirty: set[str] = set()

    def truncated(self, index: HistoryIndex, length: int) -> None:
        for position in [p for p in self.reads if p >= length]:
            self._forget(position)

    def replaced(self, index: HistoryIndex, position: int, old: Message) -> None:
        self._forget(position)
        self.appended(index, position)

    def appended(self, index: HistoryIndex, position: int) -> None:
        msg = index.messages[position]
        if msg.preserve_verbatim or msg.is_summary:
            return
        if msg.role != "tool" and not (msg.role == "user" and msg.agent_feedback):
            return
        blocks = _parsed(msg, _owning_call(index, position), self.parsers)
        if blocks:
            self.reads[position] = blocks
            for block in blocks:
                self.by_path.setdefault(block.path, set()).add(position)
                self.dirty.add(block.path)

    def _forget(self, position: int) -> None:
        for block in self.reads.pop(position, ()):
            positions = self.by_path.get(block.path)
            if positions is not None:
                positions.discard(position)
                if not positions:
                    del self.by_path[block.path]
            self.dirty.add(block.path)

    def affected(self) -> list[int]:
        """Positions of the reads whose fate may have changed: those sharing a path with a changed
        read, closed over reads of several paths (a read's fate depends only on reads of its paths)."""
        paths, frontier, positions = set(self.dirty), list(self.dirty), set()
        while frontier:
            for position in self.by_path.get(frontier.pop(), ()):
                if position in positions:
                    continue
                positions.add(position)
                for block in self.reads[position]:
                    if block.path not in paths:
                        paths.add(block.path)
                        frontier.append(block.path)
        return sorted(positions)


def _owning_call(index: HistoryIndex, position: int) -> ToolCall | None:
    """The call a message answers: the first of its id in the assistant that opens its segment."""
    call_id = index.messages[position].tool_call_id
    segment = index.segment_of[position]
    if call_id is None or not segment:
        return None
    owner = index.messages[index.assistants[segment - 1]]
    return next((call for call in owner.tool_calls if call.id == call_id), None)


def dedup_step(
    history: list[Message],
    state: TurnState,
    *,
    archive: Archive,
    parsers: Sequence[ReadParser] = DEFAULT_READ_PARSERS,
) -> tuple[list[Message], DedupReport, TurnState]:
    """:func:`dedup_repeated_reads` at the cost of what changed: the same history and report, and the
    successor of ``state``.

    The history a step leaves has no read left to supersede, so only reads that
    share a path with a read added, replaced or removed since can change fate.
    """
    index = state.begin(history)
    reads = index.listener(DEDUP_LISTENER, tuple(parsers), lambda: _ReadIndex(parsers))
    affected = [(position, reads.reads[position]) for position in reads.affected()]
    stubs, cleared = _superseded(affected, index.messages, archive)
    out = history
    if stubs:
        out = list(history)
        for i, stub in stubs.items():
            out[i] = stub
            index.replace(i, stub)
    reads.dirty.clear()  # what this step left is settled: the stubs it made are no reads
    if not stubs:
        return history, DedupReport(), state.successor()
    return out, DedupReport(reads_superseded=len(stubs), chars_cleared=cleared), state.successor()
