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

>>> t = transcript_from_messages("demo", [Message.user("hi")])
>>> transcript_chars(t)
2
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast, get_args

from ctxrecover.messages import Image, Message, Role, ToolCall

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

MESSAGE_ROLES: tuple[str, ...] = tuple(sorted(get_args(Role)))
OPENAI_ROLE_ALIASES: dict[str, str] = {"developer": "system"}
ANTHROPIC_ROLES: tuple[str, ...] = ("assistant", "user")

META_KEY = "_meta"
META_FIELDS: tuple[str, ...] = ("facts", "metadata", "name")
META_FIELD_TYPES: dict[str, tuple[type, str]] = {
    "facts": (list, "an array of facts"),
    "metadata": (dict, "an object"),
    "name": (str, "a string"),
}
FACT_FIELDS: tuple[str, ...] = ("kind", "message_index", "value")

# Content-part types and the key holding their text.
OPENAI_TEXT_PARTS: dict[str, str] = {
    "input_text": "text",
    "output_text": "text",
    "refusal": "refusal",
    "text": "text",
}
OPENAI_IMAGE_PARTS: tuple[str, ...] = ("image_url", "input_image")
# Membership tables are tuples: untrusted values may be unhashable (a list as "type").
ANTHROPIC_MARKER_BLOCKS: tuple[str, ...] = ("image", "tool_result", "tool_use")
ANTHROPIC_SKIPPED_BLOCKS: tuple[str, ...] = ("redacted_thinking", "thinking")
TEXT_BLOCK_SEPARATOR = "\n\n"
MESSAGES_SHAPE = 'a JSON array of messages or {"messages": [...]}'
IMAGE_SOURCE_SHAPE = '{"type": "base64", "media_type", "data"} or {"type": "url", "url"}'
DATA_URL_RE = re.compile(r"data:(?P<media_type>[\w.+/-]+);base64,(?P<data>.*)", re.DOTALL)

CLAUDE_CODE_MESSAGE_EVENTS: tuple[str, ...] = ("assistant", "user")
SWE_AGENT_DEMO_FLAG = "is_demo"  # demonstrations are task text, not observations
TAU_BENCH_RUN_KEYS: frozenset[str] = frozenset({"task_id", "traj"})

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
        problem = _fact_problem(self.facts, len(self.messages))
        if problem:
            raise TranscriptError(f"transcript {self.name!r}: {problem}")
        digest = hashlib.sha256()
        for msg in self.messages:
            digest.update(_jsonl_line(msg.to_dict()))
        object.__setattr__(self, "sha256", digest.hexdigest())


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
                {"kind": f.kind, "value": f.value, "message_index": f.message_index}
                for f in transcript.facts
            ],
            "metadata": transcript.metadata,
        }
        try:
            chunks.append(_jsonl_line({META_KEY: meta}))
        except (TypeError, ValueError) as exc:
            problem = f"metadata of {transcript.name!r} is not JSON-serialisable: {exc}"
            raise TranscriptError(f"{path}: {problem}", path=str(path)) from exc
        messages: Iterable[Message] = transcript.messages
    else:
        messages = transcript
    chunks.extend(_jsonl_line(m.to_dict()) for m in messages)
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
        runs = _tau_runs(doc, source)
        if run is None:
            raise source.error(
                f"holds {len(runs)} tau-bench runs: pass run=N (0-{len(runs) - 1}) or call load_runs()"
            )
        if not 0 <= run < len(runs):
            raise source.error(f"run={run} is out of range: the file holds runs 0-{len(runs) - 1}")
        return _tau_run(runs[run], run, source)
    if run is not None:
        raise source.error(f"run={run} applies only to multi-run tau-bench files, this one is {fmt}")
    return _load_single(fmt, doc, source)


def load_runs(path: str | Path, *, format: str | None = None) -> list[Transcript]:
    """Every run of a tau-bench file, or a one-element list for any other format."""
    source = _read(path)
    fmt, doc = _parse(source, format)
    if fmt == "tau-bench":
        return [_tau_run(raw, i, source) for i, raw in enumerate(_tau_runs(doc, source))]
    return [_load_single(fmt, doc, source)]


