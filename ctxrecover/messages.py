"""The message model: what a conversation history is made of.

A history is an ordered ``list[Message]``. Messages are frozen values: every
pass returns new messages (``msg.replace(content=...)``) and never mutates its
input, so per-message caches (weight, wire sizes) stay valid for the lifetime
of a message object.

>>> m = Message.user("hello")
>>> m.replace(content="hi").content
'hi'
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Image", "Message", "Role", "ToolCall"]

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One native tool call requested by an assistant message.

    ``arguments`` is the JSON text of the arguments as the provider sent it
    (``"{}"`` when there are none).
    """

    id: str
    name: str
    arguments: str = "{}"


@dataclass(frozen=True, slots=True)
class Image:
    """An image attached to a message: inline base64 ``data`` or a ``url``."""

    data: str | None = None
    url: str | None = None
    media_type: str = "image/png"

    def __post_init__(self) -> None:
        if self.data is None and self.url is None:
            raise ValueError("Image needs base64 data or a url")


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
    _cache: dict[str, Any] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(
                f"Message.role must be one of {sorted(ROLES)}, got {self.role!r}"
            )
        if not isinstance(self.content, str):
            raise TypeError(
                f"Message.content must be str, got {type(self.content).__name__}"
            )
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        if not isinstance(self.tool_calls, tuple):
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        if not isinstance(self.images, tuple):
            object.__setattr__(self, "images", tuple(self.images))
        if not isinstance(self.system_parts, tuple):
            object.__setattr__(self, "system_parts", tuple(self.system_parts))

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
            out["images"] = [
                {k: v for k, v in (("data", i.data), ("url", i.url), ("media_type", i.media_type)) if v}
                for i in self.images
            ]
        if self.system_parts:
            out["system_parts"] = list(self.system_parts)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        """Inverse of :meth:`to_dict`; raises ``ValueError``/``TypeError`` naming the bad field."""
        if not isinstance(data, dict):
            raise TypeError(f"a message must be a JSON object, got {type(data).__name__}")
        unknown = set(data) - _DICT_FIELDS
        if unknown:
            raise ValueError(f"unknown message field(s): {', '.join(sorted(unknown))}")
        if "role" not in data:
            raise ValueError("message field 'role' is missing")
        kwargs = dict(data)
        try:
            kwargs["tool_calls"] = tuple(
                ToolCall(str(c["id"]), str(c["name"]), c.get("arguments") or "{}")
                for c in data.get("tool_calls") or ()
            )
            kwargs["images"] = tuple(Image(**i) for i in data.get("images") or ())
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"bad tool_calls/images field: {exc}") from exc
        kwargs["system_parts"] = tuple(data.get("system_parts") or ())
        return cls(**kwargs)


_DICT_FIELDS = frozenset(
    f.name for f in dataclasses.fields(Message) if not f.name.startswith("_")
)
