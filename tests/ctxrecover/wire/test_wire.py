"""Wire rendering, exact incremental sizing and response parsing (SPEC §1.4, §2.6)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover import wire
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Image, Message, ToolCall
from ctxrecover.wire import (
    MAX_TOKENS_FIELDS,
    ParsedResponse,
    Usage,
    WireFormat,
    WireSizeTracker,
    encode_body,
    encode_request,
    history_bytes,
    parse_response,
    render_request,
    request_path,
    request_size,
    system_bytes,
)
from ctxrecover.wire import size as wire_size

FORMATS = list(WireFormat)
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]


def _agent_history() -> list[Message]:
    return [
        Message.system("You are a coding agent."),
        Message.user("Read a.py and b.py"),
        Message.assistant(
            "Reading both.",
            tool_calls=[ToolCall("c1", "read_file", '{"path": "a.py"}'), ToolCall("c2", "read_file", "{}")],
        ),
        Message.tool("c1", "print('a')", name="read_file"),
        Message.tool("c2", "no such file", is_error=True),
        Message.user("Now explain."),
        Message.assistant("Done — both read."),
    ]


# -- rendering -------------------------------------------------------------------------------------


def test_openai_chat_body_keeps_roles_tool_calls_and_tool_results() -> None:
    body = render_request(_agent_history(), "openai-chat", model="gpt-4o", max_tokens=100, tools=TOOLS)
    assert list(body) == ["model", "messages", "max_tokens", "tools"]
    assert body["messages"][0] == {"role": "system", "content": "You are a coding agent."}
    assert body["messages"][2] == {
        "role": "assistant",
        "content": "Reading both.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
            },
            {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": "{}"}},
        ],
    }
    assert body["messages"][4] == {"role": "tool", "tool_call_id": "c2", "content": "no such file"}


def test_openai_chat_assistant_with_only_tool_calls_has_null_content() -> None:
    body = render_request([Message.assistant("", [ToolCall("x", "ls")])], "openai-chat", model="m")
    assert body["messages"][0]["content"] is None


def test_openai_chat_images_become_content_parts() -> None:
    msg = Message.user(
        "look", images=[Image(data="QUJD", media_type="image/jpeg"), Image(url="https://x/y.png")]
    )
    content = render_request([msg], "openai-chat", model="m")["messages"][0]["content"]
    assert content == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
    ]


def test_openai_responses_body_uses_instructions_and_typed_items() -> None:
    body = render_request(_agent_history(), "openai-responses", model="gpt-4.1", max_tokens=50)
    assert list(body) == ["model", "instructions", "input", "max_output_tokens"]
    assert body["instructions"] == "You are a coding agent."
    assert body["input"][:5] == [
        {"role": "user", "content": [{"type": "input_text", "text": "Read a.py and b.py"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Reading both."}]},
        {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": '{"path": "a.py"}'},
        {"type": "function_call", "call_id": "c2", "name": "read_file", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "print('a')"},
    ]


def test_openai_responses_joins_several_system_messages_into_instructions() -> None:
    history = [Message.system("one"), Message.system("", system_parts=("two", "three")), Message.user("u")]
    assert render_request(history, "openai-responses", model="m")["instructions"] == "one\n\ntwo\n\nthree"


def test_anthropic_merges_tool_results_and_following_user_text_into_one_user_message() -> None:
    body = render_request(_agent_history(), "anthropic", model="claude-sonnet-4-5")
    assert list(body) == ["model", "max_tokens", "system", "messages"]
    assert body["max_tokens"] == 4096
    assert body["system"] == "You are a coding agent."
    assert body["messages"] == [
        {"role": "user", "content": "Read a.py and b.py"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading both."},
                {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "a.py"}},
                {"type": "tool_use", "id": "c2", "name": "read_file", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "print('a')"},
                {"type": "tool_result", "tool_use_id": "c2", "content": "no such file", "is_error": True},
                {"type": "text", "text": "Now explain."},
            ],
        },
        {"role": "assistant", "content": "Done — both read."},
    ]


def test_anthropic_several_system_messages_or_parts_become_text_blocks() -> None:
    history = [Message.system("a", system_parts=("p1", "p2")), Message.system("b"), Message.user("u")]
    assert render_request(history, "anthropic", model="m")["system"] == [
        {"type": "text", "text": "p1"},
        {"type": "text", "text": "p2"},
        {"type": "text", "text": "b"},
    ]


def test_anthropic_images_use_base64_or_url_sources() -> None:
    msg = Message.user("see", images=[Image(data="QUJD"), Image(url="https://x/y.png")])
    assert render_request([msg], "anthropic", model="m")["messages"][0]["content"] == [
        {"type": "text", "text": "see"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}},
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
    ]


def test_arguments_that_are_not_a_json_object_are_kept_whole() -> None:
    msg = Message.assistant("", [ToolCall("x", "run", "not json")])
    block = render_request([msg], "anthropic", model="m")["messages"][0]["content"][0]
    assert block["input"] == {"_raw_arguments": "not json"}


def test_gemini_body_has_system_instruction_model_role_and_function_parts() -> None:
    body = render_request(_agent_history(), "gemini", model="gemini-2.5-pro", max_tokens=64)
    assert "model" not in body
    assert body["systemInstruction"] == {"parts": [{"text": "You are a coding agent."}]}
    assert body["generationConfig"] == {"maxOutputTokens": 64}
    assert body["contents"][1] == {
        "role": "model",
        "parts": [
            {"text": "Reading both."},
            {"functionCall": {"name": "read_file", "args": {"path": "a.py"}}},
            {"functionCall": {"name": "read_file", "args": {}}},
        ],
    }
    assert body["contents"][2]["parts"][:2] == [
        {"functionResponse": {"name": "read_file", "response": {"content": "print('a')"}}},
        {"functionResponse": {"name": "read_file", "response": {"content": "no such file"}}},
    ]


def test_gemini_function_response_name_comes_from_the_latest_matching_call() -> None:
    history = [
        Message.user("u"),
        Message.assistant("", [ToolCall("t:0", "old_tool")]),
        Message.tool("t:0", "r1"),
        Message.assistant("", [ToolCall("t:0", "new_tool")]),
        Message.tool("t:0", "r2"),
        Message.tool("t:9", "r3", name="own_name"),
    ]
    contents = render_request(history, "gemini", model="m")["contents"]
    names = [p["functionResponse"]["name"] for c in contents for p in c["parts"] if "functionResponse" in p]
    assert names == ["old_tool", "new_tool", "own_name"]


def test_gemini_inline_image_part() -> None:
    msg = Message.user("", images=[Image(data="QUJD", media_type="image/webp")])
    assert render_request([msg], "gemini", model="m")["contents"][0]["parts"] == [
        {"inlineData": {"mimeType": "image/webp", "data": "QUJD"}}
    ]


def test_bedrock_converse_body_uses_tool_use_tool_result_and_inference_config() -> None:
    body = render_request(
        _agent_history(), "bedrock-converse", model="anthropic.claude", max_tokens=9, tools=TOOLS
    )
    assert list(body) == ["system", "messages", "inferenceConfig", "toolConfig"]
    assert body["system"] == [{"text": "You are a coding agent."}]
    assert body["toolConfig"] == {"tools": TOOLS}
    assert body["messages"][1]["content"][1] == {
        "toolUse": {"toolUseId": "c1", "name": "read_file", "input": {"path": "a.py"}}
    }
    assert body["messages"][2]["content"][:2] == [
        {"toolResult": {"toolUseId": "c1", "content": [{"text": "print('a')"}]}},
        {"toolResult": {"toolUseId": "c2", "content": [{"text": "no such file"}], "status": "error"}},
    ]


def test_bedrock_image_block_carries_format_and_bytes() -> None:
    msg = Message.user("x", images=[Image(data="QUJD", media_type="image/jpeg")])
    content = render_request([msg], "bedrock-converse", model="m")["messages"][0]["content"]
    assert content[1] == {"image": {"format": "jpeg", "source": {"bytes": "QUJD"}}}


@pytest.mark.parametrize(
    ("fmt", "path"),
    [
        ("openai-chat", "/v1/chat/completions"),
        ("openai-responses", "/v1/responses"),
        ("anthropic", "/v1/messages"),
        ("gemini", "/v1beta/models/gemini-2.5-pro:generateContent"),
        ("bedrock-converse", "/model/gemini-2.5-pro/converse"),
    ],
)
def test_request_path_per_format(fmt: str, path: str) -> None:
    assert request_path(fmt, "gemini-2.5-pro") == path


@pytest.mark.parametrize(
    ("fmt", "field"),
    [
        ("openai-chat", "max_tokens"),
        ("openai-responses", "max_output_tokens"),
        ("anthropic", "max_tokens"),
        ("gemini", "maxOutputTokens"),
        ("bedrock-converse", "maxTokens"),
    ],
)
def test_max_tokens_field_name_per_format(fmt: str, field: str) -> None:
    assert MAX_TOKENS_FIELDS[WireFormat(fmt)] == field
    assert field in encode_body(render_request([Message.user("u")], fmt, model="m", max_tokens=77)).decode()


def test_encode_body_is_compact_utf8_json() -> None:
    assert encode_body({"a": ["é", 1]}) == '{"a":["é",1]}'.encode()


def test_unknown_format_is_rejected_with_the_valid_names() -> None:
    with pytest.raises(ConfigError, match="use one of: openai-chat, openai-responses"):
        render_request([], "openai", model="m")


def test_extra_fields_merge_but_cannot_replace_the_history() -> None:
    body = render_request(
        [Message.user("u")], "gemini", model="m", max_tokens=5, extra={"generationConfig": {"temperature": 0}}
    )
    assert body["generationConfig"] == {"maxOutputTokens": 5, "temperature": 0}
    with pytest.raises(ConfigError, match="extra\\['messages'\\] would replace the rendered history"):
        render_request([Message.user("u")], "anthropic", model="m", extra={"messages": []})


def test_render_does_not_mutate_the_history() -> None:
    history = _agent_history()
    before = [m.to_dict() for m in history]
    for fmt in FORMATS:
        render_request(history, fmt, model="m")
    assert [m.to_dict() for m in history] == before


# -- exact sizing ----------------------------------------------------------------------------------

_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(exclude_categories=("Cs",)),
        st.sampled_from(['"', "\\", "\n", "\t", "\x00", "\x1f", "\u2028", "é", "😀", "𝄞", "—"]),
    ),
    max_size=40,
)
_IDS = st.sampled_from(["c1", "c2", "web_fetch:0", "", 'ïd"'])
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)
_ARGUMENTS = st.one_of(
    st.dictionaries(_TEXT, _JSON_VALUES, max_size=3).map(json.dumps),
    st.dictionaries(_TEXT, _JSON_VALUES, max_size=3).map(
        lambda d: json.dumps(d, ensure_ascii=False, indent=1)
    ),
    _TEXT,
)
_IMAGES = st.lists(
    st.one_of(
        st.builds(
            Image,
            data=st.text("ABCDabcd0123+/=", max_size=20),
            media_type=st.sampled_from(["image/png", "image/jpeg"]),
        ),
        st.builds(Image, url=st.sampled_from(["https://x/é.png", "s3://b/k.gif"])),
    ),
    max_size=2,
)
_MESSAGES = st.one_of(
    st.builds(Message.system, _TEXT, system_parts=st.lists(_TEXT, max_size=3).map(tuple)),
    st.builds(Message.user, _TEXT, images=_IMAGES),
    st.builds(
        Message.assistant,
        _TEXT,
        tool_calls=st.lists(st.builds(ToolCall, _IDS, _TEXT, _ARGUMENTS), max_size=3),
        images=_IMAGES,
    ),
    st.builds(
        Message.tool,
        _IDS,
        _TEXT,
        name=st.none() | _TEXT,
        is_error=st.booleans(),
        images=_IMAGES,
    ),
)
_HISTORIES = st.lists(_MESSAGES, max_size=12)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=60, deadline=None)
@given(
    history=_HISTORIES,
    max_tokens=st.none() | st.integers(1, 200_000),
    tools=st.none() | st.just(TOOLS),
    model=_TEXT,
)
def test_request_size_equals_the_encoded_body_exactly(
    fmt: WireFormat, history: list[Message], max_tokens: int | None, tools: Any, model: str
) -> None:
    body = render_request(history, fmt, model=model, max_tokens=max_tokens, tools=tools)
    size = request_size(history, fmt, model=model, max_tokens=max_tokens, tools=tools)
    assert size == len(encode_body(body))
    # a second pass reads only the cache and agrees
    assert request_size(history, fmt, model=model, max_tokens=max_tokens, tools=tools) == size


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=25, deadline=None)
@given(
    history=_HISTORIES,
    extra=st.dictionaries(st.sampled_from(["temperature", "é", "generationConfig"]), _JSON_VALUES),
)
def test_request_size_with_extra_fields_is_exact(
    fmt: WireFormat, history: list[Message], extra: dict
) -> None:
    body = render_request(history, fmt, model="m", max_tokens=3, extra=extra)
    assert request_size(history, fmt, model="m", max_tokens=3, extra=extra) == len(encode_body(body))


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=20, deadline=None)
@given(history=st.lists(_MESSAGES, min_size=1, max_size=30))
def test_tracker_is_exact_after_every_append(fmt: WireFormat, history: list[Message]) -> None:
    tracker = WireSizeTracker(fmt, model="claude", max_tokens=1000, tools=TOOLS)
    tracker.reset(history[:1])
    for i, msg in enumerate(history[1:], start=2):
        tracker.append(msg)
        body = render_request(history[:i], fmt, model="claude", max_tokens=1000, tools=TOOLS)
        assert tracker.size == len(encode_body(body))
    assert tracker.messages == len(history)


@pytest.mark.parametrize("fmt", FORMATS)
def test_tracker_reset_starts_over(fmt: WireFormat) -> None:
    tracker = WireSizeTracker(fmt, model="m")
    tracker.reset(_agent_history())
    tracker.reset([Message.user("only")])
    assert tracker.size == len(encode_body(render_request([Message.user("only")], fmt, model="m")))


_EDITS = st.lists(
    st.tuples(st.sampled_from(["append", "replace", "truncate"]), st.integers(0, 40), _MESSAGES),
    max_size=12,
)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=30, deadline=None)
@given(history=_HISTORIES, edits=_EDITS)
def test_tracker_is_exact_after_replacements_and_truncations(
    fmt: WireFormat, history: list[Message], edits: list[tuple[str, int, Message]]
) -> None:
    tracker = WireSizeTracker(fmt, model="claude", max_tokens=1000, tools=TOOLS)
    tracker.reset(history)
    current = list(history)
    for op, position, msg in edits:
        if op == "append":
            current.append(msg)
            tracker.append(msg)
        elif op == "truncate":
            del current[position:]
            tracker.truncate(position)
        elif current:
            index = position % len(current)
            current[index] = msg
            if not tracker.replace(index, msg):  # another layout: cut there and append again
                tracker.truncate(index)
                tracker.extend(current[index:])
        body = render_request(current, fmt, model="claude", max_tokens=1000, tools=TOOLS)
        assert tracker.size == len(encode_body(body))
        assert tracker.messages == len(current)


@pytest.mark.parametrize("fmt", FORMATS)
def test_tracker_replace_refuses_a_change_of_layout(fmt: WireFormat) -> None:
    history = _agent_history()
    tracker = WireSizeTracker(fmt, model="m")
    tracker.reset(history)
    size = tracker.size
    assert not tracker.replace(5, Message.assistant("a user turn becomes an answer"))
    assert tracker.size == size
    assert tracker.replace(5, Message.user("Now explain, in detail."))
    edited = [*history[:5], Message.user("Now explain, in detail."), *history[6:]]
    assert tracker.size == len(encode_body(render_request(edited, fmt, model="m")))


@pytest.mark.parametrize("fmt", FORMATS)
def test_tracker_sizes_other_envelopes_of_the_same_history(fmt: WireFormat) -> None:
    history = _agent_history()
    tracker = WireSizeTracker(fmt, model="m")
    tracker.reset(history)
    extra = {"temperature": 0.5}
    cases = ((None, None, None), (50, TOOLS, None), (7, None, extra), (7, TOOLS, extra))
    for max_tokens, tools, more in cases:
        body = render_request(history, fmt, model="m", max_tokens=max_tokens, tools=tools, extra=more)
        assert tracker.size_for(max_tokens, tools, more) == len(encode_body(body))
    assert tracker.size == len(encode_body(render_request(history, fmt, model="m")))


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_message_is_serialised_once_per_format(fmt: WireFormat, monkeypatch: pytest.MonkeyPatch) -> None:
    history = _agent_history()
    request_size(history, fmt, model="m")
    assert all(f"wire:{fmt}" in m._cache for m in history)
    measured: list[Message] = []
    real_measure = wire_size._measure
    monkeypatch.setattr(wire_size, "_measure", lambda msg, f: measured.append(msg) or real_measure(msg, f))
    tracker = WireSizeTracker(fmt, model="m")
    tracker.reset(history)
    fresh = Message.user("new")
    tracker.append(fresh)
    assert measured == [fresh]
    assert tracker.size == len(encode_body(render_request([*history, fresh], fmt, model="m")))


@pytest.mark.parametrize("fmt", FORMATS)
def test_history_and_system_bytes_are_the_bytes_the_messages_add(fmt: WireFormat) -> None:
    history = _agent_history()
    empty = len(encode_body(render_request([], fmt, model="")))
    assert history_bytes(history, fmt) == len(encode_body(render_request(history, fmt, model=""))) - empty
    floor = len(encode_body(render_request(history[:1], fmt, model=""))) - empty
    assert system_bytes(history, fmt) == floor
    assert system_bytes(history, fmt) >= len("You are a coding agent.")


def test_system_bytes_count_only_the_leading_system_messages() -> None:
    history = [Message.system("é" * 10), Message.user("u"), Message.system("later " * 100)]
    assert system_bytes(history, "openai-chat") == len('{"role":"system","content":""}') + 20


def test_non_ascii_and_escapes_make_bytes_exceed_chars() -> None:
    history = [Message.user('"é😀\n' * 100)]
    assert history_bytes(history, "openai-chat") > len(history[0].content) * 2


# -- exact bytes from cached fragments -------------------------------------------------------------

# Runs of same-role messages and system messages in the middle: the grouped formats merge the runs
# into one turn and lift every system message into the system field.
_RUNS = st.lists(
    st.tuples(_MESSAGES, st.integers(1, 3)).map(lambda pair: [pair[0]] * pair[1]), max_size=6
).map(lambda runs: [m for run in runs for m in run])


def _encoded(history: list[Message], fmt: WireFormat, **options: Any) -> bytes:
    return encode_body(render_request(history, fmt, **options))


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=40, deadline=None)
@given(
    history=st.one_of(_HISTORIES, _RUNS),
    max_tokens=st.none() | st.integers(1, 200_000),
    tools=st.none() | st.just(TOOLS),
    model=_TEXT,
)
def test_encode_request_is_the_encoded_body_byte_for_byte(
    fmt: WireFormat, history: list[Message], max_tokens: int | None, tools: Any, model: str
) -> None:
    options: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "tools": tools}
    expected = _encoded(history, fmt, **options)
    assert encode_request(history, fmt, **options) == expected
    # from the cache, and with one message more (cached and fresh fragments mixed)
    assert encode_request(history, fmt, **options) == expected
    longer = [*history, Message.user("é\n"), *history[:3]]
    assert encode_request(longer, fmt, **options) == _encoded(longer, fmt, **options)
    assert len(expected) == request_size(history, fmt, **options)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=25, deadline=None)
@given(
    history=_RUNS,
    extra=st.dictionaries(st.sampled_from(["temperature", "é", "generationConfig", "model"]), _JSON_VALUES),
)
def test_encode_request_with_extra_fields_is_byte_for_byte(
    fmt: WireFormat, history: list[Message], extra: dict
) -> None:
    expected = _encoded(history, fmt, model="m", max_tokens=3, extra=extra)
    assert encode_request(history, fmt, model="m", max_tokens=3, extra=extra) == expected


@pytest.mark.parametrize("fmt", ["anthropic", "gemini", "bedrock-converse"])
def test_encode_request_merges_same_role_runs_and_lifts_every_system_message(fmt: str) -> None:
    history = [
        Message.system("first"),
        Message.user("a"),
        Message.user("b"),
        Message.system("", system_parts=("later", "")),
        *_agent_history()[1:],
    ]
    body = render_request(history, fmt, model="m")
    assert len(body[wire.HISTORY_KEYS[fmt]]) == 4  # user, assistant, user (tool results + text), assistant
    assert encode_request(history, fmt, model="m") == encode_body(body)


@pytest.mark.parametrize(
    ("systems", "expected"),
    [
        ([Message.system("only")], b'"system":"only"'),
        ([Message.system("x", system_parts=("p",))], b'"system":[{"type":"text","text":"p"}]'),
        ([Message.system("a"), Message.system("")], b'"system":[{"type":"text","text":"a"}]'),
    ],
)
def test_encode_request_anthropic_system_is_a_string_only_for_one_plain_system_message(
    systems: list[Message], expected: bytes
) -> None:
    data = encode_request([*systems, Message.user("u")], "anthropic", model="m")
    assert expected in data
    assert data == _encoded([*systems, Message.user("u")], "anthropic", model="m")


def test_encode_request_splices_the_gemini_function_name_into_the_cached_fragment() -> None:
    history = [
        Message.user("u"),
        Message.assistant("", [ToolCall("t:0", "old_tool")]),
        Message.tool("t:0", "r1"),
        Message.assistant("", [ToolCall("t:0", 'new "tool" é')]),
        Message.tool("t:0", "r2"),
        Message.tool("t:9", "r3", name="own_name"),
        Message.tool("t:8", "r4"),  # no call, no name: ""
    ]
    data = encode_request(history, "gemini", model="m")
    assert data == _encoded(history, "gemini", model="m")
    assert b'"name":"new \\"tool\\" \xc3\xa9","response":{"content":"r2"}' in data
    # the cache holds the name-free fragment, so the same message sent after another call reads right
    later = [Message.user("u"), Message.assistant("", [ToolCall("t:0", "other")]), history[2]]
    assert encode_request(later, "gemini", model="m") == _encoded(later, "gemini", model="m")


@pytest.mark.parametrize("fmt", FORMATS)
def test_encode_request_encodes_only_messages_it_has_not_sent(
    fmt: WireFormat, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = _agent_history()
    encode_request(history, fmt, model="m")
    assert all(f"wire-bytes:{fmt}" in m._cache for m in history)
    rendered: list[Message] = []
    real_render = wire_size._render_fragments
    monkeypatch.setattr(
        wire_size, "_render_fragments", lambda msg, f: rendered.append(msg) or real_render(msg, f)
    )
    fresh = Message.user("new")
    assert encode_request([*history, fresh], fmt, model="m") == _encoded([*history, fresh], fmt, model="m")
    assert rendered == [fresh]
    # its sizes come with it: sizing the same history measures nothing again
    assert request_size([*history, fresh], fmt, model="m") == len(_encoded([*history, fresh], fmt, model="m"))
    assert rendered == [fresh]


@pytest.mark.parametrize("fmt", FORMATS)
def test_encode_request_without_cache_stores_no_bytes(fmt: WireFormat) -> None:
    history = _agent_history()
    data = encode_request(history, fmt, model="m", cache=False)
    assert data == _encoded(history, fmt, model="m")
    assert not any(key.startswith("wire-bytes:") for m in history for key in m._cache)


def test_encode_request_rejects_extra_that_would_replace_the_history() -> None:
    with pytest.raises(ConfigError, match="extra\\['system'\\] would replace the rendered history"):
        encode_request([Message.user("u")], "anthropic", model="m", extra={"system": "x"})


def test_encode_request_does_not_mutate_the_history() -> None:
    history = _agent_history()
    before = [m.to_dict() for m in history]
    for fmt in FORMATS:
        encode_request(history, fmt, model="m")
    assert [m.to_dict() for m in history] == before


# -- responses -------------------------------------------------------------------------------------

OPENAI_CHAT_RESPONSE = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": '{"d":"."}'}}
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 120, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 64}},
}
RESPONSES_RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "status": "completed",
    "error": None,
    "incomplete_details": None,
    "output": [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hello", "annotations": []}],
        },
        {"type": "function_call", "call_id": "call_2", "name": "grep", "arguments": '{"p":"x"}'},
    ],
    "usage": {"input_tokens": 50, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 10}},
}
ANTHROPIC_RESPONSE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "content": [
        {"type": "thinking", "thinking": "hm", "signature": "s"},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "é.py"}},
    ],
    "stop_reason": "tool_use",
    "usage": {
        "input_tokens": 10,
        "output_tokens": 20,
        "cache_creation_input_tokens": 300,
        "cache_read_input_tokens": 4000,
    },
}
GEMINI_RESPONSE = {
    "candidates": [
        {
            "content": {
                "role": "model",
                "parts": [
                    {"text": "thinking...", "thought": True},
                    {"text": "Sure. "},
                    {"functionCall": {"name": "search", "args": {"q": "x"}}},
                ],
            },
            "finishReason": "STOP",
        }
    ],
    "usageMetadata": {"promptTokenCount": 99, "candidatesTokenCount": 3, "cachedContentTokenCount": 40},
}
BEDROCK_RESPONSE = {
    "output": {
        "message": {
            "role": "assistant",
            "content": [
                {"text": "Running."},
                {"toolUse": {"toolUseId": "tu_1", "name": "bash", "input": {"cmd": "ls"}}},
            ],
        }
    },
    "stopReason": "tool_use",
    "usage": {"inputTokens": 11, "outputTokens": 4, "cacheReadInputTokens": 2, "cacheWriteInputTokens": 1},
}


@pytest.mark.parametrize(
    ("fmt", "data", "expected"),
    [
        (
            "openai-chat",
            OPENAI_CHAT_RESPONSE,
            ParsedResponse(
                Message.assistant("", [ToolCall("call_1", "ls", '{"d":"."}')]),
                "tool_calls",
                False,
                Usage(120, 7, 64, 0),
            ),
        ),
        (
            "openai-responses",
            RESPONSES_RESPONSE,
            ParsedResponse(
                Message.assistant("Hello", [ToolCall("call_2", "grep", '{"p":"x"}')]),
                "completed",
                False,
                Usage(50, 5, 10),
            ),
        ),
        (
            "anthropic",
            ANTHROPIC_RESPONSE,
            ParsedResponse(
                Message.assistant("Let me look.", [ToolCall("toolu_1", "read", '{"path":"é.py"}')]),
                "tool_use",
                False,
                Usage(10, 20, 4000, 300),
            ),
        ),
        (
            "gemini",
            GEMINI_RESPONSE,
            ParsedResponse(
                Message.assistant("Sure. ", [ToolCall("search:0", "search", '{"q":"x"}')]),
                "STOP",
                False,
                Usage(99, 3, 40),
            ),
        ),
        (
            "bedrock-converse",
            BEDROCK_RESPONSE,
            ParsedResponse(
                Message.assistant("Running.", [ToolCall("tu_1", "bash", '{"cmd":"ls"}')]),
                "tool_use",
                False,
                Usage(11, 4, 2, 1),
            ),
        ),
    ],
)
def test_parse_response_reads_message_stop_reason_and_usage(
    fmt: str, data: dict, expected: ParsedResponse
) -> None:
    assert parse_response(fmt, data) == expected


@pytest.mark.parametrize(
    ("fmt", "data", "stop"),
    [
        ("openai-chat", {"choices": [{"message": {"content": "par"}, "finish_reason": "length"}]}, "length"),
        (
            "anthropic",
            {"content": [{"type": "text", "text": "par"}], "stop_reason": "max_tokens"},
            "max_tokens",
        ),
        (
            "bedrock-converse",
            {"output": {"message": {"content": [{"text": "par"}]}}, "stopReason": "max_tokens"},
            "max_tokens",
        ),
        (
            "gemini",
            {"candidates": [{"content": {"parts": [{"text": "par"}]}, "finishReason": "MAX_TOKENS"}]},
            "MAX_TOKENS",
        ),
        (
            "openai-responses",
            {
                "status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"},
                "output": [{"type": "message", "content": [{"type": "output_text", "text": "par"}]}],
            },
            "max_output_tokens",
        ),
    ],
)
def test_truncation_stop_reasons_mark_the_response_truncated(fmt: str, data: dict, stop: str) -> None:
    parsed = parse_response(fmt, data)
    assert (parsed.stop_reason, parsed.truncated, parsed.message.content) == (stop, True, "par")


def test_gemini_blocked_prompt_parses_as_an_empty_answer_with_the_block_reason() -> None:
    parsed = parse_response("gemini", {"promptFeedback": {"blockReason": "SAFETY"}})
    assert (parsed.message.content, parsed.stop_reason, parsed.truncated) == ("", "SAFETY", False)


@pytest.mark.parametrize(
    ("fmt", "data", "message"),
    [
        ("openai-chat", {"choices": []}, "field 'choices.0.message' is missing"),
        ("openai-chat", [], "expected a JSON object, got list"),
        (
            "openai-chat",
            {"choices": [{"message": {"tool_calls": [{"id": "x", "function": {}}]}}]},
            "field 'choices.0.message.tool_calls.0.function.name' is missing",
        ),
        ("openai-responses", {"output": "nope"}, "field 'output' is str"),
        ("anthropic", {"type": "message"}, "field 'content' is missing"),
        (
            "anthropic",
            {"type": "error", "error": {"type": "overloaded_error"}},
            "is an error, not a success response",
        ),
        ("gemini", {"candidates": []}, "field 'candidates.0' is missing"),
        ("bedrock-converse", {"output": {}}, "field 'output.message.content' is missing"),
    ],
)
def test_malformed_responses_raise_value_error_naming_the_field(fmt: str, data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", "\\(").replace(".", "\\.")):
        parse_response(fmt, data)