# -- reading and detection -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Source:
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

    def at(self, pointer: str = "", *, line: int | None = None) -> _Loc:
        return _Loc(self, pointer, line)


@dataclass(frozen=True, slots=True)
class _Loc:
    """Where a value sits: file, JSONL line and JSON path, for error messages."""

    source: _Source
    pointer: str
    line: int | None

    def child(self, key: str | int) -> _Loc:
        if isinstance(key, int):
            return _Loc(self.source, f"{self.pointer}[{key}]", self.line)
        return _Loc(self.source, f"{self.pointer}.{key}" if self.pointer else key, self.line)

    def error(self, text: str) -> TranscriptError:
        prefix = f"{self.pointer}: " if self.pointer else ""
        return self.source.error(prefix + text, line=self.line)

    def bad_field(self, name: str, expected: str, got: object) -> TranscriptError:
        return self.error(f"field {name!r}: expected {expected}, got {_describe(got)}")


def _describe(value: object) -> str:
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


def _one_of(options: Iterable[str]) -> str:
    return "one of " + ", ".join(repr(o) for o in options)


def _read(path: str | Path) -> _Source:
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
    return _Source(display, text)


def _parse(source: _Source, format: str | None) -> tuple[str, Any]:
    """The format and, for whole-document formats, the parsed JSON."""
    if format is not None:
        if format not in FORMATS:
            raise source.error(f"unknown format {format!r}: expected {_one_of(FORMATS)}")
        return format, None if format in LINE_FORMATS else _parse_document(source)
    try:
        doc = _json_loads(source.text)
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


