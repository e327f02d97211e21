"""The message model: what a conversation history is made of.

A history is an ordered ``list[Message]``. Messages are frozen values: every
pass returns new messages (``msg.replace(content=...)``) and never mutates its
input, so per-message caches (weight, wire sizes) stay valid for the lifetime
of a message object.

Constructors check every field's type and raise :class:`~ctxrecover.errors.MessageError`
naming it (``Message.user(None)`` fails here, not three turns later in a wire
encoder). :func:`check_encodable` finds text no provider accepts (lone
surrogates); ``Session.add`` refuses such a message.

>>> m = Message.user("hello")
>>> m.replace(content="hi").content
'hi'
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Literal

from ctxrecover.errors import MessageError, NestingTooDeepError, UnencodableTextError

__all__ = ["IMAGE_DETAILS", "MAX_ARGUMENT_DEPTH", "Image", "Message", "Role", "ToolCall", "check_encodable"]

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})
# Deep enough for any real tool schema, far below the interpreter's recursion limit
# (json.loads/dumps and every walk over parsed arguments recurse once per level).
MAX_ARGUMENT_DEPTH = 100
_JSON_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET_RE = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_CALL_FIELDS = ("id", "name", "arguments")
_OPTIONAL_TEXT_FIELDS = ("tool_call_id", "name", "error_code")
_IMAGE_FIELDS = ("data", "url", "media_type", "detail")
IMAGE_DETAILS: tuple[str, ...] = ("low", "high", "auto")  # OpenAI's image detail levels
_STR_OR_NONE = (str, type(None))


def _type_name(value: object) -> str:
    return "None" if value is None else type(value).__name__


def _require(owner: str, name: str, value: object, kind: type | tuple[type, ...], what: str) -> None:
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        shown = "" if value is None else f" ({value!r:.80})"
        raise MessageError(f"{owner}.{name} must be {what}, got {_type_name(value)}{shown}", field=name)


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def json_depth(text: str) -> int:
    """How deep brackets nest in ``text`` outside JSON strings (0 for none); never recurses."""
    if text.count("[") + text.count("{") == 0:
        return 0
    brackets = _NOT_BRACKET_RE.sub("", _JSON_STRING_RE.sub("", text))
    return max(0, max(accumulate(_BRACKET_STEP[c] for c in brackets), default=0))


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One native tool call requested by an assistant message.

    ``arguments`` is the JSON text of the arguments as the provider sent it
    (``"{}"`` when there are none), nested at most :data:`MAX_ARGUMENT_DEPTH`
    levels (deeper raises :class:`~ctxrecover.errors.NestingTooDeepError`: every
    consumer of the JSON would otherwise hit the interpreter's recursion limit).
    """

    id: str
    name: str
    arguments: str = "{}"

    def __post_init__(self) -> None:
        if not (type(self.id) is type(self.name) is type(self.arguments) is str):
            _require("ToolCall", "id", self.id, str, "str")
            _require("ToolCall", "name", self.name, str, "str")
            _require("ToolCall", "arguments", self.arguments, str, "str (JSON text: use json.dumps)")
        # count first: a text with fewer brackets than the limit cannot nest deeper
        if self.arguments.count("[") + self.arguments.count("{") > MAX_ARGUMENT_DEPTH:
            depth = json_depth(self.arguments)
            if depth > MAX_ARGUMENT_DEPTH:
                raise NestingTooDeepError(
                    f"ToolCall.arguments of call {self.id!r} nests {depth} levels deep; at most "
                    f"{MAX_ARGUMENT_DEPTH} are accepted — flatten the arguments",
                    field="arguments",
                    depth=depth,
                    limit=MAX_ARGUMENT_DEPTH,
                )


