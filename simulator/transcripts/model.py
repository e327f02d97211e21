"""The transcript value and its load errors: :class:`Transcript`, :class:`Fact`, :class:`TranscriptError`.

Every loader reads through a :class:`Source` and points at values with a
:class:`Loc`, so an error names the file, the JSONL line and the JSON path of the
offending field. ``Transcript.sha256`` hashes the canonical JSONL bytes of the
messages: equal histories hash equally whatever file they came from.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from ctxrecover.messages import Message, Role

__all__ = [
    "ENCODING",
    "ENCODING_ERRORS",
    "Fact",
    "Loc",
    "MESSAGE_ROLES",
    "Source",
    "Transcript",
    "TranscriptError",
    "describe",
    "fact_problem",
    "finish",
    "json_lines",
    "json_loads",
    "jsonl_line",
    "one_of",
]

MESSAGE_ROLES: tuple[str, ...] = tuple(sorted(get_args(Role)))
ENCODING = "utf-8"
ENCODING_ERRORS = "surrogatepass"  # lone surrogates from JSON escapes survive a round trip
PREVIEW_CHARS = 40
TOO_DEEP = "arrays or objects nested too deeply"


class TranscriptError(ValueError):
    """A transcript cannot be read or is malformed.

    The message starts with ``file:line:`` (JSONL) or ``file: json.path:`` and
    names the offending field, e.g.
    ``fixtures/x.jsonl:12: field 'role': expected one of 'assistant', ...``.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


@dataclass(frozen=True, slots=True)
class Fact:
    """A unique string planted in ``messages[message_index]`` for retention probes.

    ``kind`` says what it is (``path``, ``ticket``, ``error``, ...).
    """

    kind: str
    value: str
    message_index: int


@dataclass(frozen=True, slots=True)
class Transcript:
    """A named conversation: messages, tagged facts and free-form metadata.

    ``sha256`` is computed from the canonical JSONL bytes of the messages
    (what :func:`write_jsonl` writes, without the ``_meta`` line), so equal
    histories hash equally whatever file they came from.
    """

    name: str
    source_path: str | None
    format: str
    messages: tuple[Message, ...]
    facts: tuple[Fact, ...] = ()
    sha256: str = field(init=False)
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(self.messages))
        object.__setattr__(self, "facts", tuple(self.facts))
        for i, msg in enumerate(self.messages):
            if not isinstance(msg, Message):
                raise TranscriptError(
                    f"transcript {self.name!r}: messages[{i}] must be a Message, got {type(msg).__name__}"
                )
        if not self.messages:
            raise TranscriptError(f"transcript {self.name!r}: empty transcript: no messages")
        problem = fact_problem(self.facts, len(self.messages))
        if problem:
            raise TranscriptError(f"transcript {self.name!r}: {problem}")
        digest = hashlib.sha256()
        for msg in self.messages:
            digest.update(jsonl_line(msg.to_dict()))
        object.__setattr__(self, "sha256", digest.hexdigest())


@dataclass(frozen=True, slots=True)
class Source:
    """A transcript file's path and text, for loaders and their located errors."""

    path: str
    text: str

    @property
    def stem(self) -> str:
        return Path(self.path).stem

    def error(self, text: str, *, line: int | None = None, column: int | None = None) -> TranscriptError:
        where = self.path
        if line is not None:
            where += f":{line}"
            if column is not None:
                where += f":{column}"
        return TranscriptError(f"{where}: {text}", path=self.path, line=line)

    def at(self, pointer: str = "", *, line: int | None = None) -> Loc:
        return Loc(self, pointer, line)


@dataclass(frozen=True, slots=True)
class Loc:
    """Where a value sits: file, JSONL line and JSON path, for error messages."""

    source: Source
    pointer: str
    line: int | None

    def child(self, key: str | int) -> Loc:
        if isinstance(key, int):
            return Loc(self.source, f"{self.pointer}[{key}]", self.line)
        return Loc(self.source, f"{self.pointer}.{key}" if self.pointer else key, self.line)

    def error(self, text: str) -> TranscriptError:
        prefix = f"{self.pointer}: " if self.pointer else ""
        return self.source.error(prefix + text, line=self.line)

    def bad_field(self, name: str, expected: str, got: object) -> TranscriptError:
        return self.error(f"field {name!r}: expected {expected}, got {describe(got)}")


def describe(value: object) -> str:
    """How an error message shows a JSON value: its type, or a short preview of a string."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        shown = value if len(value) <= PREVIEW_CHARS else value[:PREVIEW_CHARS] + "..."
        return repr(shown)
    if isinstance(value, list):
        return "array"
    return "object"


def one_of(options: Iterable[str]) -> str:
    """``one of 'a', 'b'`` for an error message."""
    return "one of " + ", ".join(repr(o) for o in options)


def json_loads(text: str) -> Any:
    """``json.loads``; nesting deeper than the interpreter can recurse is a JSON error too."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError(TOO_DEEP, text, 0) from None


def jsonl_line(obj: dict[str, Any]) -> bytes:
    """``obj`` as one canonical JSONL line (compact; lone surrogates survive)."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return (text + "\n").encode(ENCODING, ENCODING_ERRORS)


def json_lines(source: Source) -> Iterable[tuple[int, Any]]:
    """``(line number, value)`` per non-blank line; an invalid line raises naming it."""
    for number, line in enumerate(source.text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            yield number, json_loads(line)
        except json.JSONDecodeError as exc:
            raise source.error(f"invalid JSON: {exc.msg} (column {exc.colno})", line=number) from exc


def fact_problem(facts: Sequence[Fact], count: int) -> str | None:
    """What is wrong with ``facts`` for a transcript of ``count`` messages, or None."""
    for i, fact in enumerate(facts):
        if not isinstance(fact, Fact):
            return f"facts[{i}] must be a Fact, got {type(fact).__name__}"
        if not 0 <= fact.message_index < count:
            return (
                f"fact {i} ({fact.kind} {fact.value!r}) points at message {fact.message_index}, "
                f"but the transcript has {count} messages"
            )
    return None


def finish(
    source: Source,
    fmt: str,
    messages: list[Message],
    *,
    name: str | None = None,
    facts: tuple[Fact, ...] = (),
    metadata: dict[str, Any] | None = None,
    where: str = "",
) -> Transcript:
    """The :class:`Transcript` read from ``source``; no messages raises (prefixed by ``where``)."""
    if not messages:
        raise source.error(f"{where}empty transcript: no messages found")
    return Transcript(
        name=name or source.stem,
        source_path=source.path,
        format=fmt,
        messages=tuple(messages),
        facts=facts,
        metadata=metadata or {},
    )
