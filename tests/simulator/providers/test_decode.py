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
    return json.dumps({"model": "m", "messages": messages, **extra}, separators=separators,
                      ensure_ascii=ascii_).encode()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(JSON_VALUES, max_size=8),
    st.lists(st.tuples(st.integers(0, 8), st.lists(JSON_VALUES, max_size=3)), min_size=1, max_size=5),
    st.dictionaries(st.sampled_from(["max_tokens", "tools", "stream"]), JSON_VALUES, max_size=2),
    SEPARATORS,
    st.booleans(),
)
def test_successive_bodies_decode_as_json_loads(
    start: list[object], edits: list[tuple[int, list[object]]], extra: dict[str, object],
    separators: tuple[str, str], ascii_: bool,
) -> None:
    decoder = PrefixDecoder()
    messages = list(start)
    for cut, appended in [(len(start), []), *edits]:
        messages = messages[:cut] + appended  # a kept prefix, then new messages (compaction cuts too)
        raw = _body(messages, extra, separators, ascii_)
        assert decoder.loads(raw) == json.loads(raw)


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


@pytest.mark.parametrize("raw", [
    b'{"messages":[{"role":"user"}',            # truncated
    b'{"messages":[1,]}',                       # trailing comma
    b'{"messages":[1]} x',                      # trailing data
    b'{"a":"\xff"}',                            # not UTF-8
    b'{"a":"\x01"}',                            # control character in a string
    b'[1, 2]',                                  # not an object
    b'{"messages":[12]}',                       # a number whose text grows below
])
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
