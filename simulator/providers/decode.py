"""Decode request bodies that repeat most of the previous one: ``json.loads`` without re-decoding the prefix.

A client resends the whole conversation with every request, so the message list
of one body is mostly the message list of the last one, at the same offsets. A
:class:`PrefixDecoder` keeps each element of the last body's top-level arrays
with its text and offset; an element found again, byte for byte at the same
offset, is reused instead of decoded. Everything else is decoded with the
standard library's scanner, so the result equals ``json.loads(raw)``; any body it
does not read this way (not a UTF-8 object, a syntax error, trailing data) goes
to ``json.loads`` itself, which returns or raises exactly as before.

Reused values are shared between the results of successive calls: callers must
not mutate a decoded body (the mock providers only read them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["PrefixDecoder"]

_WHITESPACE = re.compile(r"[ \t\n\r]*")  # json.decoder.WHITESPACE
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_SCAN_STRING: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


def _skip(text: str, pos: int) -> int:
    """The position after the JSON whitespace at ``pos``."""
    return _WHITESPACE.match(text, pos).end()  # type: ignore[union-attr]  # the pattern matches ""


class _Unread(Exception):
    """The body is not read incrementally: fall back to ``json.loads``."""


@dataclass(frozen=True, slots=True)
class _Run:
    """The elements of one top-level array of the last body: their text from the first element's start to
    the last one's end (separators included), their values, and each element's end offset in that text."""

    text: str
    values: list[Any]
    ends: list[int]


class PrefixDecoder:
    """``json.loads`` of successive request bodies, reusing the elements the last body already held.

    >>> decoder = PrefixDecoder()
    >>> decoder.loads(b'{"messages":[{"role":"user","content":"hi"}]}')
    {'messages': [{'role': 'user', 'content': 'hi'}]}
    >>> second = decoder.loads(b'{"messages":[{"role":"user","content":"hi"},{"role":"assistant"}]}')
    >>> second["messages"][1], decoder.reused
    ({'role': 'assistant'}, 1)
    """

    __slots__ = ("_runs", "reused")

    def __init__(self) -> None:
        self._runs: dict[int, _Run] = {}  # offset of an array's first element -> that array's run
        self.reused = 0  # elements reused by the last call, over every array (tests, profiles)

    def loads(self, raw: bytes) -> Any:
        """The value of ``raw``, equal to ``json.loads(raw)`` (which also raises its errors)."""
        if raw[:1] != b"{" or raw[1:2] == b"\x00":  # json.loads would detect another encoding
            return json.loads(raw)
        try:
            text = raw.decode("utf-8")
            return self._object(text)
        except (_Unread, UnicodeDecodeError, StopIteration, ValueError, IndexError):
            self._runs = {}
            return json.loads(raw)

    def _object(self, text: str) -> dict[str, Any]:
        previous: dict[int, _Run] = self._runs
        runs: dict[int, _Run] = {}
        self.reused = 0
        result: dict[str, Any] = {}
        pos = _skip(text, 1)
        if text[pos] == "}":
            pos += 1
        else:
            while True:
                if text[pos] != '"':
                    raise _Unread
                key, pos = _SCAN_STRING(text, pos + 1)
                pos = _skip(text, pos)
                if text[pos] != ":":
                    raise _Unread
                pos = _skip(text, pos + 1)
                if text[pos] == "[":
                    result[key], pos = self._array(text, pos, previous, runs)
                else:
                    result[key], pos = _SCAN(text, pos)
                pos = _skip(text, pos)
                if text[pos] == "}":
                    pos += 1
                    break
                if text[pos] != ",":
                    raise _Unread
                pos = _skip(text, pos + 1)
        if _skip(text, pos) != len(text):
            raise _Unread
        self._runs = runs
        return result

    def _array(
        self, text: str, pos: int, previous: dict[int, _Run], runs: dict[int, _Run]
    ) -> tuple[list[Any], int]:
        first = pos = _skip(text, pos + 1)
        if text[pos] == "]":
            return [], pos + 1
        values, ends = self._reused(text, first, previous.get(first))
        if values:
            pos = first + ends[-1]
            pos = _skip(text, pos)
            if text[pos] == "]":
                runs[first] = _Run(text[first : first + ends[-1]], values, ends)
                return list(values), pos + 1
            if text[pos] != ",":
                raise _Unread
            pos = _skip(text, pos + 1)
        values, ends = list(values), list(ends)
        while True:
            value, end = _SCAN(text, pos)
            values.append(value)
            ends.append(end - first)
            pos = _skip(text, end)
            if text[pos] == "]":
                runs[first] = _Run(text[first:end], values, ends)
                return list(values), pos + 1
            if text[pos] != ",":
                raise _Unread
            pos = _skip(text, pos + 1)

    def _reused(self, text: str, first: int, run: _Run | None) -> tuple[list[Any], list[int]]:
        """The longest run of the last body's elements found again at the same offsets (values, ends)."""
        if run is None:
            return [], []
        if text.startswith(run.text, first):  # the common case: the conversation only grew
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
