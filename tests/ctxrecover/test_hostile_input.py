"""Hostile input (issue 12): refused at the door with a typed error; the session stays usable.

Decision: a lone surrogate is refused where a message enters a session
(``Session.add``/``extend``/``history=``) — providers reject its JSON escape
(Anthropic: "no low surrogate in string"), so carrying it would fail every later
turn. Text that reaches a history another way (a restored state, a provider's
answer) is still encoded: the wire writes the escape, byte-exact, never raising.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from ctxrecover.archive import MemoryArchive, archive_range, marker, recall
from ctxrecover.errors import CtxRecoverError, MessageError, UnencodableTextError
from ctxrecover.messages import MAX_ARGUMENT_DEPTH, Image, Message, ToolCall
from ctxrecover.passes.dedup_reads import dedup_repeated_reads
from ctxrecover.policy import Policy
from ctxrecover.session import Session
from ctxrecover.wire import encode_request, request_size

WIRE_FORMATS = ("openai-chat", "openai-responses", "anthropic", "gemini", "bedrock-converse")
SURROGATE_TEXTS = {
    "content": "before \ud800 after",
    "system": "rules \udfff",
    "arguments": '{"path": "\ud83d.py"}',
    "result": "output \udc80\udc81",
}


def _session(provider: object, **kwargs: object) -> Session:
    return Session(provider.sender(), env={}, sleep=lambda _s: None, **kwargs)  # type: ignore[attr-defined]


@pytest.mark.parametrize("fmt", WIRE_FORMATS)
def test_add_refuses_a_lone_surrogate_with_index_field_and_offset_and_the_session_stays_usable(
    fmt: str, fake_provider: Callable[..., object]
) -> None:
    provider = fake_provider(fmt)
    session = _session(provider)
    session.add(Message.system("You are terse."))
    session.add(Message.user("hello"))
    bad = Message.user("ab\ud800cd")
    with pytest.raises(UnencodableTextError) as info:
        session.add(bad)
    assert (info.value.index, info.value.field, info.value.offset) == (2, "content", 2)
    assert str(info.value).startswith("message 2: content holds a lone surrogate '\\ud800' at char 2")
    assert [m.content for m in session.history] == ["You are terse.", "hello"]
    reply = session.complete()  # the refused message never reached the history or the wire
    assert reply.content == "answer 1"
    assert b"\\ud800" not in provider.bodies[-1]  # type: ignore[attr-defined]
    session.add(Message.user("ab\ufffdcd"))  # the repaired text is accepted
    assert session.complete().content == "answer 2"


@pytest.mark.parametrize("fmt", WIRE_FORMATS)
def test_wire_carries_lone_surrogates_losslessly(fmt: str) -> None:
    history = [
        Message.system(SURROGATE_TEXTS["system"]),
        Message.user(SURROGATE_TEXTS["content"]),
        Message.assistant("", [ToolCall("c1", "read_file", SURROGATE_TEXTS["arguments"])]),
        Message.tool("c1", SURROGATE_TEXTS["result"], name="read_file"),
    ]
    body = encode_request(history, fmt, model="m", max_tokens=64)
    assert len(body) == request_size(history, fmt, model="m", max_tokens=64)
    decoded = json.dumps(
        json.loads(body), ensure_ascii=False
    )  # valid JSON, and the texts come back as they were
    for text in (SURROGATE_TEXTS["system"], SURROGATE_TEXTS["content"], SURROGATE_TEXTS["result"]):
        assert json.dumps(text, ensure_ascii=False)[1:-1] in decoded
    assert "\ud83d" in decoded  # the arguments' surrogate, inside whatever shape the format gives them


@pytest.mark.parametrize("fmt", WIRE_FORMATS)
def test_a_restored_history_with_lone_surrogates_still_sends(
    fmt: str, fake_provider: Callable[..., object]
) -> None:
    provider = fake_provider(fmt)
    session = _session(provider)
    saved = {"history": [{"role": "user", "content": SURROGATE_TEXTS["content"]}]}
    session.restore(saved)  # text that arrived another way (e.g. a provider's answer) is carried, not refused
    assert session.complete().content == "answer 1"
    assert b"before \\ud800 after" in provider.bodies[-1]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("value", "kind"),
    [(None, "NoneType"), ("just text", "str"), ({"role": "user", "content": "x"}, "dict")],
)
def test_add_refuses_what_is_not_a_message(
    value: object, kind: str, fake_provider: Callable[..., object]
) -> None:
    session = _session(fake_provider())
    session.add(Message.user("first"))
    with pytest.raises(MessageError) as info:
        session.add(value)  # type: ignore[arg-type]
    assert (info.value.index, info.value.field) == (1, "message")
    assert str(info.value) == (
        f"message 1: Session.add needs a Message (e.g. Message.user(text)), got {kind}"
    )
    assert isinstance(info.value, TypeError)
    assert [m.content for m in session.history] == ["first"]
    assert session.complete().content == "answer 1"


def test_extend_checks_every_message_before_adding_any(fake_provider: Callable[..., object]) -> None:
    session = _session(fake_provider())
    with pytest.raises(UnencodableTextError) as info:
        session.extend([Message.user("a"), Message.user("b"), Message.tool("c", "\udc00")])
    assert info.value.index == 2 and session.history == []


def test_a_history_given_at_construction_is_checked_too(fake_provider: Callable[..., object]) -> None:
    with pytest.raises(MessageError) as info:
        _session(fake_provider(), history=[Message.user("ok"), None])
    assert info.value.index == 1


def test_constructors_fail_where_the_bad_value_is_given() -> None:
    with pytest.raises(MessageError, match=r"ToolCall\.id must be str, got None"):
        ToolCall(None, None, {"path": "a"})  # type: ignore[arg-type]
    with pytest.raises(MessageError, match=r"Message\.content must be str, got None"):
        Message.user(None)  # type: ignore[arg-type]


# -- nesting depth ---------------------------------------------------------------------------------


def _nested(depth: int) -> str:
    return '{"path": "src/deep.py", "n": ' + '{"a": ' * (depth - 1) + "1" + "}" * depth


@pytest.mark.parametrize("fmt", WIRE_FORMATS)
def test_arguments_at_the_depth_limit_pass_dedup_wire_archive_and_the_turn(
    fmt: str, fake_provider: Callable[..., object]
) -> None:
    deep = _nested(MAX_ARGUMENT_DEPTH)
    listing = "\n".join(f"{n:6d}\tline {n}" for n in range(1, 40))
    history = [
        Message.user("read it twice"),
        Message.assistant("", [ToolCall("r1", "read_file", deep)]),
        Message.tool("r1", listing),
        Message.assistant("", [ToolCall("r2", "read_file", deep)]),
        Message.tool("r2", listing),
    ]
    store = MemoryArchive()
    deduped, report = dedup_repeated_reads(history, archive=store)  # parses the arguments for the path
    assert report.reads_superseded == 1
    key = archive_range(store, history)
    assert deep in recall(store, marker(key)).found[key]
    json.loads(encode_request(history, fmt, model="m"))
    provider = fake_provider(fmt)
    session = _session(provider, history=deduped)
    assert session.complete().content == "answer 1"


@pytest.mark.parametrize("fmt", ["openai-chat", "anthropic", "gemini", "bedrock-converse"])
def test_a_provider_answer_nested_too_deep_is_a_typed_failure_and_the_session_stays_usable(
    fmt: str, fake_provider: Callable[..., object]
) -> None:
    depth = MAX_ARGUMENT_DEPTH + 50
    nested: object = 1
    for _ in range(depth):
        nested = {"a": nested}
    deep_call = {
        "openai-chat": lambda: {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "x",
                                "type": "function",
                                "function": {"name": "f", "arguments": json.dumps(nested)},
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ]
        },
        "anthropic": lambda: {
            "content": [{"type": "tool_use", "id": "x", "name": "f", "input": nested}],
            "stop_reason": "tool_use",
        },
        "gemini": lambda: {
            "candidates": [
                {
                    "content": {"parts": [{"functionCall": {"name": "f", "args": nested}}]},
                    "finishReason": "STOP",
                }
            ]
        },
        "bedrock-converse": lambda: {
            "output": {
                "message": {
                    "role": "assistant",
                    "content": [{"toolUse": {"toolUseId": "x", "name": "f", "input": nested}}],
                }
            },
            "stopReason": "tool_use",
        },
    }[fmt]

    def reject(_body: bytes, n: int) -> httpx.Response | None:
        return httpx.Response(200, json=deep_call()) if n == 1 else None

    provider = fake_provider(fmt, reject=reject)
    session = _session(provider, policy=Policy(max_recovery_attempts=1))
    session.add(Message.user("go"))
    with pytest.raises(CtxRecoverError):
        session.complete()
    assert [m.content for m in session.history] == ["go"]
    assert session.complete().content == "answer 2"


def test_recall_of_a_deeply_nested_json_query_finds_its_keys_without_recursing() -> None:
    store = MemoryArchive()
    key = store.put("kept")
    query = "[" * 5000 + json.dumps({"key": key}) + "]" * 5000
    assert recall(store, query).found == {key: "kept"}


def test_images_with_bad_fields_are_refused_at_construction() -> None:
    with pytest.raises(MessageError, match="Image needs base64 data or a url"):
        Image()
