"""The message model: immutable values with explicit meta flags."""

from __future__ import annotations

import dataclasses

import pytest

from ctxrecover.messages import Image, Message, ToolCall


def test_messages_are_frozen() -> None:
    msg = Message.user("hi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.content = "changed"  # type: ignore[misc]


def test_replace_returns_a_copy_with_a_fresh_cache() -> None:
    msg = Message.user("hi", preserve_verbatim=True)
    msg._cache["weight"] = 2
    copy = msg.replace(content="hello")
    assert copy.content == "hello" and copy.preserve_verbatim
    assert copy._cache == {}
    assert msg.content == "hi"


def test_equality_ignores_the_cache() -> None:
    a, b = Message.user("x"), Message.user("x")
    a._cache["weight"] = 1
    assert a == b and hash(a) == hash(b)


def test_dict_round_trip_keeps_every_field() -> None:
    msg = Message(
        "assistant",
        "text",
        tool_calls=(ToolCall("c1", "read", '{"a":1}'),),
        images=(Image(url="https://e/x.png"),),
        is_summary=True,
        summary_of=3,
    )
    assert Message.from_dict(msg.to_dict()) == msg
    tool = Message.tool("c1", "out", is_error=True, error_code="missing_result", name="read")
    assert Message.from_dict(tool.to_dict()) == tool


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"content": "x"}, "'role' is missing"),
        ({"role": "robot", "content": "x"}, "Message.role must be one of"),
        ({"role": "user", "content": 3}, "Message.content must be str"),
        ({"role": "user", "content": "x", "colour": "red"}, "unknown message field(s): colour"),
        ({"role": "user", "tool_calls": [{"id": "1", "name": "x"}]}, "only assistant messages"),
    ],
)
def test_from_dict_errors_name_the_field(data: dict, fragment: str) -> None:
    with pytest.raises((ValueError, TypeError)) as info:
        Message.from_dict(data)
    assert fragment in str(info.value)


def test_image_needs_data_or_url() -> None:
    with pytest.raises(ValueError, match="base64 data or a url"):
        Image()
