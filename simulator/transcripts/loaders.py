"""Load, validate and write conversation transcripts for the simulator.

A :class:`Transcript` is a named, hashed tuple of ``ctxrecover`` messages plus
the tagged facts that retention probes look for. :func:`load_transcript`
auto-detects the format (or takes ``format=``):

==============  ===============================================================
``jsonl``        ours: one ``Message.to_dict()`` per line, optional first line
                 ``{"_meta": {"name", "facts", "metadata"}}``
``openai-chat``  a JSON list of Chat Completions messages or ``{"messages": [...]}``
``anthropic``    Messages API JSON ``{"system"?, "messages": [...]}``; each
                 ``tool_result`` block becomes a ``tool`` message
``tau-bench``    a JSON list of runs ``{task_id, reward, info, traj, trial}``;
                 pick one with ``run=N`` or take all with :func:`load_runs`
``swe-agent``    a ``.traj`` file; its ``history`` is the model's conversation
                 (older files without tool calls: observations are ``user``
                 messages, loaded with ``agent_feedback=True``)
``claude-code``  a Claude Code session JSONL; assistant events of one API
                 message are merged, non-message events skipped
==============  ===============================================================

Content is kept exactly as recorded (no newline normalisation). Malformed input
raises :class:`TranscriptError` naming the file, the line (JSONL) or JSON path,
and the field. Structural problems a provider would reject (dangling tool
calls, orphan results) are not load errors: the simulator needs them.

The foreign formats' loaders live in :mod:`simulator.transcripts.formats`, the
transcript value and its errors in :mod:`simulator.transcripts.model` (re-exported
here); detection, our JSONL and the entry points are here.

>>> t = transcript_from_messages("demo", [Message.user("hi")])
>>> transcript_chars(t)
2
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ctxrecover.messages import Message
from simulator.transcripts.formats import (
    load_anthropic,
    load_claude_code,
    load_openai,
    load_swe_agent,
    tau_run,
    tau_runs,
)
from simulator.transcripts.model import (
    ENCODING,
    ENCODING_ERRORS,
    MESSAGE_ROLES,
    Fact,
    Loc,
    Source,
    Transcript,
    TranscriptError,
    describe,
    fact_problem,
    finish,
    json_lines,
    json_loads,
    jsonl_line,
    one_of,
)

__all__ = [
    "FORMATS",
    "Fact",
    "Transcript",
    "TranscriptError",
    "load_runs",
    "load_transcript",
    "transcript_chars",
    "transcript_from_messages",
    "write_jsonl",
]

FORMATS: tuple[str, ...] = ("anthropic", "claude-code", "jsonl", "openai-chat", "swe-agent", "tau-bench")
LINE_FORMATS: frozenset[str] = frozenset({"claude-code", "jsonl"})
FORMAT_NAMES = (
    "OpenAI chat JSON, Anthropic Messages JSON, our JSONL, tau-bench runs JSON, "
    "a SWE-agent .traj or a Claude Code session JSONL"
)

META_KEY = "_meta"
META_FIELDS: tuple[str, ...] = ("facts", "metadata", "name")
META_FIELD_TYPES: dict[str, tuple[type, str]] = {
    "facts": (list, "an array of facts"),
    "metadata": (dict, "an object"),
    "name": (str, "a string"),
}
FACT_FIELDS: tuple[str, ...] = ("kind", "message_index", "value")

# Membership tables are tuples: untrusted values may be unhashable (a list as "type").
ANTHROPIC_MARKER_BLOCKS: tuple[str, ...] = ("image", "tool_result", "tool_use")
TAU_BENCH_RUN_KEYS: frozenset[str] = frozenset({"task_id", "traj"})


def transcript_from_messages(
    name: str,
    messages: Iterable[Message],
    facts: Iterable[Fact] = (),
    *,
    metadata: dict[str, Any] | None = None,
) -> Transcript:
    """An in-memory transcript (``format="memory"``, no source file)."""
    return Transcript(
        name=name,
        source_path=None,
        format="memory",
        messages=tuple(messages),
        facts=tuple(facts),
        metadata=dict(metadata or {}),
    )


def transcript_chars(transcript: Transcript | Iterable[Message]) -> int:
    """Total ``len(content)`` over the messages (tool-call arguments and images excluded)."""
    messages = transcript.messages if isinstance(transcript, Transcript) else transcript
    return sum(len(m.content) for m in messages)


def write_jsonl(transcript: Transcript | Iterable[Message], path: str | Path) -> int:
    """Write our JSONL (a ``_meta`` line first for a :class:`Transcript`); returns bytes written.

    ``load_transcript`` of the result gives back equal messages, facts,
    metadata, name and ``sha256``.
    """
    chunks: list[bytes] = []
    if isinstance(transcript, Transcript):
        meta = {
            "name": transcript.name,
            "facts": [
                {"kind": f.kind, "value": f.value, "message_index": f.message_index} for f in transcript.facts
            ],
            "metadata": transcript.metadata,
        }
        try:
            chunks.append(jsonl_line({META_KEY: meta}))
        except (TypeError, ValueError) as exc:
            problem = f"metadata of {transcript.name!r} is not JSON-serialisable: {exc}"
            raise TranscriptError(f"{path}: {problem}", path=str(path)) from exc
        messages: Iterable[Message] = transcript.messages
    else:
        messages = transcript
    chunks.extend(jsonl_line(m.to_dict()) for m in messages)
    data = b"".join(chunks)
    Path(path).write_bytes(data)
    return len(data)


def load_transcript(path: str | Path, *, format: str | None = None, run: int | None = None) -> Transcript:
    """Load one transcript, detecting its format unless ``format`` is given.

    ``run`` picks one run (0-based) of a multi-run tau-bench file, where it is
    required; other formats reject it.
    """
    source = _read(path)
    fmt, doc = _parse(source, format)
    if fmt == "tau-bench":
        runs = tau_runs(doc, source)
        if run is None:
            raise source.error(
                f"holds {len(runs)} tau-bench runs: pass run=N (0-{len(runs) - 1}) or call load_runs()"
            )
        if not 0 <= run < len(runs):
            raise source.error(f"run={run} is out of range: the file holds runs 0-{len(runs) - 1}")
        return tau_run(runs[run], run, source)
    if run is not None:
        raise source.error(f"run={run} applies only to multi-run tau-bench files, this one is {fmt}")
    return _load_single(fmt, doc, source)


def load_runs(path: str | Path, *, format: str | None = None) -> list[Transcript]:
    """Every run of a tau-bench file, or a one-element list for any other format."""
    source = _read(path)
    fmt, doc = _parse(source, format)
    if fmt == "tau-bench":
        return [tau_run(raw, i, source) for i, raw in enumerate(tau_runs(doc, source))]
    return [_load_single(fmt, doc, source)]


# -- reading and detection -----------------------------------------------------


def _read(path: str | Path) -> Source:
    display = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise TranscriptError(f"{display}: cannot read transcript: {reason}", path=display) from exc
    try:
        text = raw.decode(ENCODING, ENCODING_ERRORS)
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise TranscriptError(
            f"{display}:{line}: not UTF-8 text (byte {exc.start}: {exc.reason})", path=display, line=line
        ) from exc
    if not text.strip():
        raise TranscriptError(f"{display}: empty transcript: the file has no content", path=display)
    return Source(display, text)


def _parse(source: Source, format: str | None) -> tuple[str, Any]:
    """The format and, for whole-document formats, the parsed JSON."""
    if format is not None:
        if format not in FORMATS:
            raise source.error(f"unknown format {format!r}: expected {one_of(FORMATS)}")
        return format, None if format in LINE_FORMATS else _parse_document(source)
    try:
        doc = json_loads(source.text)
    except json.JSONDecodeError as exc:
        first = _first_line_object(source.text)
        if first is None:
            raise source.error(f"invalid JSON: {exc.msg}", line=exc.lineno, column=exc.colno) from exc
        fmt = _detect_line(first)
        if fmt is None:
            raise _unknown_format(source) from exc
        return fmt, None
    fmt = _detect_document(doc)
    if fmt is None:
        raise _unknown_format(source)
    return fmt, None if fmt in LINE_FORMATS else doc


def _parse_document(source: Source) -> Any:
    try:
        return json_loads(source.text)
    except json.JSONDecodeError as exc:
        raise source.error(f"invalid JSON: {exc.msg}", line=exc.lineno, column=exc.colno) from exc


def _unknown_format(source: Source) -> TranscriptError:
    return source.error(
        f"unknown transcript format: expected {FORMAT_NAMES}; pass format= ({one_of(FORMATS)}) to force one"
    )


def _first_line_object(text: str) -> dict[str, Any] | None:
    for line in text.split("\n"):
        if line.strip():
            try:
                value = json_loads(line)
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


def _detect_line(obj: dict[str, Any]) -> str | None:
    if META_KEY in obj or ("role" in obj and "type" not in obj):
        return "jsonl"
    if isinstance(obj.get("type"), str) and ("message" in obj or "sessionId" in obj or "uuid" in obj):
        return "claude-code"
    return None


def _has_anthropic_blocks(messages: list[Any]) -> bool:
    return any(
        isinstance(block, dict) and block.get("type") in ANTHROPIC_MARKER_BLOCKS
        for msg in messages
        if isinstance(msg, dict) and isinstance(msg.get("content"), list)
        for block in msg["content"]
    )


def _detect_document(doc: Any) -> str | None:
    if isinstance(doc, list):
        head = doc[0] if doc else None
        if isinstance(head, dict) and TAU_BENCH_RUN_KEYS <= head.keys():
            return "tau-bench"
        if isinstance(head, dict) and "role" in head:
            return "anthropic" if _has_anthropic_blocks(doc) else "openai-chat"
        return None
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("history"), list) and ("trajectory" in doc or "info" in doc):
        return "swe-agent"
    if isinstance(doc.get("messages"), list):
        return "anthropic" if "system" in doc or _has_anthropic_blocks(doc["messages"]) else "openai-chat"
    return _detect_line(doc)  # a one-line JSONL file is also a JSON document


def _load_single(fmt: str, doc: Any, source: Source) -> Transcript:
    loaders = {
        "anthropic": load_anthropic,
        "claude-code": load_claude_code,
        "jsonl": _load_jsonl,
        "openai-chat": load_openai,
        "swe-agent": load_swe_agent,
    }
    return loaders[fmt](doc, source)


# -- our JSONL -----------------------------------------------------------------


def _load_jsonl(_doc: Any, source: Source) -> Transcript:
    messages: list[Message] = []
    meta: dict[str, Any] = {}
    for number, obj in json_lines(source):
        loc = source.at(line=number)
        if not isinstance(obj, dict):
            raise loc.error(f"expected a JSON object (a message), got {describe(obj)}")
        if META_KEY in obj:
            if messages or meta:
                raise loc.error(f"'{META_KEY}' is allowed only on the first line")
            meta = _check_meta(obj, loc)
            continue
        messages.append(_jsonl_message(obj, loc))
    facts_at = source.at(f"{META_KEY}.facts", line=1)
    facts = tuple(_fact(raw, facts_at.child(i)) for i, raw in enumerate(meta.get("facts", ())))
    problem = fact_problem(facts, len(messages)) if messages else None
    if problem:
        raise facts_at.error(problem)
    name, metadata = meta.get("name"), meta.get("metadata")
    return finish(source, "jsonl", messages, name=name, facts=facts, metadata=metadata)


def _check_meta(obj: dict[str, Any], loc: Loc) -> dict[str, Any]:
    meta = obj[META_KEY]
    if len(obj) != 1 or not isinstance(meta, dict):
        raise loc.error(f'the meta line must be {{"{META_KEY}": {{...}}}} alone')
    loc = loc.child(META_KEY)
    unknown = sorted(set(meta) - set(META_FIELDS))
    if unknown:
        raise loc.error(f"unknown field(s) {', '.join(map(repr, unknown))}: expected {one_of(META_FIELDS)}")
    for key, (kind, label) in META_FIELD_TYPES.items():
        if key in meta and not isinstance(meta[key], kind):
            raise loc.bad_field(key, label, meta[key])
    return meta


def _fact(raw: Any, loc: Loc) -> Fact:
    if not isinstance(raw, dict) or set(raw) != set(FACT_FIELDS):
        raise loc.error(f"a fact must be an object with exactly the fields {one_of(FACT_FIELDS)}")
    for key in ("kind", "value"):
        if not isinstance(raw[key], str):
            raise loc.bad_field(key, "a string", raw[key])
    index = raw["message_index"]
    if not isinstance(index, int) or isinstance(index, bool):
        raise loc.bad_field("message_index", "an integer", index)
    return Fact(raw["kind"], raw["value"], index)


def _jsonl_message(obj: dict[str, Any], loc: Loc) -> Message:
    role = obj.get("role")
    if role not in MESSAGE_ROLES:
        raise loc.bad_field("role", one_of(MESSAGE_ROLES), role)
    if not isinstance(obj.get("content", ""), str):
        raise loc.bad_field("content", "a string", obj["content"])
    try:
        return Message.from_dict(obj)
    except (TypeError, ValueError) as exc:
        raise loc.error(str(exc)) from exc
