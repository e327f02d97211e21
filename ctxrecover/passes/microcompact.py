"""Microcompact: progressively fold old tool output (SPEC §3.3).

The age of a message is the number of assistant messages after it. Large
tool results (and ``agent_feedback`` user messages) of age ≥ ``truncate_turns``
become a head/tail preview; at age ≥ ``summarize_turns`` they become a
one-line summary. The original is archived first and every stub ends with a
recall line per marker it lost, so nothing is ever lost.

**Decision** (beyond the reference): a preview — ours, or a tool-result-budget
preview — is below ``min_content`` yet is still summarised once it reaches the
summarize age; the summary keeps the preview's key and reports the original's
lines and chars, read back from the archive. ``preserve_verbatim`` messages
and summaries are never touched.

>>> from ctxrecover.archive import MemoryArchive
>>> from ctxrecover.messages import Message
>>> h = [Message.tool("t", "x" * 5000)] + [Message.assistant("ok")] * 4
>>> out, report = apply_microcompact(h, archive=MemoryArchive())
>>> out[0].content.startswith("[Old tool result cleared — 1 lines, 5000 chars, text]")
True
>>> report.notice
'🗜 microcompact: 0 truncated, 1 summarized, 4.8 KB freed'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ctxrecover.archive import Archive, archive_message, extract_keys, marker
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message
from ctxrecover.passes.cuts import head_end, tail_start
from ctxrecover.passes.history_index import PositionWatch, TurnState
from ctxrecover.passes.tool_budget import PREVIEW_OMISSION_RE
from ctxrecover.sizes import format_payload_size

__all__ = [
    "CONTENT_KINDS",
    "DEFAULT_HEAD_CHARS",
    "DEFAULT_MIN_CONTENT",
    "DEFAULT_SUMMARIZE_TURNS",
    "DEFAULT_TAIL_CHARS",
    "DEFAULT_TRUNCATE_TURNS",
    "MicrocompactReport",
    "NOTICE_TEXT",
    "RECALL_SUFFIX",
    "SUMMARY_TEXT",
    "TRUNCATION_TEXT",
    "apply_microcompact",
    "content_kind",
    "message_ages",
    "microcompact_step",
    "recall_suffixes",
]

DEFAULT_TRUNCATE_TURNS = 2  # CHATCLI_MICROCOMPACT_TRUNCATE_TURNS
DEFAULT_SUMMARIZE_TURNS = 4  # CHATCLI_MICROCOMPACT_SUMMARIZE_TURNS
DEFAULT_HEAD_CHARS = 2000  # CHATCLI_MICROCOMPACT_HEAD_CHARS
DEFAULT_TAIL_CHARS = 500  # CHATCLI_MICROCOMPACT_TAIL_CHARS
DEFAULT_MIN_CONTENT = 3000  # CHATCLI_MICROCOMPACT_MIN_CONTENT

SUMMARY_TEXT = "[Old tool result cleared — %d lines, %d chars, %s]"
TRUNCATION_TEXT = "\n[... %d chars omitted from old tool result ...]\n"
RECALL_SUFFIX = "\n[full content recoverable via @recall %s]"
NOTICE_TEXT = "🗜 microcompact: %d truncated, %d summarized, %s freed"

SUMMARY_PREFIX = SUMMARY_TEXT.split("%", 1)[0]
TRUNCATION_RE = re.compile(r"\n\[\.\.\. \d+ chars omitted from old tool result \.\.\.\]\n")

# Content type of a summarised result, first match wins:
# (test, needles, label) where test is "starts" (the left-stripped content
# starts with a needle) or "head" (a needle occurs in the first 200 chars).
KIND_HEAD_CHARS = 200
CONTENT_KINDS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("starts", ("{", "["), "JSON"),
    ("head", ("package ",), "Go source"),
    ("head", ("import ",), "source code"),
    ("head", ("def ",), "Python source"),
    ("head", ("function ",), "JavaScript source"),
    ("starts", ("diff ", "--- "), "diff"),
    ("starts", ("commit ",), "git log"),
)
DEFAULT_KIND = "text"


def content_kind(content: str) -> str:
    """The type label of a summary (``JSON``, ``Go source``, …, ``text``) per :data:`CONTENT_KINDS`."""
    stripped = content.lstrip()
    head = content[:KIND_HEAD_CHARS]
    for test, needles, label in CONTENT_KINDS:
        if test == "starts" and stripped.startswith(needles):
            return label
        if test == "head" and any(needle in head for needle in needles):
            return label
    return DEFAULT_KIND


def recall_suffixes(keys: Iterable[str]) -> str:
    """One ``\\n[full content recoverable via @recall <<ccr:KEY>>]`` line per distinct key, in order."""
    return "".join(RECALL_SUFFIX % marker(key) for key in dict.fromkeys(keys))


@dataclass(frozen=True, slots=True)
class MicrocompactReport:
    """What :func:`microcompact` did: results truncated, summarised, characters freed."""

    truncated: int = 0
    summarized: int = 0
    chars_freed: int = 0

    @property
    def changed(self) -> bool:
        """True when any message was folded."""
        return bool(self.truncated or self.summarized)

    @property
    def notice(self) -> str:
        """The status line ``🗜 microcompact: %d truncated, %d summarized, %s freed``."""
        return NOTICE_TEXT % (self.truncated, self.summarized, format_payload_size(self.chars_freed))


def _previewed_original(content: str, archive: Archive) -> tuple[str, str] | None:
    """``(key, original)`` when ``content`` is a preview (ours or a tool-result-budget one).

    A preview has an omission line and carries the key of an archived original
    that starts with the preview's head; anything else is ordinary content.
    """
    if "<<ccr:" not in content:
        return None
    match = PREVIEW_OMISSION_RE.search(content) or TRUNCATION_RE.search(content)
    if match is None:
        return None
    head = content[: match.start()]
    for key in extract_keys(content):
        original = archive.get(key)
        if original is not None and len(original) > len(head) and original.startswith(head):
            return key, original
    return None


def message_ages(history: Sequence[Message]) -> list[int]:
    """The age of each message: how many assistant messages come after it."""
    ages = [0] * len(history)
    later_assistants = 0
    for i in range(len(history) - 1, -1, -1):
        ages[i] = later_assistants
        if history[i].role == "assistant":
            later_assistants += 1
    return ages


def _validate(truncate_turns: int, summarize_turns: int, head: int, tail: int, min_content: int) -> None:
    for name, value in (
        ("truncate_turns", truncate_turns),
        ("summarize_turns", summarize_turns),
        ("head_chars", head),
        ("min_content", min_content),
    ):
        if not isinstance(value, int) or value <= 0:
            raise ConfigError(f"microcompact: {name} must be a positive int, got {value!r}")
    if not isinstance(tail, int) or tail < 0:
        raise ConfigError(f"microcompact: tail_chars must be an int >= 0, got {tail!r}")
    if summarize_turns < truncate_turns:
        raise ConfigError(
            f"microcompact: summarize_turns ({summarize_turns}) must be >= truncate_turns ({truncate_turns})"
        )
    if head + tail >= min_content:
        raise ConfigError(
            f"microcompact: head_chars + tail_chars ({head} + {tail}) must be below min_content "
            f"({min_content}), or a truncated result would not be shorter"
        )


class _Folder:
    """Builds stubs for one run and keeps the tallies."""

    def __init__(self, archive: Archive, head: int, tail: int) -> None:
        self.archive = archive
        self.head = head
        self.tail = tail
        self.truncated = self.summarized = self.freed = 0

    def summarize(self, msg: Message, previewed: tuple[str, str] | None) -> str:
        content = msg.content
        if previewed is None:
            keys = [archive_message(self.archive, msg), *extract_keys(content)]
            original = content
        else:
            key, original = previewed
            keys = [key, *extract_keys(content)]
        stub = SUMMARY_TEXT % (len(original.splitlines()), len(original), content_kind(original))
        return stub + recall_suffixes(keys)

    def truncate(self, msg: Message) -> str:
        content = msg.content
        key = archive_message(self.archive, msg)
        end = head_end(content, self.head)
        kept_head = content[:end]
        kept_tail = content[tail_start(content, self.tail, end) :]
        body = kept_head + TRUNCATION_TEXT % (len(content) - len(kept_head) - len(kept_tail)) + kept_tail
        lost = [k for k in extract_keys(content) if k not in extract_keys(body)]
        return body + recall_suffixes([key, *lost])


def _folded(
    folder: _Folder, msg: Message, age: int, archive: Archive, turns: tuple[int, int, int]
) -> str | None:
    """The stub ``msg`` becomes at ``age`` (SPEC §3.3), or None when it stays as it is."""
    truncate_turns, summarize_turns, min_content = turns
    if age < truncate_turns or not _foldable_kind(msg):
        return None
    content = msg.content
    previewed = _previewed_original(content, archive)
    if age >= summarize_turns and (previewed or len(content) >= min_content):
        stub = folder.summarize(msg, previewed)
        folder.summarized += 1
    elif previewed is None and len(content) >= min_content:
        stub = folder.truncate(msg)
        folder.truncated += 1
    else:
        return None
    folder.freed += len(content) - len(stub)
    return stub


def _report(folder: _Folder) -> MicrocompactReport:
    return MicrocompactReport(
        truncated=folder.truncated, summarized=folder.summarized, chars_freed=folder.freed
    )


def apply_microcompact(
    history: list[Message],
    *,
    archive: Archive,
    truncate_turns: int = DEFAULT_TRUNCATE_TURNS,
    summarize_turns: int = DEFAULT_SUMMARIZE_TURNS,
    head_chars: int = DEFAULT_HEAD_CHARS,
    tail_chars: int = DEFAULT_TAIL_CHARS,
    min_content: int = DEFAULT_MIN_CONTENT,
) -> tuple[list[Message], MicrocompactReport]:
    """Truncate old large tool results and summarise older ones (SPEC §3.3).

    A no-op (the input list itself) before ``truncate_turns`` assistant
    messages exist or when nothing qualifies. Stubs keep ``tool_call_id``,
    ``name`` and flags. Idempotent; the input is never mutated.
    """
    _validate(truncate_turns, summarize_turns, head_chars, tail_chars, min_content)
    folder = _Folder(archive, head_chars, tail_chars)
    turns = (truncate_turns, summarize_turns, min_content)
    out: list[Message] | None = None
    for i, age in enumerate(message_ages(history)):
        stub = _folded(folder, history[i], age, archive, turns)
        if stub is None:
            continue
        if out is None:
            out = list(history)
        out[i] = history[i].with_content(stub)
    if out is None:
        return history, MicrocompactReport()
    return out, _report(folder)


# -- the incremental pass ------------------------------------------------------------------------
MICROCOMPACT_LISTENER = "microcompact"


def _preview_shaped(content: str) -> bool:
    """True when ``content`` may be a preview: whether it is depends on the archive (ask each time)."""
    if "<<ccr:" not in content:
        return False
    return PREVIEW_OMISSION_RE.search(content) is not None or TRUNCATION_RE.search(content) is not None


def _foldable_kind(msg: Message) -> bool:
    """A tool result or agent feedback that is neither kept verbatim nor a summary (SPEC §3.3)."""
    if msg.preserve_verbatim or msg.is_summary or msg.content.startswith(SUMMARY_PREFIX):
        return False
    return msg.role == "tool" or (msg.role == "user" and msg.agent_feedback)


def _may_fold(msg: Message, min_content: int) -> bool:
    """False when microcompact will never change ``msg``, whatever its age and the archive."""
    return _foldable_kind(msg) and (len(msg.content) >= min_content or _preview_shaped(msg.content))


def microcompact_step(
    history: list[Message],
    state: TurnState,
    *,
    archive: Archive,
    truncate_turns: int = DEFAULT_TRUNCATE_TURNS,
    summarize_turns: int = DEFAULT_SUMMARIZE_TURNS,
    head_chars: int = DEFAULT_HEAD_CHARS,
    tail_chars: int = DEFAULT_TAIL_CHARS,
    min_content: int = DEFAULT_MIN_CONTENT,
) -> tuple[list[Message], MicrocompactReport, TurnState]:
    """:func:`apply_microcompact` at the cost of what changed: the same history and report, and the
    successor of ``state``.

    Only messages it may still fold are looked at — large tool output and
    previews younger than their summary, in position order, each when its age
    crosses a threshold — not the whole history.
    """
    _validate(truncate_turns, summarize_turns, head_chars, tail_chars, min_content)
    index = state.begin(history)
    watch = index.listener(
        MICROCOMPACT_LISTENER, min_content, lambda: PositionWatch(lambda msg: _may_fold(msg, min_content))
    )
    folder = _Folder(archive, head_chars, tail_chars)
    turns = (truncate_turns, summarize_turns, min_content)
    out: list[Message] | None = None
    for i in sorted(watch.positions):
        msg = index.messages[i]
        stub = _folded(folder, msg, index.age(i), archive, turns)
        if stub is None:
            continue
        if out is None:
            out = list(history)
        out[i] = msg.with_content(stub)
        index.replace(i, out[i])
    if out is None:
        return history, MicrocompactReport(), state.successor()
    return out, _report(folder), state.successor()
