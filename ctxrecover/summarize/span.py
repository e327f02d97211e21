"""Which messages a Level-2 summary replaces (SPEC §5), and the history it leaves.

The SPEC's segment is every message between the system floor and the last
``keep_recent`` (the cut snapped back to the assistant that owns a tool block).
:func:`summary_span` narrows it by the policy's ``summary_scope``:

- ``segment`` — the whole segment, earlier summaries included (they are fed to the
  summarizer as they are, and the new summary covers what they covered);
- ``incremental`` — earlier summaries at the head of the segment stay in the history as
  they are and only what came after them is summarized, until those summaries take more
  than ``summaries_budget_fraction`` of the budget (then they are summarized again with
  the new messages, so summaries never crowd out the conversation);
- ``target`` — incremental, and only the oldest messages needed to bring the history
  down to ``summary_target_ratio`` of the budget (hysteresis: the next compaction is many
  turns away, and a small overshoot costs a small summary, not the whole history).

Every span ends on a tool-block boundary and holds at least ``summary_min_messages``
messages to summarize, or there is no summary. :func:`assemble` puts the summary in
place of its span: system messages of the span before it, verbatim messages after it.

>>> from ctxrecover.messages import Message
>>> history = [Message.system("s"), *[Message.user(f"u{i}") for i in range(6)]]
>>> summary_span(history, keep_recent=2, scope="segment", min_messages=4)
(1, 5)
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message
from ctxrecover.passes.truncate import (
    VERBATIM_RESULT_HEADER,
    leading_system_count,
    recent_start,
    snap_to_tool_boundary,
)
from ctxrecover.policy import SUMMARY_SCOPES
from ctxrecover.sizes import total_weight, weight

__all__ = [
    "EXPECTED_SUMMARY_SHARE",
    "assemble",
    "covered",
    "recent_start",
    "split_span",
    "summary_span",
]

#: A summary is expected to weigh at most this share of what it replaces; a ``target`` span
#: frees enough that the history still reaches its target with a summary that large (one that
#: comes out larger and leaves the history over budget is followed by a second, incremental one).
EXPECTED_SUMMARY_SHARE = 0.25


def _summarized(msg: Message) -> bool:
    """Whether a message of a span goes into the summary (systems move before it, verbatim after it)."""
    return msg.role != "system" and not msg.preserve_verbatim


def _kept_head(history: Sequence[Message], floor: int, end: int) -> tuple[int, int]:
    """End of the run of earlier compaction products at the head of the segment, and their summaries' weight.

    The run holds system messages, summaries and the verbatim messages re-attached after
    them; it stops at an assistant with tool calls, so a tool block is never split.
    """
    index, summaries = floor, 0
    while index < end:
        msg = history[index]
        if msg.is_summary:
            summaries += weight(msg)
        elif not (msg.role == "system" or (msg.preserve_verbatim and not msg.tool_calls)):
            break
        index += 1
    return index, summaries


def summary_span(
    history: Sequence[Message],
    *,
    keep_recent: int,
    scope: str,
    min_messages: int,
    budget_chars: int | None = None,
    target_chars: int = 0,
    summaries_cap_chars: int = 0,
    overhead_chars: int = 0,
) -> tuple[int, int] | None:
    """``(start, end)``: ``history[start:end]`` is what the summary replaces, or None for no summary.

    None when the span would summarize fewer than ``min_messages`` messages, or when even
    an empty summary (its ``overhead_chars`` of framing only) in its place would leave the
    history over ``budget_chars`` (the recent messages alone are too large: a call that cannot
    succeed is not made; None for ``budget_chars`` skips that test, e.g. a guided ``/compact``).
    Earlier summaries are kept (``incremental``, ``target``) while they weigh at most
    ``summaries_cap_chars`` and the budget can be reached without them; a ``target`` span
    ends once the history is expected at ``target_chars``.
    """
    if scope not in SUMMARY_SCOPES:
        raise ConfigError(f"summary scope must be one of {', '.join(SUMMARY_SCOPES)}, got {scope!r}")
    floor = leading_system_count(history)
    end = recent_start(history, floor, keep_recent)
    total = total_weight(history)

    def reachable(start: int) -> bool:
        freed = sum(weight(m) for m in history[start:end] if _summarized(m))
        return budget_chars is None or total - freed + overhead_chars <= budget_chars

    start = floor
    if scope != "segment":
        head, summaries = _kept_head(history, floor, end)
        if summaries <= summaries_cap_chars and reachable(head):
            start = head
    if not reachable(start):
        return None
    if scope == "target":
        end = _target_end(history, start, end, total - target_chars + overhead_chars, min_messages)
    count = sum(1 for msg in history[start:end] if _summarized(msg))
    return (start, end) if count >= min_messages else None


def _target_end(history: Sequence[Message], start: int, end: int, excess: int, min_messages: int) -> int:
    """The first tool-block boundary after ``start`` where the oldest messages, once summarized,
    free ``excess`` chars with a summary of :data:`EXPECTED_SUMMARY_SHARE` of them; else ``end``."""
    freed = count = 0
    for index in range(start, end):
        msg = history[index]
        if _summarized(msg):
            freed += weight(msg)
            count += 1
        cut = index + 1
        if count >= min_messages and freed * (1 - EXPECTED_SUMMARY_SHARE) >= excess:
            if snap_to_tool_boundary(history, cut) == cut:
                return cut
    return end


def covered(messages: Sequence[Message]) -> int:
    """Messages a summary covers: earlier summaries count for what they covered."""
    return sum(m.summary_of if m.is_summary and m.summary_of > 0 else 1 for m in messages)


def _as_user_message(msg: Message) -> Message:
    """A verbatim tool result re-attached without its call, as a ``user`` message pairing keeps."""
    header = VERBATIM_RESULT_HEADER.format(id=msg.tool_call_id or "?")
    return Message.user(header + msg.content, images=msg.images, preserve_verbatim=True, agent_feedback=True)


def _reattach(verbatim: list[Message]) -> list[Message]:
    """Verbatim messages of a summarized span, in order; a result keeps the ``tool`` role
    only when its own call was re-attached right before it."""
    out: list[Message] = []
    open_calls: set[str] = set()
    for msg in verbatim:
        if msg.role == "tool":
            if msg.tool_call_id in open_calls:
                open_calls.discard(msg.tool_call_id)
                out.append(msg)
            else:
                out.append(_as_user_message(msg))
            continue
        open_calls = {call.id for call in msg.tool_calls}
        out.append(msg)
    return out


def split_span(span: Sequence[Message]) -> tuple[list[Message], list[Message], list[Message]]:
    """``(systems, summarized, verbatim)`` messages of a span, each in order."""
    systems = [m for m in span if m.role == "system"]
    verbatim = [m for m in span if m.role != "system" and m.preserve_verbatim]
    return systems, [m for m in span if _summarized(m)], verbatim


def assemble(history: Sequence[Message], start: int, end: int, summary: Message) -> list[Message]:
    """``history`` with ``summary`` in place of ``history[start:end]``: the span's system messages
    before it, its verbatim messages re-attached after it (SPEC §5)."""
    systems, _, verbatim = split_span(history[start:end])
    return [*history[:start], *systems, summary, *_reattach(verbatim), *history[end:]]
