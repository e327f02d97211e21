"""Tool-result budget: previews for oversized tool results (SPEC §3.2).

A result longer than ``max_result_chars`` becomes a preview — its head, an
omission line naming the CCR marker of the archived full text, and its tail.
When one turn's results (the run of ``tool`` messages owned by one assistant
message) still exceed ``turn_budget_chars``, the largest are shrunk first,
each to ``max(turn_floor, its length − the turn's excess)``.

Previews are byte-stable: identical content gives identical bytes, so
provider prompt caches survive. Content that already carries a marker (a
preview) is never re-archived or re-cut, which makes the pass idempotent.
Limits are arguments of each call; nothing process-wide is ever changed.

>>> from ctxrecover.archive import MemoryArchive
>>> from ctxrecover.messages import Message, ToolCall
>>> h = [Message.assistant(tool_calls=[ToolCall("t", "cat")]), Message.tool("t", "x" * 30_000)]
>>> out, report = enforce_tool_result_budget(h, archive=MemoryArchive())
>>> report.results_previewed, len(out[1].content) < 5_200
(1, True)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ctxrecover.archive import Archive, archive_message, has_marker, marker
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message
from ctxrecover.passes.cuts import head_end, tail_start
from ctxrecover.passes.history_index import HistoryIndex, TurnState

__all__ = [
    "DEFAULT_MAX_RESULT_CHARS",
    "DEFAULT_PREVIEW_HEAD",
    "DEFAULT_PREVIEW_TAIL",
    "DEFAULT_TURN_BUDGET_CHARS",
    "DEFAULT_TURN_FLOOR",
    "PREVIEW_OMISSION_RE",
    "PREVIEW_OMISSION_TEXT",
    "ToolBudgetReport",
    "enforce_tool_result_budget",
    "tool_budget_step",
    "tool_result_preview",
]

DEFAULT_TURN_BUDGET_CHARS = 200_000  # CHATCLI_TOOL_RESULT_BUDGET_CHARS
DEFAULT_MAX_RESULT_CHARS = 20_000  # CHATCLI_TOOL_RESULT_MAX_CHARS
DEFAULT_PREVIEW_HEAD = 4000
DEFAULT_PREVIEW_TAIL = 1000
DEFAULT_TURN_FLOOR = 5200

PREVIEW_OMISSION_TEXT = "\n\n... [%d chars omitted — full output saved to %s]\n\n"
PREVIEW_OMISSION_RE = re.compile(
    r"\n\n\.\.\. \[\d+ chars omitted — full output saved to <<ccr:([0-9a-f]{16})>>\]\n\n"
)


@dataclass(frozen=True, slots=True)
class ToolBudgetReport:
    """What :func:`enforce_tool_result_budget` did: previews made and characters saved."""

    results_previewed: int = 0
    chars_saved: int = 0

    @property
    def changed(self) -> bool:
        """True when at least one result became a preview."""
        return self.results_previewed > 0


def tool_result_preview(
    content: str, key: str, *, head: int = DEFAULT_PREVIEW_HEAD, tail: int = DEFAULT_PREVIEW_TAIL
) -> str:
    """The preview of ``content`` archived under ``key``: head, omission line, tail.

    The head (≤ ``head`` chars) ends after its last newline when that newline
    lies past half of it; the tail (≤ ``tail`` chars) starts after its first
    newline when that newline lies within its first half; otherwise each is
    cut at a word boundary, never inside a word (:mod:`ctxrecover.passes.cuts`).
    Deterministic.
    """
    end = head_end(content, head)
    head_text = content[:end]
    tail_text = content[tail_start(content, tail, end) :] if tail > 0 else ""
    omitted = len(content) - len(head_text) - len(tail_text)
    return head_text + PREVIEW_OMISSION_TEXT % (omitted, marker(key)) + tail_text


def _sized_preview(content: str, key: str, target: int, head: int, tail: int) -> str:
    """A preview of at most about ``target`` chars, head and tail in the ``head:tail`` ratio."""
    room = max(0, target - len(PREVIEW_OMISSION_TEXT % (len(content), marker(key))))
    head_room = room * head // (head + tail)
    return tool_result_preview(content, key, head=head_room, tail=room - head_room)


def _validate(turn_budget_chars: int, max_result_chars: int, head: int, tail: int, floor: int) -> None:
    for name, value in (
        ("turn_budget_chars", turn_budget_chars),
        ("max_result_chars", max_result_chars),
        ("preview_head", head),
        ("turn_floor", floor),
    ):
        if not isinstance(value, int) or value <= 0:
            raise ConfigError(f"enforce_tool_result_budget: {name} must be a positive int, got {value!r}")
    if not isinstance(tail, int) or tail < 0:
        raise ConfigError(f"enforce_tool_result_budget: preview_tail must be an int >= 0, got {tail!r}")
    if head + tail >= max_result_chars:
        raise ConfigError(
            "enforce_tool_result_budget: preview_head + preview_tail must be below max_result_chars "
            f"({head} + {tail} >= {max_result_chars}), or previews would not be shorter than the results"
        )


def _turns(history: list[Message]) -> list[list[int]]:
    """Indexes of the ``tool`` messages of each turn (the run owned by one assistant message)."""
    turns: list[list[int]] = [[]]
    for i, msg in enumerate(history):
        if msg.role == "assistant":
            turns.append([])
        elif msg.role == "tool":
            turns[-1].append(i)
    return [t for t in turns if t]


_Limits = tuple[int, int, int, int, int]  # turn budget, max result, preview head, preview tail, turn floor


def _archived(archive: Archive, msg: Message, content: str) -> str | None:
    """``archive.archive(content)``; the message's own content by its key memoized on the message."""
    if has_marker(content):
        return None
    return archive_message(archive, msg) if content is msg.content else archive.put(content)


