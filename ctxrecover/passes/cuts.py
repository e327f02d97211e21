"""Cut points that never split a word: where the heads and tails of previews end (SPEC §12).

Every cut the library makes of message content — tool-result previews,
microcompact previews, shrink and cap cuts, trimmed blocks, summarizer
input — keeps a head and a tail of the original around a fixed text. A cut
inside a word creates a token the original did not contain (``selection``
cut to ``select``, ``/etc/passwd.bak`` to ``/etc/passwd``, ``<script_name>``
to ``<script``), and a WAF may refuse the preview while it passes the
original. So a head ends, and a tail starts, on a line boundary when one
keeps more than half of the room (the rule of SPEC §3.2), else on a
whitespace boundary, else the part is empty: a word longer than the room is
left out whole. A snapped part is never longer than its room.

Whitespace is what :meth:`str.isspace` and :meth:`str.split` call whitespace.

>>> text = "first line\\nsecond line\\nthird selection"
>>> text[: head_end(text, 30)]
'first line\\nsecond line\\n'
>>> text[tail_start(text, 12) :]
'selection'
>>> head_end("x" * 50, 20), tail_start("x" * 50, 20)
(0, 50)
"""

from __future__ import annotations

import re

__all__ = ["head_end", "is_word_boundary", "tail_start"]

_SPACE_RE = re.compile(r"\s")  # the same characters as str.isspace


def is_word_boundary(text: str, position: int) -> bool:
    """True when cutting ``text`` at ``position`` splits no word (an end, or whitespace beside it)."""
    if position <= 0 or position >= len(text):
        return True
    return text[position - 1].isspace() or text[position].isspace()


def head_end(text: str, room: int) -> int:
    """The end of the longest head of ``text`` within ``room`` chars that splits no word.

    After the last newline of the room when it lies past half of it; else at
    the last word boundary of the room; 0 when the room holds no whole word.
    """
    if room >= len(text):
        return len(text)
    if room <= 0:
        return 0
    newline = text.rfind("\n", 0, room)
    if newline > room // 2:
        return newline + 1
    if is_word_boundary(text, room):
        return room
    space = _SPACE_RE.search(text[room - 1 :: -1])
    return 0 if space is None else room - space.start()


def tail_start(text: str, room: int, floor: int = 0) -> int:
    """The start of the longest tail of ``text`` within ``room`` chars, from ``floor`` on, that
    splits no word.

    After the first newline of the room when it lies within its first half;
    else at the first word boundary of the room; ``len(text)`` when the room
    holds no whole word. ``floor`` (a head's end) is where the tail may start
    at the earliest.
    """
    start = max(floor, len(text) - max(room, 0))
    if start >= len(text):
        return len(text)
    newline = text.find("\n", start, start + room // 2)
    if newline >= 0:
        return newline + 1
    if is_word_boundary(text, start):
        return start
    space = _SPACE_RE.search(text, start)
    return len(text) if space is None else space.start() + 1
