"""Decode request bodies that repeat most of the previous one: ``json.loads`` without re-decoding the prefix.

A client resends the whole conversation with every request, so the message list
of one body is mostly the message list of the last one, at the same offsets. A
:class:`PrefixDecoder` keeps each element of the last body's top-level arrays
with its text and offset; an element found again, text for text at the same
offset, is reused instead of decoded. Everything else is decoded with the
standard library's scanner, so the result equals ``json.loads(raw)``; any body it
does not read this way (not a UTF-8 object, a syntax error, trailing data) goes
to ``json.loads`` itself, which returns or raises exactly as before.

The body's bytes are compared first: its *resume array* (the array that grew last
time: the conversation, after one body at most) is resumed after its last element
whose bytes the body repeats — all of them when the conversation only grew, all but
the last few when a turn-boundary pass rewrote a recent message — and only what
follows is decoded (the new or rewritten messages and the few fields after them). A
body that differs before that array is decoded whole, reusing the elements found
again at the same offsets before the first change.

Reused values are shared between the results of successive calls: callers must
not mutate a decoded body (the mock providers only read them).
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["PrefixDecoder"]

_WHITESPACE = re.compile(r"[ \t\n\r]*")  # json.decoder.WHITESPACE
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_SCAN_STRING: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_COMPARED = 1 << 16  # bytes compared at a time while looking for the first difference


def _skip(text: str, pos: int) -> int:
    """The position after the JSON whitespace at ``pos``."""
    return _WHITESPACE.match(text, pos).end()  # type: ignore[union-attr]  # the pattern matches ""


def _first_difference(raw: bytes, head: bytes) -> int:
    """The offset of the first byte where ``raw`` differs from ``head`` (``len(head)`` when it starts with
    it): compared a slice of ``head`` at a time in place in ``raw``, then bisected within that slice."""
    low = 0
    while low < len(head):
        high = min(len(head), low + _COMPARED)
        if not raw.startswith(head[low:high], low):
            break
        low = high
    else:
        return len(head)
    while high - low > 1:
        middle = (low + high) // 2
        if raw.startswith(head[low:middle], low):
            low = middle
        else:
            high = middle
    return low


class _Unread(Exception):
    """The body is not read incrementally: fall back to ``json.loads``."""


@dataclass(slots=True)
class _Run:
    """The elements of one top-level array of the last body: their text from the first element's start to
    the last one's end (separators included; in pieces, joined when a whole body is compared with it),
    their values, and each element's end offset in that text."""

    pieces: list[str]
    values: list[Any]
    ends: list[int]

    @property
    def text(self) -> str:
        if len(self.pieces) != 1:
            self.pieces = ["".join(self.pieces)]
        return self.pieces[0]


@dataclass(frozen=True, slots=True)
class _Resume:
    """Where the next body may resume: the last body's bytes up to the end of its resume array's last
    element, the array's key and the offset of its first element (its run's key), each element's end
    as a byte offset, and the object's members before the array, in order."""

    head: bytes
    key: str
    first: int
    byte_ends: list[int]
    before: dict[str, Any]

    def reusable(self, raw: bytes) -> int:
        """How many of the array's elements ``raw`` repeats byte for byte, where they were."""
        if len(raw) > len(self.head) and raw.startswith(self.head):
            return len(self.byte_ends)
        return bisect_right(self.byte_ends, _first_difference(raw, self.head))


@dataclass(frozen=True, slots=True)
class _Closed:
    """An array read by a parse: its key, first element's offset, its elements and whether it grew."""

    key: str
    first: int
    elements: int
    grew: bool
    before: dict[str, Any]