def _budget_turn(
    history: Sequence[Message], turn: list[int], archive: Archive, limits: _Limits
) -> dict[int, str]:
    """The new contents of one turn's results (``turn``: their positions) that change."""
    turn_budget_chars, max_result_chars, preview_head, preview_tail, turn_floor = limits
    contents = {i: history[i].content for i in turn}

    def shrink(i: int, target: int | None) -> None:
        limit = max_result_chars if target is None else target
        if history[i].preserve_verbatim or len(contents[i]) <= limit:
            return
        key = _archived(archive, history[i], contents[i])
        if key is None:
            return
        if target is None:
            cut = tool_result_preview(contents[i], key, head=preview_head, tail=preview_tail)
        else:
            cut = _sized_preview(contents[i], key, target, preview_head, preview_tail)
        if len(cut) < len(contents[i]):
            contents[i] = cut

    for i in turn:
        shrink(i, None)
    total = sum(len(contents[i]) for i in turn)
    for i in sorted(turn, key=lambda j: (-len(contents[j]), j)):
        excess = total - turn_budget_chars
        if excess <= 0:
            break
        before = len(contents[i])
        shrink(i, max(turn_floor, before - excess))
        total -= before - len(contents[i])
    return {i: content for i, content in contents.items() if content is not history[i].content}


def enforce_tool_result_budget(
    history: list[Message],
    *,
    archive: Archive,
    turn_budget_chars: int = DEFAULT_TURN_BUDGET_CHARS,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    preview_head: int = DEFAULT_PREVIEW_HEAD,
    preview_tail: int = DEFAULT_PREVIEW_TAIL,
    turn_floor: int = DEFAULT_TURN_FLOOR,
) -> tuple[list[Message], ToolBudgetReport]:
    """Cap each tool result at ``max_result_chars`` and each turn at ``turn_budget_chars``.

    Oversized results are archived (``archive.archive``) and replaced by a
    preview carrying their marker; results that already carry a marker, and
    ``preserve_verbatim`` results, are left whole. Returns a new list (the
    input itself when nothing changed) and never mutates the input.
    """
    limits = (turn_budget_chars, max_result_chars, preview_head, preview_tail, turn_floor)
    _validate(*limits)
    changed: dict[int, str] = {}
    for turn in _turns(history):
        changed.update(_budget_turn(history, turn, archive, limits))
    if not changed:
        return history, ToolBudgetReport()
    out = list(history)
    for i, content in changed.items():
        out[i] = history[i].with_content(content)
    saved = sum(len(history[i].content) - len(content) for i, content in changed.items())
    return out, ToolBudgetReport(results_previewed=len(changed), chars_saved=saved)


