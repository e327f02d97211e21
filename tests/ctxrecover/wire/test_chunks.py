"""BodyEncoder: chunked bodies equal encode_request byte for byte, and a request that appends reuses."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message, ToolCall
from ctxrecover.wire import WireFormat, encode_body, encode_request, render_request
from ctxrecover.wire import chunks as wire_chunks
from ctxrecover.wire.chunks import SMALL_PIECE_BYTES, BodyEncoder

FORMATS = list(WireFormat)
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]

_TEXT = st.sampled_from(["", "a", "é\n", 'q"uote', "x" * 50])
_IDS = st.sampled_from(["c1", "c2", "c3"])
_MESSAGES = st.one_of(
    st.builds(Message.system, _TEXT, system_parts=st.lists(_TEXT, max_size=2).map(tuple)),
    st.builds(Message.user, _TEXT),
    st.builds(
        Message.assistant,
        _TEXT,
        tool_calls=st.lists(st.builds(ToolCall, _IDS, _TEXT, st.just("{}")), max_size=2),
    ),
    st.builds(Message.tool, _IDS, _TEXT, name=st.none() | st.sampled_from(["read_file", "grep"])),
)
# What happens to a history between two requests of one conversation.
_EDITS = st.one_of(
    st.tuples(st.just("append"), st.lists(_MESSAGES, min_size=1, max_size=5), st.just(None)),
    st.tuples(st.just("replace"), st.integers(0, 100), _MESSAGES),
    st.tuples(st.just("drop_prefix"), st.integers(1, 30), st.just(None)),
    st.tuples(st.just("summary_first"), st.integers(1, 30), st.just(None)),
    st.tuples(st.just("truncate"), st.integers(1, 5), st.just(None)),
    st.tuples(st.just("same"), st.just(0), st.just(None)),
)


def _expected(history: list[Message], fmt: WireFormat, **options: Any) -> bytes:
    return encode_body(render_request(history, fmt, **options))


def _edited(history: list[Message], edit: tuple[str, Any, Any]) -> list[Message]:
    kind, arg, value = edit
    if kind == "append":
        return [*history, *arg]
    if kind == "replace" and history:
        index = arg % len(history)
        return [*history[:index], value, *history[index + 1 :]]
    if kind == "drop_prefix":
        return history[:1] + history[1 + arg :]
    if kind == "summary_first":
        return [Message.user("[summary]"), *history[arg:]]
    if kind == "truncate":
        return history[: max(0, len(history) - arg)]
    return history


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=60, deadline=None)
@given(
    start=st.lists(_MESSAGES, max_size=40),
    edits=st.lists(_EDITS, min_size=1, max_size=8),
    block_messages=st.integers(1, 6),
    block_bytes=st.sampled_from([1, 60, 400, 10_000]),
    max_tokens=st.none() | st.integers(1, 9),
    tools=st.none() | st.just(TOOLS),
)
def test_every_body_of_a_conversation_is_encode_request_byte_for_byte(
    fmt: WireFormat,
    start: list[Message],
    edits: list[Any],
    block_messages: int,
    block_bytes: int,
    max_tokens: int | None,
    tools: Any,
) -> None:
    encoder = BodyEncoder(fmt, block_messages=block_messages, block_bytes=block_bytes)
    options: dict[str, Any] = {"model": "m", "max_tokens": max_tokens, "tools": tools}
    history = start
    for edit in [("same", 0, None), *edits]:
        history = _edited(history, edit)
        chunks = encoder.encode(history, **options)
        expected = _expected(history, fmt, **options)
        assert b"".join(chunks) == expected == encode_request(history, fmt, **options)
        assert all(isinstance(chunk, bytes) and chunk for chunk in chunks)


def test_a_repeated_message_object_and_runs_of_one_role_render_right() -> None:
    shared = Message.user("same object")
    history = [
        Message.system("s"),
        shared,
        shared,
        Message.assistant("a"),
        shared,
        Message.system("late"),
        Message.user("u"),
    ]
    for fmt in FORMATS:
        encoder = BodyEncoder(fmt, block_messages=1)
        for end in range(len(history) + 1):
            data = b"".join(encoder.encode(history[:end], model="m"))
            assert data == _expected(history[:end], fmt, model="m")


def test_gemini_names_resolved_from_calls_in_earlier_blocks_follow_those_calls() -> None:
    result = Message.tool("t:0", "r1")  # unnamed: its name comes from the call with its id
    first = [Message.user("u"), Message.assistant("", [ToolCall("t:0", "old_tool")]), result]
    encoder = BodyEncoder("gemini", block_messages=1)
    assert b'"name":"old_tool"' in b"".join(encoder.encode(first, model="m"))
    # the same result block after a different call: its cached block must not be reused
    second = [Message.user("u"), Message.assistant("", [ToolCall("t:0", "new_tool")]), result]
    data = b"".join(encoder.encode(second, model="m"))
    assert data == _expected(second, "gemini", model="m")
    assert b'"name":"new_tool"' in data


def _agent_history(turns: int) -> list[Message]:
    history = [Message.system("You are a coding agent. " * 40)]
    for turn in range(turns):
        call = ToolCall(f"call_{turn}", "read_file", '{"path": "a.py"}')
        history += [
            Message.user(f"question {turn} " * 30),
            Message.assistant("reading", tool_calls=[call]),
            Message.tool(call.id, f"contents {turn} " * 800, name="read_file"),
            Message.assistant(f"answer {turn} " * 60),
        ]
    return history


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_request_that_appends_joins_only_its_last_block(
    fmt: WireFormat, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = _agent_history(60)
    encoder = BodyEncoder(fmt, block_messages=16, block_bytes=10**9)
    before = encoder.encode(history, model="m")
    looked_up: list[Message] = []
    real = wire_chunks._fragment
    monkeypatch.setattr(wire_chunks, "_fragment", lambda msg, f: looked_up.append(msg) or real(msg, f))
    longer = [*history, Message.user("one more question")]
    after = encoder.encode(longer, model="m")
    assert b"".join(after) == _expected(longer, fmt, model="m")
    # the open last block (241 messages: 15 full blocks of 16 and one of 1) takes the new message: a list
    # format appends its JSON to the block's bytes, a format that merges turns joins that block again;
    # every full block is handed over as the very bytes object of the last request
    if fmt in ("openai-chat", "openai-responses"):
        assert looked_up == [longer[-1]]
    else:
        assert len(looked_up) <= 16 + 1
    reused = {id(chunk) for chunk in before} & {id(chunk) for chunk in after}
    assert len(reused) >= 14
    assert max(len(chunk) for chunk in after) < len(b"".join(after)) / 10


def test_an_edit_in_the_middle_rejoins_its_block_and_finds_the_later_blocks_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    history = _agent_history(60)
    encoder = BodyEncoder("openai-chat", block_messages=16, block_bytes=10**9)
    before = encoder.encode(history, model="m")
    looked_up: list[Message] = []
    real = wire_chunks._fragment
    monkeypatch.setattr(wire_chunks, "_fragment", lambda msg, f: looked_up.append(msg) or real(msg, f))
    edited = [*history[:100], Message.tool("call_24", "[stub]", name="read_file"), *history[101:]]
    after = encoder.encode(edited, model="m")
    assert b"".join(after) == _expected(edited, "openai-chat", model="m")
    assert len(looked_up) <= 16  # the edited message's block only
    assert len({id(chunk) for chunk in before} & {id(chunk) for chunk in after}) >= 13


def test_small_pieces_are_posted_together() -> None:
    history = [Message.system("s"), Message.user("hi")]
    chunks = BodyEncoder("anthropic").encode(history, model="m", max_tokens=5)
    assert chunks == [
        b'{"model":"m","max_tokens":5,"system":"s","messages":[{"role":"user","content":"hi"}]}'
    ]
    big = _agent_history(200)
    chunks = BodyEncoder("openai-chat").encode(big, model="m")
    assert len(chunks) < 20
    assert all(len(chunk) >= SMALL_PIECE_BYTES for chunk in chunks[1:-1])


def test_blocks_fill_up_as_a_conversation_grows_one_message_at_a_time() -> None:
    encoder = BodyEncoder("openai-chat", block_messages=4, block_bytes=10**9)
    history: list[Message] = []
    for turn in range(160):
        history.append(Message.user(f"message {turn} " * 1_600))  # ~20 KB: a chunk of its own
        chunks = encoder.encode(history, model="m")
    assert b"".join(chunks) == _expected(history, "openai-chat", model="m")
    assert len(chunks) <= 160 // 4 + 2  # full blocks, not one block per request


@pytest.mark.parametrize(("messages", "size"), [(0, 10), (5, 0), (-1, -1)])
def test_block_limits_below_one_are_refused_with_both_values(messages: int, size: int) -> None:
    with pytest.raises(ConfigError) as caught:
        BodyEncoder("openai-chat", block_messages=messages, block_bytes=size)
    assert str(caught.value) == (
        f"BodyEncoder needs block_messages >= 1 and block_bytes >= 1 (got {messages} and {size})"
    )