class _Parse:
    """One read of a body: ``text`` is the whole body, or what follows the resume point (``base`` chars
    and ``base_bytes`` bytes in); ``previous`` the last body's runs by first offset; ``runs`` and
    ``result`` are built."""

    __slots__ = ("ascii", "base", "base_bytes", "closed", "previous", "result", "reused", "runs", "text")

    def __init__(
        self,
        text: str,
        previous: dict[int, _Run],
        result: dict[str, Any],
        *,
        base: int = 0,
        base_bytes: int = 0,
    ) -> None:
        self.text, self.previous, self.result = text, previous, result
        self.base, self.base_bytes, self.ascii = base, base_bytes, text.isascii()
        self.runs: dict[int, _Run] = {}
        self.closed: list[_Closed] = []
        self.reused = 0

    def members(self, pos: int) -> int:
        """Read ``"key": value`` members from ``pos`` (past ``{`` or a ``,``); the position past ``}``."""
        text = self.text
        if text[pos] == "}":
            return pos + 1
        while True:
            if text[pos] != '"':
                raise _Unread
            key, pos = _SCAN_STRING(text, pos + 1)
            pos = _skip(text, pos)
            if text[pos] != ":":
                raise _Unread
            pos = _skip(text, pos + 1)
            if text[pos] == "[":
                pos = self.array(key, _skip(text, pos + 1))
            else:
                self.result[key], pos = _SCAN(text, pos)
            pos = _skip(text, pos)
            if text[pos] == "}":
                return pos + 1
            if text[pos] != ",":
                raise _Unread
            pos = _skip(text, pos + 1)

    def array(self, key: str, first: int) -> int:
        """Read the array of ``key`` whose first element is at ``first``; the position past ``]``."""
        text = self.text
        if text[first] == "]":
            self.result[key] = []
            return first + 1
        values, ends = self._reused(first, self.previous.get(self.base + first))
        run = _Run([], values, ends)
        if not values:
            return self.elements(key, self.base + first, run, first, first)
        pos = _skip(text, first + ends[-1])
        if text[pos] == "]":
            run.pieces.append(text[first : first + ends[-1]])
            return self.close(key, self.base + first, run, pos, grew=False)
        if text[pos] != ",":
            raise _Unread
        return self.elements(key, self.base + first, run, _skip(text, pos + 1), first)

    def elements(self, key: str, first: int, run: _Run, pos: int, start: int) -> int:
        """Scan the elements from ``pos`` onto ``run`` (the array's first element at ``first``, overall) up
        to ``]``; the text from ``start`` on is the run's new piece. The position past ``]``."""
        text, base = self.text, self.base
        while True:
            value, end = _SCAN(text, pos)
            run.values.append(value)
            run.ends.append(base + end - first)
            pos = _skip(text, end)
            if text[pos] == "]":
                run.pieces.append(text[start:end])
                return self.close(key, first, run, pos, grew=True)
            if text[pos] != ",":
                raise _Unread
            pos = _skip(text, pos + 1)

    def close(self, key: str, first: int, run: _Run, pos: int, *, grew: bool) -> int:
        """``run`` is the whole array of ``key``: keep it, and a copy of its values in the result."""
        before = {k: v for k, v in self.result.items() if k != key}
        self.closed.append(_Closed(key, first, len(run.values), grew, before))
        self.runs[first] = run
        self.result[key] = list(run.values)
        return pos + 1

    def _reused(self, first: int, run: _Run | None) -> tuple[list[Any], list[int]]:
        """The longest run of the last body's elements found again at the same offsets (values, ends)."""
        if run is None:
            return [], []
        text = self.text
        if text.startswith(run.text, first):  # the conversation only grew
            count = len(run.ends)
        else:  # a compaction rewrote part of it: bisect for the longest unchanged prefix of elements
            low, high = 0, len(run.ends)
            while low < high:
                middle = (low + high + 1) // 2
                if text.startswith(run.text[: run.ends[middle - 1]], first):
                    low = middle
                else:
                    high = middle - 1
            count = low
        self.reused += count
        return run.values[:count], run.ends[:count]

    def resume_point(self, raw: bytes, resumed: _Resume | None, kept: int) -> _Resume | None:
        """Where the next body may resume: in the array that grew (else the one with the most elements),
        with the byte ends of its elements (the first ``kept`` known from ``resumed``, when it is that
        array; the rest measured on this parse's text, from its start)."""
        if not self.closed:
            return None
        best = max(self.closed, key=lambda closed: (closed.grew, closed.elements))
        run = self.runs[best.first]
        known = resumed.byte_ends[:kept] if resumed is not None and resumed.first == best.first else []
        byte_ends = list(known)
        char, byte = (
            (best.first + run.ends[len(known) - 1], known[-1]) if known else (self.base, self.base_bytes)
        )
        text, base = self.text, self.base
        for end in run.ends[len(known) :]:
            end += best.first
            byte += end - char if self.ascii else len(text[char - base : end - base].encode("utf-8"))
            byte_ends.append(byte)
            char = end
        return _Resume(raw[:byte], best.key, best.first, byte_ends, best.before)