def _json_loads(text: str) -> Any:
    """``json.loads``; nesting deeper than the interpreter can recurse is a JSON error too."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError(TOO_DEEP, text, 0) from None


def _parse_document(source: _Source) -> Any:
    try:
        return _json_loads(source.text)
    except json.JSONDecodeError as exc:
        raise source.error(f"invalid JSON: {exc.msg}", line=exc.lineno, column=exc.colno) from exc


def _unknown_format(source: _Source) -> TranscriptError:
    return source.error(
        f"unknown transcript format: expected {FORMAT_NAMES}; pass format= ({_one_of(FORMATS)}) to force one"
    )


def _first_line_object(text: str) -> dict[str, Any] | None:
    for line in text.split("\n"):
        if line.strip():
            try:
                value = _json_loads(line)
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


def _load_single(fmt: str, doc: Any, source: _Source) -> Transcript:
    loaders = {
        "anthropic": _load_anthropic,
        "claude-code": _load_claude_code,
        "jsonl": _load_jsonl,
        "openai-chat": _load_openai,
        "swe-agent": _load_swe_agent,
    }
    return loaders[fmt](doc, source)


def _finish(
    source: _Source,
    fmt: str,
    messages: list[Message],
    *,
    name: str | None = None,
    facts: tuple[Fact, ...] = (),
    metadata: dict[str, Any] | None = None,
    where: str = "",
) -> Transcript:
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


# -- our JSONL -----------------------------------------------------------------


def _jsonl_line(obj: dict[str, Any]) -> bytes:
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return (text + "\n").encode(ENCODING, ENCODING_ERRORS)


def _json_lines(source: _Source) -> Iterable[tuple[int, Any]]:
    for number, line in enumerate(source.text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            yield number, _json_loads(line)
        except json.JSONDecodeError as exc:
            raise source.error(f"invalid JSON: {exc.msg} (column {exc.colno})", line=number) from exc


def _load_jsonl(_doc: Any, source: _Source) -> Transcript:
    messages: list[Message] = []
    meta: dict[str, Any] = {}
    for number, obj in _json_lines(source):
        loc = source.at(line=number)
        if not isinstance(obj, dict):
            raise loc.error(f"expected a JSON object (a message), got {_describe(obj)}")
        if META_KEY in obj:
            if messages or meta:
                raise loc.error(f"'{META_KEY}' is allowed only on the first line")
            meta = _check_meta(obj, loc)
            continue
        messages.append(_jsonl_message(obj, loc))
    facts_at = source.at(f"{META_KEY}.facts", line=1)
    facts = tuple(_fact(raw, facts_at.child(i)) for i, raw in enumerate(meta.get("facts", ())))
    problem = _fact_problem(facts, len(messages)) if messages else None
    if problem:
        raise facts_at.error(problem)
    name, metadata = meta.get("name"), meta.get("metadata")
    return _finish(source, "jsonl", messages, name=name, facts=facts, metadata=metadata)


def _check_meta(obj: dict[str, Any], loc: _Loc) -> dict[str, Any]:
    meta = obj[META_KEY]
    if len(obj) != 1 or not isinstance(meta, dict):
        raise loc.error(f"the meta line must be {{\"{META_KEY}\": {{...}}}} alone")
    loc = loc.child(META_KEY)
    unknown = sorted(set(meta) - set(META_FIELDS))
    if unknown:
        raise loc.error(f"unknown field(s) {', '.join(map(repr, unknown))}: expected {_one_of(META_FIELDS)}")
    for key, (kind, label) in META_FIELD_TYPES.items():
        if key in meta and not isinstance(meta[key], kind):
            raise loc.bad_field(key, label, meta[key])
    return meta


def _fact(raw: Any, loc: _Loc) -> Fact:
    if not isinstance(raw, dict) or set(raw) != set(FACT_FIELDS):
        raise loc.error(f"a fact must be an object with exactly the fields {_one_of(FACT_FIELDS)}")
    for key in ("kind", "value"):
        if not isinstance(raw[key], str):
            raise loc.bad_field(key, "a string", raw[key])
    index = raw["message_index"]
    if not isinstance(index, int) or isinstance(index, bool):
        raise loc.bad_field("message_index", "an integer", index)
    return Fact(raw["kind"], raw["value"], index)


def _fact_problem(facts: Sequence[Fact], count: int) -> str | None:
    for i, fact in enumerate(facts):
        if not isinstance(fact, Fact):
            return f"facts[{i}] must be a Fact, got {type(fact).__name__}"
        if not 0 <= fact.message_index < count:
            return (
                f"fact {i} ({fact.kind} {fact.value!r}) points at message {fact.message_index}, "
                f"but the transcript has {count} messages"
            )
    return None


def _jsonl_message(obj: dict[str, Any], loc: _Loc) -> Message:
    role = obj.get("role")
    if role not in MESSAGE_ROLES:
        raise loc.bad_field("role", _one_of(MESSAGE_ROLES), role)
    if not isinstance(obj.get("content", ""), str):
        raise loc.bad_field("content", "a string", obj["content"])
    try:
        return Message.from_dict(obj)
    except (TypeError, ValueError) as exc:
        raise loc.error(str(exc)) from exc


# -- OpenAI chat (also tau-bench and SWE-agent) --------------------------------


def _load_openai(doc: Any, source: _Source) -> Transcript:
    if isinstance(doc, dict):
        raw_messages, loc = doc.get("messages"), source.at("messages")
        metadata = {"model": doc["model"]} if isinstance(doc.get("model"), str) else {}
    else:
        raw_messages, loc, metadata = doc, source.at(), {}
    if not isinstance(raw_messages, list):
        raise source.error(f"expected {MESSAGES_SHAPE}, got {_describe(doc)}")
    messages = [_openai_message(raw, loc.child(i)) for i, raw in enumerate(raw_messages)]
    return _finish(source, "openai-chat", messages, metadata=metadata)


def _openai_message(raw: Any, loc: _Loc) -> Message:
    if not isinstance(raw, dict):
        raise loc.error(f"expected a message object, got {_describe(raw)}")
    role = raw.get("role")
    role = OPENAI_ROLE_ALIASES.get(role, role) if isinstance(role, str) else role
    if role not in MESSAGE_ROLES:
        raise loc.bad_field("role", _one_of(MESSAGE_ROLES), raw.get("role"))
    text, images = _openai_content(raw.get("content"), loc)
    name = raw.get("name") if isinstance(raw.get("name"), str) else None
    if role == "assistant":
        calls = _openai_tool_calls(raw.get("tool_calls"), loc.child("tool_calls"))
        return Message.assistant(text, calls, images=images, name=name)
    if role == "tool":
        return Message("tool", text, tool_call_id=_tool_call_id(raw, loc), images=images, name=name)
    return Message(cast(Role, role), text, images=images, name=name)


def _openai_content(value: Any, loc: _Loc) -> tuple[str, tuple[Image, ...]]:
    if value is None:
        return "", ()
    if isinstance(value, str):
        return value, ()
    if not isinstance(value, list):
        raise loc.bad_field("content", "a string, a list of content parts or null", value)
    texts: list[str] = []
    images: list[Image] = []
    for i, part in enumerate(value):
        part_loc = loc.child("content").child(i)
        kind = part.get("type") if isinstance(part, dict) else None
        if isinstance(kind, str) and kind in OPENAI_TEXT_PARTS:
            text = part.get(OPENAI_TEXT_PARTS[kind])
            if not isinstance(text, str):
                raise part_loc.bad_field(OPENAI_TEXT_PARTS[kind], "a string", text)
            texts.append(text)
        elif kind in OPENAI_IMAGE_PARTS:
            url = part.get(kind)
            url = url.get("url") if isinstance(url, dict) else url
            if not isinstance(url, str):
                raise part_loc.bad_field(kind, "an image URL (a string or {\"url\": ...})", url)
            images.append(_image_from_url(url))
        else:
            known = sorted([*OPENAI_TEXT_PARTS, *OPENAI_IMAGE_PARTS])
            raise part_loc.bad_field("type", _one_of(known), kind if isinstance(part, dict) else part)
    return TEXT_BLOCK_SEPARATOR.join(texts), tuple(images)


def _image_from_url(url: str) -> Image:
    match = DATA_URL_RE.fullmatch(url)
    if match:
        return Image(data=match["data"], media_type=match["media_type"])
    return Image(url=url)


def _openai_tool_calls(value: Any, loc: _Loc) -> tuple[ToolCall, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise loc.error(f"expected an array of tool calls, got {_describe(value)}")
    calls: list[ToolCall] = []
    for i, raw in enumerate(value):
        call_loc = loc.child(i)
        if not isinstance(raw, dict):
            raise call_loc.error(f"expected a tool call object, got {_describe(raw)}")
        function = raw.get("function", raw)  # nested Chat Completions form, or flat {id, name, arguments}
        if not isinstance(function, dict):
            raise call_loc.bad_field("function", "an object", function)
        call_id, name, arguments = raw.get("id"), function.get("name"), function.get("arguments")
        if not isinstance(call_id, str):
            raise call_loc.bad_field("id", "a string", call_id)
        if not isinstance(name, str):
            raise call_loc.bad_field("function.name", "a string", name)
        if isinstance(arguments, dict):
            arguments = _arguments_json(arguments)
        elif arguments is None:
            arguments = "{}"
        elif not isinstance(arguments, str):
            raise call_loc.bad_field("function.arguments", "a JSON string or an object", arguments)
        calls.append(ToolCall(call_id, name, arguments))
    return tuple(calls)


def _tool_call_id(raw: dict[str, Any], loc: _Loc) -> str | None:
    value = raw.get("tool_call_id")
    if value is None:
        ids = raw.get("tool_call_ids")  # SWE-agent: a list, in practice of one id
        if ids is None:
            return None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise loc.bad_field("tool_call_ids", "an array of strings", ids)
        return ids[0] if ids else None
    if not isinstance(value, str):
        raise loc.bad_field("tool_call_id", "a string", value)
    return value


def _arguments_json(arguments: Any) -> str:
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def _tau_runs(doc: Any, source: _Source) -> list[Any]:
    if not isinstance(doc, list) or not doc:
        raise source.error(f"expected a non-empty JSON array of tau-bench runs, got {_describe(doc)}")
    return doc


def _tau_run(raw: Any, index: int, source: _Source) -> Transcript:
    loc = source.at(f"[{index}]")
    if not isinstance(raw, dict):
        raise loc.error(f"expected a run object {{task_id, reward, info, traj, trial}}, got {_describe(raw)}")
    traj = raw.get("traj")
    if not isinstance(traj, list):
        raise loc.bad_field("traj", "an array of messages", traj)
    messages = [_openai_message(m, loc.child("traj").child(i)) for i, m in enumerate(traj)]
    metadata = {"run": index, **{k: raw[k] for k in ("task_id", "trial", "reward", "info") if k in raw}}
    name = f"{source.stem}.run{index:03d}"
    return _finish(source, "tau-bench", messages, name=name, metadata=metadata, where=f"[{index}]: ")


def _load_swe_agent(doc: Any, source: _Source) -> Transcript:
    if not isinstance(doc, dict) or not isinstance(doc.get("history"), list):
        raise source.error("expected a SWE-agent trajectory object with a 'history' array")
    loc = source.at("history")
    history = doc["history"]
    messages = [_openai_message(raw, loc.child(i)) for i, raw in enumerate(history)]
    # After the first assistant turn a user message is environment output (the
    # older format's observations, format-error feedback), not the user's words.
    seen_assistant = False
    for i, (raw, msg) in enumerate(zip(history, messages, strict=True)):
        if msg.role == "assistant":
            seen_assistant = True
        elif msg.role == "user" and seen_assistant and not raw.get(SWE_AGENT_DEMO_FLAG):
            messages[i] = msg.replace(agent_feedback=True)
    info = doc.get("info")
    info = info if isinstance(info, dict) else {}
    metadata = {k: info[k] for k in ("exit_status", "submission") if k in info}
    return _finish(source, "swe-agent", messages, metadata=metadata)


# -- Anthropic Messages (also Claude Code) -------------------------------------


def _load_anthropic(doc: Any, source: _Source) -> Transcript:
    raw_messages = doc.get("messages") if isinstance(doc, dict) else doc
    if not isinstance(raw_messages, list):
        raise source.error(f"expected {MESSAGES_SHAPE}, got {_describe(doc)}")
    messages: list[Message] = []
    if isinstance(doc, dict) and doc.get("system") is not None:
        messages.append(_anthropic_system(doc["system"], source.at("system")))
    loc = source.at("messages") if isinstance(doc, dict) else source.at()
    for i, raw in enumerate(raw_messages):
        msg_loc = loc.child(i)
        if not isinstance(raw, dict):
            raise msg_loc.error(f"expected a message object, got {_describe(raw)}")
        messages.extend(_anthropic_message(raw.get("role"), raw.get("content"), msg_loc))
    metadata = {"model": doc["model"]} if isinstance(doc, dict) and isinstance(doc.get("model"), str) else {}
    return _finish(source, "anthropic", messages, metadata=metadata)


def _anthropic_system(value: Any, loc: _Loc) -> Message:
    if isinstance(value, str):
        return Message.system(value)
    if not isinstance(value, list):
        raise loc.error(f"expected a string or a list of text blocks, got {_describe(value)}")
    parts: list[str] = []
    for i, block in enumerate(value):
        text = block.get("text") if isinstance(block, dict) and block.get("type") == "text" else None
        if not isinstance(text, str):
            raise loc.child(i).error("expected a text block {\"type\": \"text\", \"text\": ...}")
        parts.append(text)
    system_parts = tuple(parts) if len(parts) > 1 else ()
    return Message.system(TEXT_BLOCK_SEPARATOR.join(parts), system_parts=system_parts)


def _anthropic_message(role: Any, content: Any, loc: _Loc, *, agent_feedback: bool = False) -> list[Message]:
    """One API message as history messages: each ``tool_result`` block becomes a ``tool`` message."""
    if role not in ANTHROPIC_ROLES:
        raise loc.bad_field("role", _one_of(ANTHROPIC_ROLES), role)
    if isinstance(content, str):
        return [Message(role, content, agent_feedback=agent_feedback and role == "user")]
    if not isinstance(content, list):
        raise loc.bad_field("content", "a string or a list of content blocks", content)
    out: list[Message] = []
    texts: list[str] = []
    images: list[Image] = []
    calls: list[ToolCall] = []

    def flush() -> None:
        if texts or images or calls:
            out.append(
                Message(
                    role,
                    TEXT_BLOCK_SEPARATOR.join(texts),
                    tool_calls=tuple(calls),
                    images=tuple(images),
                    agent_feedback=agent_feedback and role == "user",
                )
            )
        texts.clear()
        images.clear()
        calls.clear()

    for i, block in enumerate(content):
        block_loc = loc.child("content").child(i)
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(_text_field(block, "text", block_loc))
        elif kind == "image":
            images.append(_anthropic_image(block, block_loc))
        elif kind == "tool_use" and role == "assistant":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str):
                raise block_loc.bad_field("id", "a string", call_id)
            if not isinstance(name, str):
                raise block_loc.bad_field("name", "a string", name)
            calls.append(ToolCall(call_id, name, _arguments_json(block.get("input", {}))))
        elif kind == "tool_result" and role == "user":
            flush()
            out.append(_anthropic_tool_result(block, block_loc))
        elif kind not in ANTHROPIC_SKIPPED_BLOCKS:
            allowed = ("image", "text", "tool_use" if role == "assistant" else "tool_result")
            raise block_loc.bad_field("type", f"{_one_of(allowed)} in a {role} message", kind)
    flush()
    return out


def _text_field(block: dict[str, Any], key: str, loc: _Loc) -> str:
    text = block.get(key)
    if not isinstance(text, str):
        raise loc.bad_field(key, "a string", text)
    return text


def _anthropic_image(block: dict[str, Any], loc: _Loc) -> Image:
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "base64" and isinstance(source.get("data"), str):
        return Image(data=source["data"], media_type=str(source.get("media_type") or "image/png"))
    if isinstance(source, dict) and source.get("type") == "url" and isinstance(source.get("url"), str):
        return Image(url=source["url"])
    raise loc.bad_field("source", IMAGE_SOURCE_SHAPE, source)


def _anthropic_tool_result(block: dict[str, Any], loc: _Loc) -> Message:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise loc.bad_field("tool_use_id", "a string", call_id)
    content = block.get("content", "")
    images: tuple[Image, ...] = ()
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts: list[str] = []
        found: list[Image] = []
        for i, part in enumerate(content):
            part_loc = loc.child("content").child(i)
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                texts.append(_text_field(part, "text", part_loc))
            elif kind == "image":
                found.append(_anthropic_image(part, part_loc))
            else:
                raise part_loc.bad_field("type", _one_of(("image", "text")), kind)
        text, images = TEXT_BLOCK_SEPARATOR.join(texts), tuple(found)
    else:
        raise loc.bad_field("content", "a string or a list of text/image blocks", content)
    return Message.tool(call_id, text, images=images, is_error=bool(block.get("is_error")))


def _load_claude_code(_doc: Any, source: _Source) -> Transcript:
    messages: list[Message] = []
    assistant_at: dict[str, int] = {}  # API message id -> index of its merged message
    skipped: dict[str, int] = {}
    metadata: dict[str, Any] = {}
    for number, event in _json_lines(source):
        loc = source.at(line=number)
        if not isinstance(event, dict):
            raise loc.error(f"expected a JSON object (an event), got {_describe(event)}")
        kind = event.get("type")
        if kind not in CLAUDE_CODE_MESSAGE_EVENTS or event.get("isSidechain"):
            label = "sidechain" if event.get("isSidechain") else str(kind)
            skipped[label] = skipped.get(label, 0) + 1
            continue
        message = event.get("message")
        if not isinstance(message, dict):
            raise loc.bad_field("message", "an Anthropic message object", message)
        if isinstance(event.get("sessionId"), str):
            metadata.setdefault("session_id", event["sessionId"])
        if isinstance(message.get("model"), str):
            metadata.setdefault("model", message["model"])
        is_meta = bool(event.get("isMeta"))  # hook feedback and other injected user text
        converted = _anthropic_message(
            message.get("role"), message.get("content"), loc.child("message"), agent_feedback=is_meta
        )
        message_id = message.get("id")
        if kind == "assistant" and isinstance(message_id, str) and len(converted) == 1:
            # Claude Code logs one event per content block of a streamed API message.
            if message_id in assistant_at:
                index = assistant_at[message_id]
                messages[index] = _merge_assistant(messages[index], converted[0])
                continue
            assistant_at[message_id] = len(messages)
        messages.extend(converted)
    if skipped:
        metadata["skipped_events"] = skipped
    return _finish(source, "claude-code", messages, metadata=metadata)


def _merge_assistant(first: Message, more: Message) -> Message:
    text = TEXT_BLOCK_SEPARATOR.join(t for t in (first.content, more.content) if t)
    return first.replace(
        content=text, tool_calls=first.tool_calls + more.tool_calls, images=first.images + more.images
    )
