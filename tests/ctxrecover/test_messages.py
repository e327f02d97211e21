"""The message model: immutable values with explicit meta flags."""

from __future__ import annotations

import dataclasses

import pytest

from ctxrecover.errors import CtxRecoverError, MessageError, NestingTooDeepError, UnencodableTextError
from ctxrecover.messages import MAX_ARGUMENT_DEPTH, Image, Message, ToolCall, check_encodable, json_depth


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


# -- constructors validate every field (issue 12: bad input fails at the call site) ------------------


@pytest.mark.parametrize(
    ("build", "field", "fragment"),
    [
        (lambda: Message.user(None), "content", "Message.content must be str, got None"),
        (lambda: Message.user(b"bytes"), "content", "Message.content must be str, got bytes"),
        (lambda: Message("robot", "x"), "role", "Message.role must be one of"),
        (lambda: Message(None, "x"), "role", "Message.role must be one of"),
        (lambda: Message.assistant("x", [{"id": "a"}]), "tool_calls[0]", "tool_calls[0] must be a ToolCall"),
        (
            lambda: Message("assistant", "x", tool_calls="ab"),
            "tool_calls",
            "must be a tuple or list of ToolCall",
        ),
        (lambda: Message.user("x", images=[b"png"]), "images[0]", "Message.images[0] must be a Image"),
        (lambda: Message.system("x", system_parts=["a", 3]), "system_parts[1]", "must be a str, got int"),
        (lambda: Message.tool(7, "x"), "tool_call_id", "Message.tool_call_id must be str or None, got int"),
        (
            lambda: Message.user("x", is_summary="yes"),
            "is_summary",
            "Message.is_summary must be bool, got str",
        ),
        (
            lambda: Message.user("x", summary_of=True),
            "summary_of",
            "Message.summary_of must be int, got bool",
        ),
        (lambda: Message.user("x", summary_of=-1), "summary_of", "Message.summary_of must be >= 0"),
        (lambda: ToolCall(None, None, {"path": "a"}), "id", "ToolCall.id must be str, got None"),
        (lambda: ToolCall("c1", None), "name", "ToolCall.name must be str, got None"),
        (
            lambda: ToolCall("c1", "ls", {"path": "a"}),
            "arguments",
            "ToolCall.arguments must be str (JSON text",
        ),
        (lambda: Image(data=123), "data", "Image.data must be str (base64) or None, got int"),
        (lambda: Image(url="u", media_type=None), "media_type", "Image.media_type must be str"),
    ],
)
def test_constructors_refuse_bad_values_naming_the_field(build, field: str, fragment: str) -> None:
    with pytest.raises(MessageError) as info:
        build()
    assert info.value.field == field
    assert fragment in str(info.value)
    # one typed error that older handlers (TypeError / ValueError) still catch
    assert isinstance(info.value, CtxRecoverError | TypeError) and isinstance(info.value, ValueError)


def test_tool_call_arguments_nesting_is_bounded() -> None:
    at_limit = "[" * MAX_ARGUMENT_DEPTH + "]" * MAX_ARGUMENT_DEPTH
    assert ToolCall("c", "f", at_limit).arguments == at_limit
    with pytest.raises(NestingTooDeepError) as info:
        ToolCall("c", "f", '{"a":' * 1000 + "1" + "}" * 1000)
    assert (info.value.depth, info.value.limit, info.value.field) == (1000, MAX_ARGUMENT_DEPTH, "arguments")
    assert "ToolCall.arguments of call 'c' nests 1000 levels deep; at most 100" in str(info.value)


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("", 0),
        ("plain", 0),
        ('{"a": [1, {"b": 2}]}', 3),
        ('{"a": "[[[[{{{{"}', 1),  # brackets inside strings do not nest
        ('{"a": "quote \\" [[["}', 1),
        ("[" * 150, 150),  # not JSON, but every consumer would recurse on it
        ("]]]", 0),
    ],
)
def test_json_depth_counts_brackets_outside_strings(text: str, depth: int) -> None:
    assert json_depth(text) == depth


def test_many_shallow_objects_are_not_too_deep() -> None:
    wide = "[" + ",".join('{"k": [1, 2]}' for _ in range(500)) + "]"
    assert ToolCall("c", "f", wide).arguments == wide


@pytest.mark.parametrize(
    ("msg", "field", "offset"),
    [
        (Message.user("ok \ud800 no"), "content", 3),
        (Message.assistant("", [ToolCall("c", "f", '{"p": "\udc00"}')]), "tool_calls[0].arguments", 7),
        (Message.assistant("", [ToolCall("c\ud83d", "f")]), "tool_calls[0].id", 1),
        (Message.system("s", system_parts=("fine", "é\udfff")), "system_parts[1]", 1),
        (Message.tool("call\udc80", "x"), "tool_call_id", 4),
        (Message.user("x", images=(Image(url="https://e/\ud800.png"),)), "images[0].url", 10),
    ],
)
def test_check_encodable_names_field_and_offset_of_a_lone_surrogate(
    msg: Message, field: str, offset: int
) -> None:
    with pytest.raises(UnencodableTextError) as info:
        check_encodable(msg, index=4)
    assert (info.value.field, info.value.offset, info.value.index) == (field, offset, 4)
    assert str(info.value).startswith(f"message 4: {field} holds a lone surrogate")


def test_check_encodable_accepts_any_valid_text() -> None:
    check_encodable(Message.user("émoji 😀, CJK 漢字, RTL שלום, NUL \x00"))
