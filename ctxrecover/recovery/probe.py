"""A retry that tells a size limit from a content rule (SPEC §11: a content block never teaches a cap).

A WAF's 403 does not say why it refused: a body larger than every accepted one reads as a
size limit (§11), yet the rule may have matched *content* that was new in that request.
If the retry's compaction then happens to cut that content, the retry passes and a false cap
stays for the session. The gateway has already proven innocent everything it accepted, so the
retry for such a rejection compacts the proven part and keeps the **unproven** messages whole
— those no accepted request carried (the newest tool results, the model's last answer):

- refused again at or below an accepted size, it is a content block (the gateway model undoes
  the size reading, and the newest unproven message is named);
- accepted, the unproven content passed whole: the size reading stands.

The session marks those messages ``preserve_verbatim`` for the one recovery attempt (every
compaction step keeps such messages whole while they fit their share of the budget; larger, the
attempt keeps the conversation from the user message before them, :func:`keep_from`) and clears
the mark on what it sends and keeps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ctxrecover.archive import archive_message
from ctxrecover.messages import Message
from ctxrecover.passes.truncate import leading_system_count, recall_suffix, truncate_head_tail
from ctxrecover.recovery.diagnosis import is_library_message
from ctxrecover.recovery.ladder import RecoveryContext, StepBase, StepReport, content_chars

__all__ = ["CapProven", "keep_from", "mark_unproven", "unmarked", "unproven"]


def unproven(history: Sequence[Message], fresh: Mapping[int, Message]) -> tuple[int, ...]:
    """Indices of the conversation messages of ``history`` that are in ``fresh`` (``id → message``:
    what was added or answered since the last accepted request), the library's own notices and
    stubs, verbatim messages and the leading system messages aside."""
    start = leading_system_count(history)
    return tuple(
        i
        for i in range(start, len(history))
        if fresh.get(id(history[i])) is history[i]
        and not history[i].preserve_verbatim
        and not is_library_message(history[i])
    )


def keep_from(history: Sequence[Message], index: int) -> int:
    """How many non-system messages a :class:`~ctxrecover.recovery.Level2` must keep so that
    ``history[index:]`` survives whole: from the last user message at or before ``index`` (the
    kept part starts with one); at least 2."""
    start = next((i for i in range(index, -1, -1) if history[i].role == "user"), 0)
    return max(2, sum(1 for msg in history[start:] if msg.role != "system"))


def mark_unproven(
    history: Sequence[Message], indices: Iterable[int]
) -> tuple[list[Message], dict[int, tuple[Message, Message]]]:
    """``history`` with the messages at ``indices`` marked ``preserve_verbatim``, and the map
    ``id(marked) → (marked, original)`` that :func:`unmarked` reads."""
    marked = list(history)
    originals: dict[int, tuple[Message, Message]] = {}
    for i in indices:
        copy = history[i].replace(preserve_verbatim=True)
        marked[i] = copy
        originals[id(copy)] = (copy, history[i])
    return marked, originals


def unmarked(messages: Sequence[Message], originals: Mapping[int, tuple[Message, Message]]) -> list[Message]:
    """``messages`` with every message :func:`mark_unproven` marked back to its original."""
    out = []
    for msg in messages:
        entry = originals.get(id(msg))
        out.append(entry[1] if entry is not None and entry[0] is msg else msg)
    return out


@dataclass(frozen=True, slots=True)
class CapProven(StepBase):
    """A ladder step: every conversation message that is not verbatim (here: not unproven) cut to
    ``policy.shrink_min_chars`` (head ¾ + tail, original archived, recall marker), the least
    compaction leaves of a message (SPEC §5); the unproven messages stay whole."""

    label = "cap_proven"

    def __call__(self, history: list[Message], ctx: RecoveryContext) -> tuple[list[Message], StepReport]:
        cap = ctx.policy.shrink_min_chars
        out, capped = list(history), 0
        for i, msg in enumerate(history):
            if len(msg.content) <= cap or msg.role == "system" or msg.preserve_verbatim:
                continue
            if is_library_message(msg):
                continue
            suffix = recall_suffix(archive_message(ctx.archive, msg))
            out[i] = msg.replace(content=truncate_head_tail(msg.content, cap - len(suffix)) + suffix)
            capped += 1
        return out, StepReport(
            step=self.name,
            changed=capped > 0,
            messages_before=len(history),
            messages_after=len(out),
            chars_before=content_chars(history),
            chars_after=content_chars(out),
            messages_capped=capped,
        )
