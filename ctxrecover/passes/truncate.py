"""Truncation building blocks: head/tail cuts, tool-block snapping, drop-and-archive.

Used by planned compaction Level 3 (:func:`emergency_truncate`, SPEC §5) and by
the recovery ladder (:func:`cap_assistant_messages` for Level 1,
:func:`keep_last` for Levels 2 and 3, SPEC §6). Every function is pure: it
returns a new history (or the input list itself when nothing changes) and a
report, and stores whatever it cuts in the archive *before* cutting, leaving a
``<<ccr:KEY>>`` marker in the history so ``@recall`` brings it back.

>>> from ctxrecover.archive import MemoryArchive
>>> truncate_head_tail("alpha beta gamma delta epsilon zeta", 34)
'alpha \\n... [truncated] ...\\nzeta'
>>> history = [Message.system("rules"), Message.user("a"), Message.assistant("b"),
...            Message.user("c"), Message.assistant("d")]
>>> kept, report = keep_last(history, 2, archive=MemoryArchive())
>>> [m.content for m in kept][-2:], report.messages_dropped
(['c', 'd'], 2)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from operator import attrgetter, countOf

from ctxrecover.archive import Archive, archive_message, archive_range, marker, render_transcript
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message
from ctxrecover.passes.cuts import head_end, tail_start
from ctxrecover.passes.facts import HistoryFacts, leading_system_count

__all__ = [
    "CONTEXT_COMPACTED_NOTICE",
    "CONTEXT_TRUNCATED_NOTICE",
    "CapReport",
    "DROPPED_BY_RECOVERY_NOTE",
    "DROPPED_TRANSCRIPT_NOTE",
    "EmergencyReport",
    "KeepLastReport",
    "RECALL_SUFFIX",
    "TRUNCATION_SEPARATOR",
    "VERBATIM_RESULT_HEADER",
    "cap_assistant_messages",
    "emergency_truncate",
    "keep_last",
    "leading_system_count",
    "recall_suffix",
    "recall_suffix_key",
    "recent_start",
    "render_transcript",
    "snap_to_tool_boundary",
    "truncate_head_tail",
]

TRUNCATION_SEPARATOR = "\n... [truncated] ...\n"
RECALL_SUFFIX = "\n[full content recoverable via @recall {marker}]"
CONTEXT_TRUNCATED_NOTICE = (
    "[CONTEXT TRUNCATED: %d messages removed due to context window limit. Recent context preserved below.]"
)
DROPPED_TRANSCRIPT_NOTE = "\n[full transcript of the dropped messages recoverable via @recall {marker}]"
CONTEXT_COMPACTED_NOTICE = (
    "[Context was automatically compacted due to size limits. Previous conversation history "
    "has been summarized. Continue from where you left off.]"
)
DROPPED_BY_RECOVERY_NOTE = (
    "[full transcript of the messages dropped by context recovery recoverable via @recall {marker}]"
)
VERBATIM_RESULT_HEADER = "[recalled original — tool result {id}, kept verbatim through compaction]\n"

DEFAULT_ASSISTANT_CAP = 5000  # recovery Level 1
CAP_HEAD_RATIO = 0.75
MIN_CAP_CHARS = 200  # room for a head, a tail, the separator and the recall marker

_ROLE = attrgetter("role")
_RECALL_SUFFIX_RE = re.compile(r"\n\[full content recoverable via @recall <<ccr:([0-9a-f]{16})>>\]\Z")


def truncate_head_tail(
    text: str,
    limit: int,
    *,
    head_ratio: float = CAP_HEAD_RATIO,
    separator: str = TRUNCATION_SEPARATOR,
) -> str:
    """Cut ``text`` to at most ``limit`` chars, keeping its head and tail around ``separator``.

    ``head_ratio`` of the room for kept chars goes to the head, the rest to
    the tail; each part is snapped to a line or word boundary, never inside a
    word (:mod:`ctxrecover.passes.cuts`), so it may keep a little less.
    A ``%d`` in ``separator`` becomes the number of omitted chars (sized for the
    widest possible count, so the bound holds). Text within the limit is
    returned unchanged; the result is at most ``limit`` long whenever ``limit``
    is at least the separator's length (below that, the separator alone).
    """
    if limit < 0:
        raise ConfigError(f"truncate_head_tail needs limit >= 0, got {limit}")
    if not 0.0 <= head_ratio <= 1.0:
        raise ConfigError(f"truncate_head_tail needs 0 <= head_ratio <= 1, got {head_ratio}")
    if len(text) <= limit:
        return text
    counted = "%d" in separator
    widest = separator.replace("%d", str(len(text))) if counted else separator
    keep = max(0, limit - len(widest))
    head_room = int(keep * head_ratio)
    head = head_end(text, head_room)
    tail = tail_start(text, keep - head_room, head)
    sep = separator.replace("%d", str(tail - head)) if counted else separator
    return text[:head] + sep + text[tail:]


def recall_suffix(key: str) -> str:
    """The line appended to a cut message: ``\\n[full content recoverable via @recall <<ccr:KEY>>]``."""
    return RECALL_SUFFIX.format(marker=marker(key))


def recall_suffix_key(text: str) -> str | None:
    """The key of the :func:`recall_suffix` that ends ``text``, or ``None`` (a cut message's tell)."""
    found = _RECALL_SUFFIX_RE.search(text)
    return found.group(1) if found else None


def recent_start(history: Sequence[Message], floor: int, keep_recent: int) -> int:
    """Index where the last ``keep_recent`` non-system messages start, snapped to a tool block."""
    start = len(history)
    remaining = keep_recent
    while remaining > 0 and start > floor:
        start -= 1
        if history[start].role != "system":
            remaining -= 1
    return snap_to_tool_boundary(history, start)


def snap_to_tool_boundary(history: Sequence[Message], index: int) -> int:
    """Move a cut index back so the kept tail never starts inside a tool block.

    If the messages from ``index`` up to the next assistant message include a
    ``tool`` result, the cut moves back to the assistant message that owns the
    block (the last assistant before ``index``, when it has tool calls), so no
    kept result loses its call. Otherwise ``index`` is returned unchanged.
    """
    if index <= 0 or index >= len(history):
        return index
    for msg in islice(history, index, None):
        if msg.role == "assistant":
            return index
        if msg.role == "tool":
            break
    else:
        return index
    for i in range(index - 1, -1, -1):
        if history[i].role == "assistant":
            return i if history[i].tool_calls else index
    return index


def _cut_with_marker(msg: Message, cap: int, archive: Archive) -> Message:
    """``msg`` cut to ``cap`` chars (head ¾ + tail), original archived, recall marker appended."""
    key = archive_message(archive, msg)
    suffix = recall_suffix(key)
    body = truncate_head_tail(msg.content, cap - len(suffix))
    return msg.replace(content=body + suffix, preserve_verbatim=False)


def _downgrade_verbatim(msg: Message) -> Message:
    """A verbatim tool result re-attached without its call becomes a ``user`` message."""
    if msg.role != "tool":
        return msg
    header = VERBATIM_RESULT_HEADER.format(id=msg.tool_call_id or "?")
    return Message.user(header + msg.content, images=msg.images, preserve_verbatim=True, agent_feedback=True)


# -- compaction Level 3 -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EmergencyReport:
    """What :func:`emergency_truncate` did.

    ``archive_key`` addresses the dropped range's entry, which ``@recall``
    expands to its rendered transcript (``None`` when nothing was dropped).
    """

    messages_dropped: int = 0
    verbatim_kept: int = 0
    archive_key: str | None = None


def emergency_truncate(
    history: list[Message], keep_recent: int, *, archive: Archive
) -> tuple[list[Message], EmergencyReport]:
    """Compaction Level 3: floor + truncation notice + the last ``keep_recent`` messages.

    The tail holds the last ``keep_recent`` non-system messages, its start
    snapped back to a tool-block boundary. The dropped range is archived first
    as one range entry (:func:`~ctxrecover.archive.archive_range`, recalled as
    the rendered transcript) whose marker rides in the notice
    (:data:`CONTEXT_TRUNCATED_NOTICE` + :data:`DROPPED_TRANSCRIPT_NOTE`).
    Verbatim messages of the range are re-attached after the notice (a verbatim
    tool result as a ``user`` message), system messages of the range join the
    floor. Returns the input list itself when there is nothing to drop.
    """
    if keep_recent < 0:
        raise ConfigError(f"emergency_truncate needs keep_recent >= 0, got {keep_recent}")
    floor = leading_system_count(history)
    start = recent_start(history, floor, keep_recent)
    segment = history[floor:start]
    aside = [m for m in segment if m.role == "system" or m.preserve_verbatim]  # usually none
    systems = [m for m in aside if m.role == "system"]
    verbatim = [m for m in aside if m.role != "system"]
    dropped = [m for m in segment if m.role != "system" and not m.preserve_verbatim] if aside else segment
    if not dropped:
        return history, EmergencyReport(verbatim_kept=len(verbatim))
    key = archive_range(archive, dropped)
    notice = Message.user(
        CONTEXT_TRUNCATED_NOTICE % len(dropped) + DROPPED_TRANSCRIPT_NOTE.format(marker=marker(key)),
        is_summary=True,
        summary_of=len(dropped),
    )
    result = [
        *history[:floor],
        *systems,
        notice,
        *(_downgrade_verbatim(m) for m in verbatim),
        *history[start:],
    ]
    return result, EmergencyReport(
        messages_dropped=len(dropped), verbatim_kept=len(verbatim), archive_key=key
    )


# -- recovery Levels 1–3 ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class CapReport:
    """What :func:`cap_assistant_messages` cut."""

    messages_capped: int = 0
    chars_saved: int = 0


def cap_assistant_messages(
    history: list[Message],
    max_chars: int = DEFAULT_ASSISTANT_CAP,
    *,
    archive: Archive,
    shed_chars: int | None = None,
) -> tuple[list[Message], CapReport]:
    """Recovery Level 1: cut assistant messages over ``max_chars`` to head ¾ + tail.

    The original is archived and the cut text (at most ``max_chars``, marker
    included) ends with :func:`recall_suffix`. Verbatim messages are left whole.
    With ``shed_chars``, messages are cut oldest first only until that many chars
    are saved (the retry that fills the cap, SPEC §12); without it, every one over the cap.
    Returns the input list itself when nothing is over the cap.
    """
    if max_chars < MIN_CAP_CHARS:
        raise ConfigError(
            f"cap_assistant_messages needs max_chars >= {MIN_CAP_CHARS} so a cut message keeps "
            f"its head, tail and recall marker (got {max_chars})"
        )
    result: list[Message] | None = None
    saved = 0
    capped = 0
    for i, msg in enumerate(history):
        if shed_chars is not None and saved >= shed_chars:
            break
        if msg.role != "assistant" or msg.preserve_verbatim or len(msg.content) <= max_chars:
            continue
        if result is None:
            result = list(history)
        result[i] = _cut_with_marker(msg, max_chars, archive)
        saved += len(msg.content) - len(result[i].content)
        capped += 1
    if result is None:
        return history, CapReport()
    return result, CapReport(messages_capped=capped, chars_saved=saved)


@dataclass(frozen=True, slots=True)
class KeepLastReport:
    """What :func:`keep_last` did.

    ``recall_note`` is the exact user-visible note
    (:data:`DROPPED_BY_RECOVERY_NOTE`) inserted after the system messages, or
    ``None`` when nothing was dropped; ``archive_key`` is its entry.
    """

    messages_dropped: int = 0
    messages_capped: int = 0
    notice_inserted: bool = False
    recall_note: str | None = None
    archive_key: str | None = None


def keep_last(
    history: list[Message],
    n: int,
    *,
    archive: Archive,
    per_message_cap: int | None = None,
    facts: HistoryFacts | None = None,
) -> tuple[list[Message], KeepLastReport]:
    """Recovery Levels 2–3: every system message + the last ``n`` non-system messages.

    Leading non-user messages of the kept window are dropped too, so the
    conversation after the system messages starts with a user message (run
    pairing repair afterwards). Dropped messages are archived first as one
    range entry (recalled as their rendered transcript), and a separate ``user`` message carrying
    :data:`DROPPED_BY_RECOVERY_NOTE` is inserted right after the system
    messages (real user text is never edited). With ``per_message_cap`` each
    kept non-system message over the cap is cut to it (head ¾ + tail, original
    archived, recall marker appended, verbatim flag cleared). When no
    non-system message survives, :data:`CONTEXT_COMPACTED_NOTICE` is inserted.
    System messages keep their order and are gathered at the front. ``facts`` of
    ``history`` (:mod:`ctxrecover.passes.facts`), when they describe it, say where its
    system messages are without counting them and hand what archiving the dropped range
    stores.
    """
    if n < 2:
        raise ConfigError(
            f"keep_last needs n >= 2 so the history can still start with a user message (got {n})"
        )
    if per_message_cap is not None and per_message_cap < MIN_CAP_CHARS:
        raise ConfigError(
            f"keep_last needs per_message_cap >= {MIN_CAP_CHARS} (or None) so a cut message keeps "
            f"its head, tail and recall marker (got {per_message_cap})"
        )
    known = facts if facts is not None and facts.describes(history) else None
    if known is not None:
        leading, system_count = known.leading_systems, known.system_count
    else:
        leading, system_count = leading_system_count(history), countOf(map(_ROLE, history), "system")
    if system_count == leading:  # the usual case: slices, no per-message test
        systems, others = history[:leading], history[leading:]
    else:
        systems = [m for m in history if m.role == "system"]
        others = [m for m in history if m.role != "system"]
        known = None  # the dropped messages are not one range of the history
    start = max(0, len(others) - n)
    while start < len(others) and others[start].role != "user":
        start += 1
    dropped, kept = others[:start], others[start:]

    capped = 0
    if per_message_cap is not None:
        for i, msg in enumerate(kept):
            if len(msg.content) > per_message_cap:
                kept[i] = _cut_with_marker(msg, per_message_cap, archive)
                capped += 1

    note: str | None = None
    key: str | None = None
    inserted: list[Message] = []
    if dropped:
        parts = None if known is None else known.range_parts(leading, leading + start)
        key = archive_range(archive, dropped, parts=parts)
        note = DROPPED_BY_RECOVERY_NOTE.format(marker=marker(key))
        inserted.append(Message.user(note, is_summary=True, summary_of=len(dropped)))
    notice = not kept
    if notice:
        inserted.append(Message.user(CONTEXT_COMPACTED_NOTICE))
    report = KeepLastReport(
        messages_dropped=len(dropped),
        messages_capped=capped,
        notice_inserted=notice,
        recall_note=note,
        archive_key=key,
    )
    result = [*systems, *inserted, *kept]
    if len(result) == len(history) and all(a is b for a, b in zip(result, history, strict=True)):
        return history, report
    return result, report
