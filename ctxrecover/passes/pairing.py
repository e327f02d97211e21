"""Tool-call / tool-result pairing repair (SPEC §3.1).

Pairing is positional and block-scoped, because providers reuse ids such as
``web_fetch:0`` across turns: an assistant message with tool calls owns the
run of ``tool`` messages after it, up to the next assistant message. Repair
claims, for each call, the first unclaimed result of its own block, emits the
results right after the call in call order (moving any interposed message
after them), answers unanswered calls with a synthetic error result and
removes results that no call claims. With an archive, what it removes (orphan
results, pruned calls) is archived first, one range per tool block, and a
``user`` note carrying its recall marker follows that block
(:data:`PAIRING_REMOVED_NOTE`): nothing removed is lost from the history.

A valid history is returned unchanged — the very same list object — after an
O(n) validation pass, so the common case costs one scan and no copies.

>>> from ctxrecover.messages import Message, ToolCall
>>> h = [Message.user("go"), Message.assistant(tool_calls=[ToolCall("a", "ls")])]
>>> fixed, report = repair_pairing(h)
>>> report.synthetic_results, fixed[-1].error_code
(1, 'missing_result')
>>> repair_pairing(fixed)[0] is fixed
True
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxrecover.archive import Archive, archive_range, marker
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.history_index import HistoryIndex, TurnState

__all__ = [
    "MISSING_RESULT_CODE",
    "MISSING_RESULT_TEXT",
    "PAIRING_REMOVED_NOTE",
    "PairingReport",
    "pairing_step",
    "pairing_valid",
    "repair_pairing",
    "validate_pairing",
]

MISSING_RESULT_TEXT = (
    "[Tool result missing — the tool execution was interrupted or failed silently. "
    "Do NOT retry this tool call. Analyze what went wrong and try a different approach.]"
)
MISSING_RESULT_CODE = "missing_result"
# Decision beyond the reference (SPEC §3.1 only says "removed"): what repair removes stays recallable.
PAIRING_REMOVED_NOTE = (
    "[{count} unpaired tool item(s) removed by pairing repair — "
    "full transcript recoverable via @recall {marker}]"
)


@dataclass(frozen=True, slots=True)
class PairingReport:
    """What :func:`repair_pairing` changed.

    ``archived_keys`` are the CCR keys of the ranges holding removed orphan
    results and pruned calls (only when an archive was given; each one's marker
    is in a :data:`PAIRING_REMOVED_NOTE` of the repaired history).
    """

    synthetic_results: int = 0
    relocated: int = 0
    orphans_removed: int = 0
    duplicate_calls_pruned: int = 0
    empty_ids_pruned: int = 0
    archived_keys: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """True when the repair rewrote anything."""
        return bool(
            self.synthetic_results
            or self.relocated
            or self.orphans_removed
            or self.duplicate_calls_pruned
            or self.empty_ids_pruned
        )


def validate_pairing(history: list[Message]) -> bool:
    """True when every call is answered exactly once, right after its assistant message.

    One O(n) scan. Results adjacent to their call in any order are valid; calls
    with empty or repeated ids (within one message), missing results, extra
    results and ``tool`` messages not directly after their calls are not.
    """
    pending: set[str] = set()  # the open block's call ids not answered yet
    for msg in history:
        if msg.role == "tool":
            call_id = msg.tool_call_id
            if call_id is None or call_id not in pending:  # an extra result, or not right after its call
                return False
            pending.remove(call_id)
        elif pending:  # a block ended with calls unanswered
            return False
        elif msg.tool_calls:  # only assistant messages carry calls (Message checks it)
            calls = msg.tool_calls
            pending = {call.id for call in calls}
            if "" in pending or len(pending) != len(calls):
                return False
    return not pending


def _synthetic_result(call: ToolCall) -> Message:
    return Message.tool(
        call.id, MISSING_RESULT_TEXT, name=call.name, is_error=True, error_code=MISSING_RESULT_CODE
    )


class _Repair:
    """Mutable tallies of one repair run (local to :func:`repair_pairing`)."""

    def __init__(self, archive: Archive | None) -> None:
        self.archive = archive
        self.out: list[Message] = []
        self.synthetic = self.relocated = self.orphans = self.duplicates = self.empty_ids = 0
        self.keys: list[str] = []
        self.removed: list[Message] = []  # since the last note: orphans, and pruned calls as a message

    def drop_orphan(self, msg: Message) -> None:
        self.orphans += 1
        self.removed.append(msg)

    def note_removed(self) -> None:
        """Archive what was removed since the last note and leave a note with its marker here."""
        if self.archive is not None and self.removed:
            key = archive_range(self.archive, self.removed)
            self.keys.append(key)
            count = sum(len(m.tool_calls) or 1 for m in self.removed)
            note = PAIRING_REMOVED_NOTE.format(count=count, marker=marker(key))
            self.out.append(Message.user(note, is_summary=True, summary_of=count))
        self.removed = []

    def prune_calls(self, msg: Message) -> Message:
        calls: list[ToolCall] = []
        pruned: list[ToolCall] = []
        seen: set[str] = set()
        for call in msg.tool_calls:
            if not call.id:
                self.empty_ids += 1
                pruned.append(call)
            elif call.id in seen:
                self.duplicates += 1
                pruned.append(call)
            else:
                seen.add(call.id)
                calls.append(call)
        if not pruned:
            return msg
        self.removed.append(Message.assistant("", tool_calls=pruned))
        return msg.replace(tool_calls=tuple(calls))

    def block(self, owner: Message, region: list[Message]) -> None:
        """Emit ``owner`` and its repaired block (``region`` = messages up to the next assistant)."""
        owner = self.prune_calls(owner)
        self.out.append(owner)
        first_interposed = next((k for k, m in enumerate(region) if m.role != "tool"), len(region))
        claimed: set[int] = set()
        for call in owner.tool_calls:
            found = next(
                (
                    k
                    for k, m in enumerate(region)
                    if m.role == "tool" and k not in claimed and m.tool_call_id == call.id
                ),
                None,
            )
            if found is None:
                self.synthetic += 1
                self.out.append(_synthetic_result(call))
                continue
            claimed.add(found)
            if found > first_interposed:
                self.relocated += 1
            self.out.append(region[found])
        for k, msg in enumerate(region):
            if msg.role != "tool":
                self.out.append(msg)
            elif k not in claimed:
                self.drop_orphan(msg)
        self.note_removed()

    def report(self) -> PairingReport:
        return PairingReport(
            synthetic_results=self.synthetic,
            relocated=self.relocated,
            orphans_removed=self.orphans,
            duplicate_calls_pruned=self.duplicates,
            empty_ids_pruned=self.empty_ids,
            archived_keys=tuple(dict.fromkeys(self.keys)),
        )


def repair_pairing(
    history: list[Message], *, archive: Archive | None = None
) -> tuple[list[Message], PairingReport]:
    """Make every tool call answered exactly once, right after its assistant message.

    Returns ``history`` itself when it is already valid. Otherwise a new list:
    calls with empty or duplicate ids (within one message) are pruned, each
    call claims the first unclaimed result of its block (results behind an
    interposed message are relocated before it), unanswered calls get a
    synthetic ``missing_result`` error and unclaimed results are removed.
    With ``archive``, what is removed is archived first and a
    :data:`PAIRING_REMOVED_NOTE` (a ``user`` message with its recall marker)
    follows the block it was removed from. Idempotent; the input is never
    mutated.
    """
    if validate_pairing(history):
        return history, PairingReport()
    repair = _Repair(archive)
    n = len(history)
    i = 0
    while i < n:
        msg = history[i]
        if msg.role == "assistant":
            end = i + 1
            while end < n and history[end].role != "assistant":
                end += 1
            repair.block(msg, history[i + 1 : end])
            i = end
            continue
        if msg.role == "tool":
            repair.drop_orphan(msg)
        else:
            repair.note_removed()  # orphans before any assistant: the note takes their place
            repair.out.append(msg)
        i += 1
    repair.note_removed()
    return repair.out, repair.report()


# -- the incremental pass ------------------------------------------------------------------------
PAIRING_LISTENER = "pairing"


def _segment_valid(messages: list[Message], span: range, opened: bool) -> bool:
    """:func:`validate_pairing` for one segment: ``span`` starts with its assistant when ``opened``."""
    start = span.start
    if opened:
        owner = messages[start]
        start += 1
        if owner.tool_calls:
            pending = {call.id for call in owner.tool_calls}
            if "" in pending or len(pending) != len(owner.tool_calls):
                return False
            while start < span.stop and messages[start].role == "tool":
                call_id = messages[start].tool_call_id
                if call_id is None or call_id not in pending:
                    return False
                pending.remove(call_id)
                start += 1
            if pending:
                return False
    return all(messages[i].role != "tool" for i in range(start, span.stop))


class _PairingIndex:
    """Pairing's listener: the segments that fail validation, and those changed since the last look.

    A history is valid exactly when each segment is: its assistant's calls have
    distinct non-empty ids answered right after it, and no other ``tool``
    message sits in it (see :func:`validate_pairing`).
    """

    def __init__(self) -> None:
        self.dirty: set[int] = set()
        self.invalid: set[int] = set()

    def truncated(self, index: HistoryIndex, length: int) -> None:
        first = index.segment_of[length]
        self.invalid = {s for s in self.invalid if s < first}
        self.dirty = {s for s in self.dirty if s < first}
        self.dirty.add(first)

    def replaced(self, index: HistoryIndex, position: int, old: Message) -> None:
        self.dirty.add(index.segment_of[position])

    def appended(self, index: HistoryIndex, position: int) -> None:
        self.dirty.add(index.segment_of[position])

    def valid(self, index: HistoryIndex) -> bool:
        for segment in self.dirty:
            span = index.segment_span(segment)
            if span and not _segment_valid(index.messages, span, opened=segment > 0):
                self.invalid.add(segment)
            else:
                self.invalid.discard(segment)
        self.dirty.clear()
        return not self.invalid


def pairing_valid(index: HistoryIndex) -> bool:
    """:func:`validate_pairing` of ``index``'s history, at the cost of the segments changed since the
    last look (validity is kept per segment on the index)."""
    return index.listener(PAIRING_LISTENER, None, _PairingIndex).valid(index)


def pairing_step(
    history: list[Message], state: TurnState, *, archive: Archive | None = None
) -> tuple[list[Message], PairingReport, TurnState]:
    """:func:`repair_pairing` at the cost of what changed: the same list and report, and the successor
    of ``state``. Validity is kept per segment, so a valid history costs the segments that changed;
    a malformed one is repaired as a whole (into a copy: the indexed history is left as it is)."""
    index = state.begin(history)
    if pairing_valid(index):
        return history, PairingReport(), state.successor()
    repaired, report = repair_pairing(history, archive=archive)
    return repaired, report, state.successor()