@dataclass(frozen=True, slots=True)
class Image:
    """An image attached to a message: inline base64 ``data`` or a ``url``.

    ``detail`` is OpenAI's ``low``/``high``/``auto`` (sent in its two wire formats, where
    ``low`` costs a fixed 85 tokens); ``None`` sends none, which the API reads as ``auto``.
    """

    data: str | None = None
    url: str | None = None
    media_type: str = "image/png"
    detail: str | None = None

    def __post_init__(self) -> None:
        _require("Image", "data", self.data, (str, type(None)), "str (base64) or None")
        _require("Image", "url", self.url, (str, type(None)), "str or None")
        _require("Image", "media_type", self.media_type, str, "str such as 'image/png'")
        if self.data is None and self.url is None:
            raise MessageError("Image needs base64 data or a url", field="data")
        if self.detail is not None and self.detail not in IMAGE_DETAILS:
            raise MessageError(
                f"Image.detail must be one of {', '.join(IMAGE_DETAILS)} or None, got {self.detail!r:.80}",
                field="detail",
            )


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a conversation history.

    Meta flags:

    - ``preserve_verbatim``: the model asked to keep it whole (e.g. an
      ``@recall`` result); compaction keeps it or, past the verbatim cap,
      archives it behind a recall stub.
    - ``is_summary`` / ``summary_of``: a compaction product covering
      ``summary_of`` earlier messages.
    - ``agent_feedback``: a user-role message that carries tool/agent output
      (a candidate for microcompact, unlike real user text).
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    error_code: str | None = None
    images: tuple[Image, ...] = ()
    system_parts: tuple[str, ...] = ()
    preserve_verbatim: bool = False
    is_summary: bool = False
    summary_of: int = 0
    agent_feedback: bool = False
    # Per-message memo of derived sizes (weight, wire fragment sizes). Valid for
    # the object's lifetime because messages are immutable; never compared.
    _cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        # One cheap test for the usual, well-typed message; the field-by-field check names what is wrong.
        str_or_none = _STR_OR_NONE
        if not (
            type(self.content) is str
            and self.role in ROLES
            and type(self.tool_calls) is tuple
            and type(self.images) is tuple
            and type(self.system_parts) is tuple
            and type(self.tool_call_id) in str_or_none
            and type(self.name) in str_or_none
            and type(self.error_code) in str_or_none
            and type(self.is_error) is type(self.preserve_verbatim) is bool
            and type(self.is_summary) is type(self.agent_feedback) is bool
            and type(self.summary_of) is int
            and self.summary_of >= 0
            and (not self.tool_calls or all(type(call) is ToolCall for call in self.tool_calls))
            and (not self.images or all(type(image) is Image for image in self.images))
            and (not self.system_parts or all(type(part) is str for part in self.system_parts))
        ):
            self._check_fields()
        if self.tool_calls and self.role != "assistant":
            raise MessageError("only assistant messages carry tool_calls", field="tool_calls")

    def _check_fields(self) -> None:
        """Check every field (lists become tuples); raise MessageError naming the first bad one."""
        if not isinstance(self.role, str) or self.role not in ROLES:
            raise MessageError(
                f"Message.role must be one of {sorted(ROLES)}, got {self.role!r:.80}", field="role"
            )
        _require("Message", "content", self.content, str, "str")
        for name, kind in _SEQUENCE_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, tuple):
                if isinstance(value, str | bytes | dict) or not hasattr(value, "__iter__"):
                    raise MessageError(
                        f"Message.{name} must be a tuple or list of {kind.__name__}, got {_type_name(value)}",
                        field=name,
                    )
                value = tuple(value)
                object.__setattr__(self, name, value)
            for i, item in enumerate(value):
                if not isinstance(item, kind):
                    raise MessageError(
                        f"Message.{name}[{i}] must be a {kind.__name__}, "
                        f"got {_type_name(item)}: {item!r:.80}",
                        field=f"{name}[{i}]",
                    )
        for name in _OPTIONAL_TEXT_FIELDS:
            _require("Message", name, getattr(self, name), (str, type(None)), "str or None")
        for name in ("is_error", "preserve_verbatim", "is_summary", "agent_feedback"):
            _require("Message", name, getattr(self, name), bool, "bool")
        _require("Message", "summary_of", self.summary_of, int, "int")
        if self.summary_of < 0:
            raise MessageError(f"Message.summary_of must be >= 0, got {self.summary_of}", field="summary_of")

    # -- what a provider accepts -------------------------------------------
    def wire_texts(self) -> list[tuple[str, str]]:
        """Every text this message puts on the wire, as ``(field, text)`` pairs."""
        texts = [("content", self.content)]
        for i, call in enumerate(self.tool_calls):
            texts += [(f"tool_calls[{i}].{name}", getattr(call, name)) for name in _CALL_FIELDS]
        texts += [(name, value) for name in _OPTIONAL_TEXT_FIELDS if (value := getattr(self, name))]
        texts += [(f"system_parts[{i}]", part) for i, part in enumerate(self.system_parts)]
        for i, image in enumerate(self.images):
            texts += [
                (f"images[{i}].{name}", value) for name in _IMAGE_FIELDS if (value := getattr(image, name))
            ]
        return texts

    # -- constructors -----------------------------------------------------
    @classmethod
    def system(cls, content: str, **kwargs: Any) -> Message:
        return cls("system", content, **kwargs)

    @classmethod
    def user(cls, content: str, **kwargs: Any) -> Message:
        return cls("user", content, **kwargs)

    @classmethod
    def assistant(
        cls, content: str = "", tool_calls: tuple[ToolCall, ...] | list[ToolCall] = (), **kwargs: Any
    ) -> Message:
        return cls("assistant", content, tool_calls=tuple(tool_calls), **kwargs)

    @classmethod
    def tool(cls, tool_call_id: str, content: str, **kwargs: Any) -> Message:
        return cls("tool", content, tool_call_id=tool_call_id, **kwargs)

    # -- copies -----------------------------------------------------------
    def replace(self, **changes: Any) -> Message:
        """A copy with ``changes`` applied (fresh size cache)."""
        return dataclasses.replace(self, **changes)

    def with_content(self, content: str) -> Message:
        """A copy with new content and every other field unchanged."""
        return dataclasses.replace(self, content=content)

    # -- plain data -------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict that omits defaults (our JSONL transcript line)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls
            ]
        for name in (
            "tool_call_id",
            "name",
            "is_error",
            "error_code",
            "preserve_verbatim",
            "is_summary",
            "summary_of",
            "agent_feedback",
        ):
            value = getattr(self, name)
            if value:
                out[name] = value
        if self.images:
            out["images"] = [{k: v for k in _IMAGE_FIELDS if (v := getattr(i, k))} for i in self.images]
        if self.system_parts:
            out["system_parts"] = list(self.system_parts)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        """Inverse of :meth:`to_dict`; raises :class:`~ctxrecover.errors.MessageError` (a ``ValueError``
        and a ``TypeError``) naming the bad field."""
        if not isinstance(data, dict):
            raise MessageError(f"a message must be a JSON object, got {type(data).__name__}", field="message")
        unknown = set(data) - _DICT_FIELDS
        if unknown:
            names = ", ".join(sorted(unknown))
            raise MessageError(f"unknown message field(s): {names}", field=sorted(unknown)[0])
        if "role" not in data:
            raise MessageError("message field 'role' is missing", field="role")
        kwargs = dict(data)
        try:
            kwargs["tool_calls"] = tuple(
                ToolCall(str(c["id"]), str(c["name"]), c.get("arguments") or "{}")
                for c in data.get("tool_calls") or ()
            )
            kwargs["images"] = tuple(Image(**i) for i in data.get("images") or ())
        except (KeyError, TypeError, ValueError) as exc:
            raise MessageError(f"bad tool_calls/images field: {exc}", field="tool_calls/images") from exc
        kwargs["system_parts"] = tuple(data.get("system_parts") or ())
        return cls(**kwargs)


_DICT_FIELDS = frozenset(f.name for f in dataclasses.fields(Message) if not f.name.startswith("_"))
_SEQUENCE_FIELDS: tuple[tuple[str, type], ...] = (
    ("tool_calls", ToolCall),
    ("images", Image),
    ("system_parts", str),
)


def check_encodable(msg: Message, *, index: int | None = None) -> None:
    """Raise :class:`~ctxrecover.errors.UnencodableTextError` when ``msg`` holds a lone surrogate.

    Names the field, the char offset and (when given) the message's ``index``
    in the history. A lone surrogate (``"\\ud800"``, e.g. text decoded with
    ``surrogateescape`` or a UTF-16 string cut mid-pair) has no UTF-8 form;
    its JSON escape is rejected by providers (Anthropic: ``no low surrogate in
    string``), so it is refused where it enters a session.
    """
    for name, text in msg.wire_texts():
        if text.isascii():
            continue
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            where = f"message {index}" if index is not None else "message"
            raise UnencodableTextError(
                f"{where}: {name} holds a lone surrogate {text[exc.start]!r} at char {exc.start}, which "
                f"no provider accepts — decode its source with errors='replace' (or drop the char)",
                field=name,
                offset=exc.start,
                index=index,
            ) from None