# -- the incremental pass ------------------------------------------------------------------------
TOOL_BUDGET_LISTENER = "tool_budget"


class _PreviewIndex:
    """The tool-result budget's listener: each segment's previews, and the segments changed since.

    A segment's previews depend on its own tool results only, so a step
    recomputes the segments whose results changed; a preview that comes out the
    same is the very message object of the last step.
    """

    def __init__(self, limits: _Limits) -> None:
        self.limits = limits
        self.dirty: set[int] = set()
        self.segments: dict[int, list[int]] = {}  # segment → positions of its previews
        self.previews: dict[int, tuple[Message, Message]] = {}  # position → (original, preview)
        self.saved = 0

    def truncated(self, index: HistoryIndex, length: int) -> None:
        first = index.segment_of[length]
        for segment in [s for s in self.segments if s >= first]:
            self._drop(segment)
        self.dirty.add(first)

    def replaced(self, index: HistoryIndex, position: int, old: Message) -> None:
        self.appended(index, position)

    def appended(self, index: HistoryIndex, position: int) -> None:
        if index.messages[position].role == "tool":
            self.dirty.add(index.segment_of[position])

    def _drop(self, segment: int) -> dict[int, tuple[Message, Message]]:
        dropped = {p: self.previews.pop(p) for p in self.segments.pop(segment, ())}
        self.saved -= sum(len(old.content) - len(new.content) for old, new in dropped.values())
        return dropped

    def update(self, index: HistoryIndex, archive: Archive) -> None:
        """Recompute the previews of the segments changed since the last step."""
        messages = index.messages
        for segment in sorted(self.dirty):
            before = self._drop(segment)
            turn = [p for p in index.segment_span(segment) if messages[p].role == "tool"]
            changed = _budget_turn(messages, turn, archive, self.limits) if turn else {}
            for p, content in changed.items():
                previous = before.get(p)
                if previous is None or previous[0] is not messages[p] or previous[1].content != content:
                    previous = (messages[p], messages[p].with_content(content))
                self.previews[p] = previous
                self.saved += len(previous[0].content) - len(content)
            if changed:
                self.segments[segment] = list(changed)
        self.dirty.clear()


def tool_budget_step(
    history: list[Message],
    state: TurnState,
    *,
    archive: Archive,
    turn_budget_chars: int = DEFAULT_TURN_BUDGET_CHARS,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    preview_head: int = DEFAULT_PREVIEW_HEAD,
    preview_tail: int = DEFAULT_PREVIEW_TAIL,
    turn_floor: int = DEFAULT_TURN_FLOOR,
) -> tuple[list[Message], ToolBudgetReport, TurnState]:
    """:func:`enforce_tool_result_budget` at the cost of what changed: the same list and report, and
    the successor of ``state``. Only the turns whose results changed are budgeted again; the
    history ``state`` indexes is left as it is (the previews go to the returned copy)."""
    limits = (turn_budget_chars, max_result_chars, preview_head, preview_tail, turn_floor)
    _validate(*limits)
    index = state.begin(history)
    previews = index.listener(TOOL_BUDGET_LISTENER, limits, lambda: _PreviewIndex(limits))
    previews.update(index, archive)
    if not previews.previews:
        return history, ToolBudgetReport(), state.successor()
    out = list(history)
    for position, (_, preview) in previews.previews.items():
        out[position] = preview
    report = ToolBudgetReport(results_previewed=len(previews.previews), chars_saved=previews.saved)
    return out, report, state.successor()
