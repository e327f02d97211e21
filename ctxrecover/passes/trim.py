"""Trim: planned compaction Level 1, near-lossless and without an LLM (SPEC §5).

- Assistant messages lose their ``<reasoning>…</reasoning>`` and
  ``<explanation>…</explanation>`` blocks (any case, across lines, attributes
  allowed) and runs of 3+ newlines collapse to 2.
- Tool-feedback user messages (``agent_feedback=True``) get each injected
  context block (``<tool_output>``, ``<context>``, ``<file>``) over 5000 chars
  cut to head 2000 + tail 500, then the whole message cut to 8000 chars (head
  ⅔ + tail ⅓) if still longer.
- Of consecutive user messages starting with ``FORMAT ERROR:`` only the last
  stays; it gains a note with the marker of the dropped ones.

System messages, summaries, verbatim messages, real user text (user messages
without ``agent_feedback``) and ``tool`` messages are never touched; the
``FORMAT ERROR:`` prefix marks agent feedback whatever the flag says. Nothing is
lost: the original of every rewritten message is archived first, and a
rewrite that removed text ends with its recall marker. A rewrite that would
not make the message shorter is skipped, and a message already ending with a
recall marker (cut by an earlier pass) is left as it is, so trim is idempotent.

>>> from ctxrecover.archive import MemoryArchive
>>> reply = Message.assistant("<reasoning>" + "hmm " * 40 + "</reasoning>\\n\\n\\nDone.")
>>> trimmed, report = trim_history([reply], archive=MemoryArchive())
>>> trimmed[0].content.splitlines()[0], report.messages_changed
('Done.', 1)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ctxrecover.archive import Archive, archive_range, marker
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message
from ctxrecover.passes.cuts import head_end, tail_start
from ctxrecover.passes.truncate import (
    recall_suffix,
    recall_suffix_key,
    truncate_head_tail,
)
from ctxrecover.sizes import total_weight

__all__ = [
    "FORMAT_ERROR_PREFIX",
    "INJECTED_BLOCK_TAGS",
    "STRIPPED_ASSISTANT_TAGS",
    "TrimReport",
    "trim_history",
]

STRIPPED_ASSISTANT_TAGS = ("reasoning", "explanation")
INJECTED_BLOCK_TAGS = ("tool_output", "context", "file")
FORMAT_ERROR_PREFIX = "FORMAT ERROR:"

DEFAULT_FEEDBACK_MAX_CHARS = 8000
DEFAULT_BLOCK_MAX_CHARS = 5000
DEFAULT_BLOCK_HEAD_CHARS = 2000
DEFAULT_BLOCK_TAIL_CHARS = 500
MIN_FEEDBACK_MAX_CHARS = 1000
FEEDBACK_HEAD_RATIO = 2 / 3

BLOCK_OMISSION = "\n\n... [%d chars omitted] ...\n\n"
FEEDBACK_SEPARATOR = "\n\n... [%d chars omitted] ...\n\n"
FORMAT_ERRORS_NOTE = "\n[{count} earlier FORMAT ERROR message(s) recoverable via @recall {marker}]"

_SUFFIX_LENGTH = len(recall_suffix("0" * 16))
_EXCESS_NEWLINES_RE = re.compile(r"\n\n\n+")  # same matches as \n{3,}, ~7x faster in CPython


def _tag_block_re(tags: tuple[str, ...]) -> re.Pattern[str]:
    names = "|".join(re.escape(t) for t in tags)
    return re.compile(rf"(<({names})\b[^>]*>)(.*?)(</\2\s*>)", re.IGNORECASE | re.DOTALL)


_STRIPPED_BLOCK_RE = _tag_block_re(STRIPPED_ASSISTANT_TAGS)
_INJECTED_BLOCK_RE = _tag_block_re(INJECTED_BLOCK_TAGS)


@dataclass(frozen=True, slots=True)
class TrimReport:
    """What :func:`trim_history` did.

    ``messages_changed`` counts rewritten and removed messages;
    ``chars_saved`` is the drop in total weight.
    """

    messages_changed: int = 0
    chars_saved: int = 0
    format_errors_dropped: int = 0


def _is_untouchable(msg: Message) -> bool:
    return msg.role in ("system", "tool") or msg.is_summary or msg.preserve_verbatim


def _is_trimmed(msg: Message) -> bool:
    """Already cut by a pass (it ends with a recall suffix): never trimmed again."""
    return recall_suffix_key(msg.content) is not None


def _is_format_error(msg: Message) -> bool:
    return msg.role == "user" and not _is_untouchable(msg) and msg.content.startswith(FORMAT_ERROR_PREFIX)


def _trim_assistant(content: str, archive: Archive) -> str:
    """The stripped assistant content with its recall marker, or ``content`` itself.

    Any change — reasoning blocks removed or blank lines collapsed — archives the
    original and appends its marker, so nothing is lost; a change that would not
    pay for its marker is not made.
    """
    stripped, removed = _STRIPPED_BLOCK_RE.subn("", content)
    stripped = _EXCESS_NEWLINES_RE.sub("\n\n", stripped)
    if removed:
        stripped = stripped.strip()
    if stripped == content:
        return content
    joined_length = len(stripped) + _SUFFIX_LENGTH - (0 if stripped else 1)
    if joined_length >= len(content):
        return content
    suffix = recall_suffix(archive.put(content))
    return stripped + suffix if stripped else suffix.lstrip("\n")


def _trim_feedback(
    content: str,
    archive: Archive,
    *,
    feedback_max_chars: int,
    block_max_chars: int,
    block_head_chars: int,
    block_tail_chars: int,
) -> str:
    """Feedback with long injected blocks and its overall length cut, or ``content`` itself."""

    def shorten(block: re.Match[str]) -> str:
        body = block.group(3)
        if len(body) <= block_max_chars:
            return block.group(0)
        head = head_end(body, block_head_chars)
        tail = tail_start(body, block_tail_chars, head)
        return block.group(1) + body[:head] + BLOCK_OMISSION % (tail - head) + body[tail:] + block.group(4)

    shortened = _INJECTED_BLOCK_RE.sub(shorten, content) if len(content) > block_max_chars else content
    if len(shortened) > feedback_max_chars:
        shortened = truncate_head_tail(
            shortened,
            feedback_max_chars - _SUFFIX_LENGTH,
            head_ratio=FEEDBACK_HEAD_RATIO,
            separator=FEEDBACK_SEPARATOR,
        )
    if shortened == content or len(shortened) + _SUFFIX_LENGTH >= len(content):
        return content
    return shortened + recall_suffix(archive.put(content))


def trim_history(
    history: list[Message],
    *,
    archive: Archive,
    feedback_max_chars: int = DEFAULT_FEEDBACK_MAX_CHARS,
    block_max_chars: int = DEFAULT_BLOCK_MAX_CHARS,
    block_head_chars: int = DEFAULT_BLOCK_HEAD_CHARS,
    block_tail_chars: int = DEFAULT_BLOCK_TAIL_CHARS,
) -> tuple[list[Message], TrimReport]:
    """Compaction Level 1: strip reasoning, shorten tool feedback, keep the last FORMAT ERROR.

    See the module docstring for the rules. Pure and idempotent; returns the
    input list itself when nothing changes.
    """
    if feedback_max_chars < MIN_FEEDBACK_MAX_CHARS:
        raise ConfigError(
            f"trim_history needs feedback_max_chars >= {MIN_FEEDBACK_MAX_CHARS} (got {feedback_max_chars})"
        )
    if min(block_head_chars, block_tail_chars) < 0 or (
        block_head_chars + block_tail_chars + len(BLOCK_OMISSION) >= block_max_chars
    ):
        raise ConfigError(
            "trim_history needs block_head_chars + block_tail_chars plus the omission line "
            f"below block_max_chars (got {block_head_chars} + {block_tail_chars} vs {block_max_chars})"
        )
    result = list(history)
    changed = 0
    for i, msg in enumerate(history):
        if _is_untouchable(msg) or _is_trimmed(msg):
            continue
        if msg.role == "assistant":
            content = _trim_assistant(msg.content, archive)
        elif msg.agent_feedback:
            content = _trim_feedback(
                msg.content,
                archive,
                feedback_max_chars=feedback_max_chars,
                block_max_chars=block_max_chars,
                block_head_chars=block_head_chars,
                block_tail_chars=block_tail_chars,
            )
        else:
            continue
        if content is not msg.content:
            result[i] = msg.with_content(content)
            changed += 1

    removed: set[int] = set()
    start = 0
    while start < len(history):
        end = start
        while end < len(history) and _is_format_error(history[end]):
            end += 1
        if end - start >= 2:
            dropped = history[start : end - 1]
            note = FORMAT_ERRORS_NOTE.format(
                count=len(dropped), marker=marker(archive_range(archive, dropped))
            )
            if result[end - 1] is history[end - 1]:
                changed += 1
            result[end - 1] = result[end - 1].with_content(result[end - 1].content + note)
            removed.update(range(start, end - 1))
        start = max(end, start + 1)

    if not changed:
        return history, TrimReport()
    trimmed = [m for i, m in enumerate(result) if i not in removed]
    return trimmed, TrimReport(
        messages_changed=changed + len(removed),
        chars_saved=total_weight(history) - total_weight(trimmed),
        format_errors_dropped=len(removed),
    )
