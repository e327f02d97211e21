"""PrefixDecoder: json.loads of successive bodies, reusing the elements the last body held."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.providers.decode import PrefixDecoder

JSON_LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
SEPARATORS = st.sampled_from([(",", ":"), (", ", ": "), (",", ": ")])


def _body(
    messages: list[object], extra: dict[str, object], separators: tuple[str, str], ascii_: bool
) -> bytes:
    return json.dumps(
        {"model": "m", "messages": messages, **extra}, separators=separators, ensure_ascii=ascii_
    ).encode()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(JSON_VALUES, max_size=8),
    st.lists(st.tuples(st.integers(0, 8), st.lists(JSON_VALUES, max_size=3)), min_size=1, max_size=5),
    st.dictionaries(st.sampled_from(["max_tokens", "tools", "stream"]), JSON_VALUES, max_size=2),
    SEPARATORS,
    st.booleans(),
)
def test_successive_bodies_decode_as_json_loads(
    start: list[object],
    edits: list[tuple[int, list[object]]],
    extra: dict[str, object],
    separators: tuple[str, str],
    ascii_: bool,
) -> None:
    decoder = PrefixDecoder()
    messages = list(start)
    for cut, appended in [(len(start), []), *edits]:
        messages = messages[:cut] + appended  # a kept prefix, then new messages (compaction cuts too)
        raw = _body(messages, extra, separators, ascii_)
        assert decoder.loads(raw) == json.loads(raw)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(JSON_VALUES, min_size=1, max_size=6),
    st.lists(
        st.tuples(st.sampled_from(["grow", "first", "recent"]), st.lists(JSON_VALUES, max_size=3)),
        min_size=1,
        max_size=6,
    ),
    st.dictionaries(st.sampled_from(["max_tokens", "tools", "stream"]), JSON_VALUES, max_size=2),
    st.sampled_from(["system", "tools"]),
    SEPARATORS,
    st.booleans(),
)
def test_bodies_that_grow_resume_after_the_last_ones_prefix_and_decode_as_json_loads(
    start: list[object],
    steps: list[tuple[str, list[object]]],
    extra: dict[str, object],
    other_array: str,
    separators: tuple[str, str],
    ascii_: bool,
) -> None:
    """A body that appends to the conversation, or rewrites a recent message of it, is read from the
    last element it repeats on; one that rewrites the first is read whole; every result equals
    json.loads."""
    decoder = PrefixDecoder()
    messages, arrays = list(start), {other_array: ["é", {"x": [1, 2]}]}
    for edit, appended in steps:
        if edit == "first":  # a compaction: the first message replaced
            messages = [{"summary": "ü" * len(messages)}, *messages[1:]]
        elif edit == "recent":  # a turn-boundary pass folding a recent message
            messages = [*messages[:-1], {"folded": "ß" * len(messages)}]
        messages = [*messages, *appended]
        raw = json.dumps(
            {"model": "m", **arrays, "messages": messages, **extra},
            separators=separators,
            ensure_ascii=ascii_,
        ).encode()
        assert decoder.loads(raw) == json.loads(raw)


def test_a_grown_conversation_is_read_from_where_the_last_body_ended() -> None:
    decoder = PrefixDecoder()
    history = [{"role": "user", "content": f"question {i} ✓"} for i in range(5)]
    tools = [{"name": "read", "description": "reads ✓"}]
    decoder.loads(json.dumps({"model": "m", "messages": history, "tools": tools}).encode())
    assert not decoder.resumed
    grown = [*history, {"role": "assistant", "content": "answer ✓"}]
    raw = json.dumps({"model": "m", "messages": grown, "tools": tools}).encode()
    assert decoder.loads(raw) == json.loads(raw)
    assert decoder.resumed and decoder.reused == 5
    again = json.dumps({"model": "m", "messages": grown, "tools": tools, "max_tokens": 9}).encode()
    assert decoder.loads(again) == json.loads(again) and decoder.resumed  # a field after the array
    folded = [*grown[:4], {"role": "tool", "content": "[folded ✓]"}, grown[5]]
    raw = json.dumps({"model": "m", "messages": folded, "tools": tools}).encode()
    assert decoder.loads(raw) == json.loads(raw)
    assert decoder.resumed and decoder.reused == 4  # up to the message a pass rewrote
    other = json.dumps({"model": "other", "messages": grown}).encode()
    assert decoder.loads(other) == json.loads(other) and not decoder.resumed  # a field before it


def test_an_unchanged_prefix_is_reused_not_decoded_again() -> None:
    decoder = PrefixDecoder()
    history = [{"role": "user", "content": f"question {i} ✓"} for i in range(5)]
    first = decoder.loads(_body(history, {}, (",", ":"), False))
    answered = [*history, {"role": "assistant", "content": "answer"}]
    second = decoder.loads(_body(answered, {}, (",", ":"), False))
    assert decoder.reused == 5
    assert second["messages"][:5] == first["messages"] and second["messages"][5]["content"] == "answer"
    edited = [{"role": "user", "content": "changed"}, *history[1:]]
    assert decoder.loads(_body(edited, {}, (",", ":"), False))["messages"] == edited
    assert decoder.reused == 0  # the offsets after the edit moved: nothing matched


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages":[{"role":"user"}',  # truncated
        b'{"messages":[1,]}',  # trailing comma
        b'{"messages":[1]} x',  # trailing data
        b'{"a":"\xff"}',  # not UTF-8
        b'{"a":"\x01"}',  # control character in a string
        b"[1, 2]",  # not an object
        b'{"messages":[12]}',  # a number whose text grows below
    ],
)
def test_bad_or_unusual_bodies_raise_or_return_as_json_loads(raw: bytes) -> None:
    decoder = PrefixDecoder()
    decoder.loads(b'{"messages":[1]}')
    try:
        expected: object = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        with pytest.raises(type(exc)) as caught:
            decoder.loads(raw)
        assert str(caught.value) == str(exc)
    else:
        assert decoder.loads(raw) == expected
    assert decoder.loads(b'{"messages":[123]}') == {"messages": [123]}  # "1" is a prefix of "123"


class _CountingDict(dict):  # type: ignore[type-arg]
    reads = 0

    def get(self, *args: object) -> object:
        _CountingDict.reads += 1
        return super().get(*args)


def _tally(wire: object, body: dict[str, object]) -> tuple[int, int, int]:
    from simulator.providers.wire import Tally

    tally = Tally()
    wire.analyse(body, tally)  # type: ignore[attr-defined]
    return tally.message_count, tally.counter.chars, tally.image_tokens


def test_openai_chat_analysis_resumes_after_the_very_messages_it_saw_last() -> None:
    from simulator.providers.openai import OpenAIChatWire
    from simulator.providers.wire import Invalid

    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    prefix = [
        _CountingDict(role="user", content="read it"),
        _CountingDict(role="assistant", content=None, tool_calls=[call]),
    ]
    wire = OpenAIChatWire()
    with pytest.raises(Invalid):  # the call is still unanswered: rejected, but the walk is kept
        _tally(wire, {"model": "m", "messages": prefix})
    resent = [
        *prefix,
        {"role": "tool", "tool_call_id": "c1", "content": "data"},
        {"role": "image", "content": "x"},
    ]
    _CountingDict.reads = 0
    with pytest.raises(Invalid) as resumed:
        _tally(wire, {"model": "m", "messages": resent})
    assert _CountingDict.reads == 0  # the resent prefix was not walked again
    with pytest.raises(Invalid) as fresh:
        _tally(OpenAIChatWire(), {"model": "m", "messages": json.loads(json.dumps(resent))})
    assert (resumed.value.message, resumed.value.param) == (fresh.value.message, fresh.value.param)
    answered = resent[:3]
    assert _tally(wire, {"model": "m", "messages": answered}) == _tally(
        OpenAIChatWire(), {"model": "m", "messages": json.loads(json.dumps(answered))}
    )
    assert _CountingDict.reads == 0


_DENSE = "QmFzZTY0IGRhdGEg" * 8  # 128 chars a tokenizer counts densely: its excess is remembered
_CHAT_MESSAGES = st.sampled_from(
    [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "read both files, then " + "explain " * 10},
        {
            "role": "user",
            "content": [{"type": "text", "text": _DENSE}, {"type": "image_url", "image_url": "x"}],
        },
        {"role": "assistant", "content": _DENSE},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "function": {"name": "r"}}]},
        {
            "role": "assistant",
            "content": "two",
            "tool_calls": [{"id": "b", "function": {"name": "r", "arguments": "{}"}}, {"id": "c"}],
        },
        {"role": "tool", "tool_call_id": "a", "content": "data " * 40},
        {"role": "tool", "tool_call_id": "b", "content": _DENSE},
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
        {"role": "robot", "content": "?"},
    ]
)
_EDITS = st.one_of(
    st.tuples(st.just("append"), st.lists(_CHAT_MESSAGES, min_size=1, max_size=4)),
    st.tuples(st.just("replace"), st.integers(0, 30), _CHAT_MESSAGES),
    st.tuples(st.just("cut"), st.integers(0, 30)),
    st.tuples(st.just("copy")),
)


def _analysed(wire: object, messages: list[object]) -> tuple[object, ...]:
    """What the analysis of a chat body made of it: its tallies, or the error the API would answer."""
    from simulator.providers.wire import Invalid, Tally

    tally = Tally()
    try:
        wire.analyse({"model": "m", "messages": messages}, tally)  # type: ignore[attr-defined]
    except Invalid as invalid:
        return ("invalid", invalid.message, invalid.param, invalid.outcome, invalid.code)
    return (tally.message_count, tally.counter.chars, tally.counter.excess, tally.image_tokens, tally.tokens)


@settings(max_examples=300, deadline=None)
@given(st.lists(_CHAT_MESSAGES, min_size=1, max_size=12), st.lists(_EDITS, min_size=1, max_size=8))
def test_openai_chat_analysis_resumed_after_a_shared_prefix_equals_a_fresh_one(
    start: list[dict[str, object]], edits: list[tuple[object, ...]]
) -> None:
    """Bodies that keep the very message objects of the last one up to some position (the PrefixDecoder's
    reuse: an appended tail, one message rewritten in the middle, a cut, nothing kept) are analysed from
    that position on, to the same tallies — chars, dense-text excess, images, tokens — and the same errors
    as a fresh analysis of an equal body."""
    from simulator.providers.openai import OpenAIChatWire

    wire = OpenAIChatWire()
    messages: list[object] = [dict(m) for m in start]
    for edit in [("copy",), *edits]:
        if edit[0] == "append":
            messages = [*messages, *(dict(m) for m in edit[1])]  # type: ignore[attr-defined]
        elif edit[0] == "replace" and messages:
            at = int(edit[1]) % len(messages)  # type: ignore[call-overload]
            messages = [*messages[:at], dict(edit[2]), *messages[at + 1 :]]  # type: ignore[call-overload]
        elif edit[0] == "cut":
            messages = messages[: int(edit[1])]  # type: ignore[call-overload]
        elif edit[0] == "copy":
            messages = json.loads(json.dumps(messages))
        if messages:
            fresh = OpenAIChatWire()
            assert _analysed(wire, messages) == _analysed(fresh, json.loads(json.dumps(messages)))
