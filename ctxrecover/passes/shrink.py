"""Shrink content: the last resort of planned compaction Level 3 (SPEC §5).

When dropping whole messages is not enough (a short history of a few huge tool
results is exactly what trips proxy caps), the largest message is cut, again
and again, until the history fits. Each cut message is archived first and
keeps a recall marker in its tail, so even this step loses nothing.

>>> from ctxrecover.archive import MemoryArchive
>>> history = [Message.system("rules"), Message.user("x" * 3000)]
>>> shrunk, report = shrink_to_budget(history, 1000, archive=MemoryArchive())
>>> len(shrunk[1].content) <= 1000 - len("rules"), report.reached_budget
(True, True)
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from ctxrecover.archive import Archive
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message
from ctxrecover.passes.truncate import recall_suffix, recall_suffix_key, truncate_head_tail
from ctxrecover.sizes import weight

__all__ = ["SHRINK_SEPARATOR", "ShrinkReport", "shrink_to_budget"]

SHRINK_SEPARATOR = "\n\n... [%d chars omitted for context efficiency] ...\n\n"
SHRINK_MIN_CHARS = 400  # a message is never cut below this
SHRINK_SLACK = 96  # aim below the deficit so one cut lands within budget
SHRINK_HEAD_RATIO = 2 / 3
MIN_FLOOR_CHARS = 200  # room for a head, a tail, the separator and the recall marker


@dataclass(frozen=True, slots=True)
class ShrinkReport:
    """What :func:`shrink_to_budget` did: distinct messages cut, measure saved, whether it fits."""

    messages_shrunk: int = 0
    chars_saved: int = 0
    reached_budget: bool = True


def _shrink_one(content: str, target: int, archive: Archive) -> str:
    """``content`` cut to at most ``target`` chars with the recall marker at its end."""
    key = recall_suffix_key(content)
    if key is not None and key in archive:
        # cut before: the original is archived, the re-cut text is a part of it
        suffix = recall_suffix(key)
        body = content[: len(content) - len(suffix)]
    else:
        body, suffix = content, recall_suffix(archive.put(content))
    cut = truncate_head_tail(
        body, target - len(suffix), head_ratio=SHRINK_HEAD_RATIO, separator=SHRINK_SEPARATOR
    )
    return cut + suffix


def shrink_to_budget(
    history: list[Message],
    budget_chars: int,
    *,
    archive: Archive,
    min_chars: int = SHRINK_MIN_CHARS,
    measure: Callable[[Message], int] = weight,
) -> tuple[list[Message], ShrinkReport]:
    """Cut the largest non-system, non-verbatim message until ``measure`` totals fit the budget.

    Each round takes the longest content over ``min_chars`` and cuts it to
    ``max(min_chars, len − excess − 96)`` chars: head ⅔ and tail ⅓ around
    :data:`SHRINK_SEPARATOR`, ending with the recall marker of its archived
    original (a message cut by an earlier round keeps its marker; its original
    is already archived). Stops when the total is within budget, when nothing
    is left to cut (tool-call arguments and images cannot be cut) or when a cut
    makes no progress. O(n log n): a heap of lengths, the total updated per
    cut. Returns the input list itself when it already fits.
    """
    if budget_chars < 0:
        raise ConfigError(f"shrink_to_budget needs budget_chars >= 0, got {budget_chars}")
    if min_chars < MIN_FLOOR_CHARS:
        raise ConfigError(
            f"shrink_to_budget needs min_chars >= {MIN_FLOOR_CHARS} so a cut message keeps its "
            f"head, tail, omission notice and recall marker (got {min_chars})"
        )
    sizes = [measure(m) for m in history]
    total = sum(sizes)
    if total <= budget_chars:
        return history, ShrinkReport()
    before = total
    result = list(history)
    heap = [
        (-len(m.content), i)
        for i, m in enumerate(history)
        if m.role != "system" and not m.preserve_verbatim and len(m.content) > min_chars
    ]
    heapq.heapify(heap)
    shrunk: set[int] = set()
    while total > budget_chars and heap:
        neg_length, i = heapq.heappop(heap)
        target = max(min_chars, -neg_length - (total - budget_chars) - SHRINK_SLACK)
        candidate = result[i].with_content(_shrink_one(result[i].content, target, archive))
        new_size = measure(candidate)
        if new_size >= sizes[i]:
            break
        result[i] = candidate
        total -= sizes[i] - new_size
        sizes[i] = new_size
        shrunk.add(i)
        if len(candidate.content) > min_chars:
            heapq.heappush(heap, (-len(candidate.content), i))
    return result, ShrinkReport(
        messages_shrunk=len(shrunk),
        chars_saved=before - total,
        reached_budget=total <= budget_chars,
    )