class PrefixDecoder:
    """``json.loads`` of successive request bodies, reusing the elements the last body already held.

    >>> decoder = PrefixDecoder()
    >>> decoder.loads(b'{"messages":[{"role":"user","content":"hi"}]}')
    {'messages': [{'role': 'user', 'content': 'hi'}]}
    >>> second = decoder.loads(b'{"messages":[{"role":"user","content":"hi"},{"role":"assistant"}]}')
    >>> second["messages"][1], decoder.reused
    ({'role': 'assistant'}, 1)
    """

    __slots__ = ("_resume", "_runs", "resumed", "reused")

    def __init__(self) -> None:
        self._runs: dict[int, _Run] = {}  # offset of an array's first element -> that array's run
        self._resume: _Resume | None = None
        self.reused = 0  # elements reused by the last call, over every array (tests, profiles)
        self.resumed = False  # whether the last call resumed after the last body's prefix (tests, profiles)

    def loads(self, raw: bytes) -> Any:
        """The value of ``raw``, equal to ``json.loads(raw)`` (which also raises its errors)."""
        if raw[:1] != b"{" or raw[1:2] == b"\x00":  # json.loads would detect another encoding
            return json.loads(raw)
        try:
            resume = self._resume
            kept = resume.reusable(raw) if resume is not None else 0
            if resume is not None and kept:
                return self._resumed(raw, resume, kept)
            self.resumed = False
            text = raw.decode("utf-8")
            parse = _Parse(text, self._runs, {})
            end = parse.members(_skip(text, 1))
            return self._finish(parse, raw, end, None, 0)
        except (_Unread, UnicodeDecodeError, StopIteration, ValueError, IndexError):
            self._runs, self._resume = {}, None
            return json.loads(raw)

    def _resumed(self, raw: bytes, resume: _Resume, kept: int) -> dict[str, Any]:
        """Read ``raw`` after the ``kept`` first elements of the resume array, which it repeats: the
        array goes on from there, then the object's members."""
        self.resumed = True
        run = self._runs[resume.first]
        if kept < len(run.values):  # the elements after them changed: the run is cut there
            run = _Run([run.text[: run.ends[kept - 1]]], run.values[:kept], run.ends[:kept])
        start = resume.byte_ends[kept - 1]
        tail = raw[start:].decode("utf-8")
        parse = _Parse(
            tail, self._runs, dict(resume.before), base=resume.first + run.ends[-1], base_bytes=start
        )
        parse.runs = {first: earlier for first, earlier in self._runs.items() if first < resume.first}
        parse.reused = kept
        pos = _skip(tail, 0)
        if tail[pos] == "]":
            pos = parse.close(resume.key, resume.first, run, pos, grew=False)
        elif tail[pos] == ",":
            pos = parse.elements(resume.key, resume.first, run, _skip(tail, pos + 1), 0)
        else:
            raise _Unread
        pos = _skip(tail, pos)
        if tail[pos] == ",":
            end = parse.members(_skip(tail, pos + 1))
        elif tail[pos] == "}":
            end = pos + 1
        else:
            raise _Unread
        return self._finish(parse, raw, end, resume, kept)

    def _finish(
        self, parse: _Parse, raw: bytes, end: int, resumed: _Resume | None, kept: int
    ) -> dict[str, Any]:
        if _skip(parse.text, end) != len(parse.text):
            raise _Unread
        self._runs, self.reused = parse.runs, parse.reused
        self._resume = parse.resume_point(raw, resumed, kept)
        return parse.result
