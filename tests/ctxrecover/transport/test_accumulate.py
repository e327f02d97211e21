"""Stream accumulators: the events of each wire format into the document of the unstreamed answer.

The mock providers' own streams are checked end to end in ``test_streaming.py``; these are the
shapes they do not send (several tool calls interleaved, thinking, citations, context editing,
a Responses stream whose final event lists no output, …), each as the real API streams it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ctxrecover.messages import Message, ToolCall
from ctxrecover.transport.accumulate import (
    AnthropicAccumulator,
    BedrockAccumulator,
    ChatAccumulator,
    GeminiAccumulator,
    ResponsesAccumulator,
)
from ctxrecover.transport.base import MalformedStream
from ctxrecover.wire import parse_response


def feed(accumulator: Any, events: list[tuple[str | None, dict[str, Any]]]) -> list[str]:
    return [accumulator.feed(name, data) for name, data in events]


def chunk(delta: dict[str, Any], finish: str | None = None, **fields: Any) -> tuple[None, dict[str, Any]]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return None, {"id": "c1", "object": "chat.completion.chunk", "choices": [choice], **fields}


def test_chat_tool_calls_interleaved_by_index_merge_into_the_completion() -> None:
    calls = [
        {"index": 0, "id": "call_a", "type": "function", "function": {"name": "read", "arguments": ""}},
        {"index": 1, "id": "call_b", "type": "function", "function": {"name": "ls", "arguments": '{"d"'}},
    ]
    events = [
        chunk({"role": "assistant", "content": None}),
        chunk({"tool_calls": calls}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": ':"."}'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path":'}}]}),
        chunk({"role": "assistant", "tool_calls": [{"index": 0, "function": {"arguments": '"a.py"}'}}]}),
        chunk({}, "tool_calls"),
        (None, {"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 5}}),
    ]
    accumulator = ChatAccumulator()
    assert feed(accumulator, events) == [""] * 7
    raw = accumulator.raw()
    assert accumulator.complete
    assert raw["object"] == "chat.completion" and raw["usage"] == {"prompt_tokens": 5}
    message = raw["choices"][0]["message"]
    assert message["role"] == "assistant"  # a repeated role replaces, never joins
    assert message["tool_calls"] == [
        {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": '{"path":"a.py"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "ls", "arguments": '{"d":"."}'}},
    ]
    assert parse_response("openai-chat", raw).message == Message.assistant(
        "", [ToolCall("call_a", "read", '{"path":"a.py"}'), ToolCall("call_b", "ls", '{"d":"."}')]
    )


def test_chat_text_and_logprobs_join_and_a_null_usage_never_replaces_the_usage_chunk() -> None:
    events = [
        chunk({"role": "assistant", "content": "Hel"}, usage=None),
        chunk({"content": "lo"}, usage=None),
        (None, {"choices": [{"index": 0, "delta": {}, "logprobs": {"content": [{"token": "Hel"}]}}]}),
        (None, {"choices": [{"index": 0, "delta": {}, "logprobs": {"content": [{"token": "lo"}]}}]}),
        chunk({}, "stop", usage=None),
        (None, {"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
        chunk({"content": " more"}, usage=None),  # a second choice-0 chunk after usage still joins
    ]
    accumulator = ChatAccumulator()
    assert feed(accumulator, events) == ["Hel", "lo", "", "", "", "", " more"]
    raw = accumulator.raw()
    assert raw["choices"][0]["message"]["content"] == "Hello more"
    assert raw["choices"][0]["logprobs"] == {"content": [{"token": "Hel"}, {"token": "lo"}]}
    assert raw["usage"] == {"prompt_tokens": 3, "completion_tokens": 2}


def test_chat_stream_obfuscation_padding_never_reaches_the_answer() -> None:
    # stream_options.include_obfuscation: https://platform.openai.com/docs/api-reference/chat/create
    events = [
        chunk({"role": "assistant", "content": "Hi", "obfuscation": "xQ3"}, obfuscation="a9"),
        chunk({}, "stop", obfuscation="Zk2p"),
    ]
    accumulator = ChatAccumulator()
    feed(accumulator, events)
    raw = accumulator.raw()
    assert "obfuscation" not in raw and "obfuscation" not in raw["choices"][0]["message"]
    assert raw["choices"][0]["message"] == {"role": "assistant", "content": "Hi"}


def test_chat_without_a_finish_reason_is_not_complete() -> None:
    accumulator = ChatAccumulator()
    feed(accumulator, [chunk({"role": "assistant", "content": "Hel"})])
    assert not accumulator.complete


def test_responses_take_the_final_response_and_its_items_when_it_lists_none() -> None:
    item = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "hi"}],
    }
    events: list[tuple[str | None, dict[str, Any]]] = [
        ("response.created", {"type": "response.created", "response": {"id": "r", "output": []}}),
        (None, {"type": "response.output_text.delta", "delta": "hi"}),
        ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
        (None, {"type": "response.completed", "response": {"id": "r", "status": "completed", "output": []}}),
    ]
    accumulator = ResponsesAccumulator()
    assert feed(accumulator, events) == ["", "hi", "", ""]
    assert accumulator.complete
    assert accumulator.raw() == {"id": "r", "status": "completed", "output": [item]}


def anthropic(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    return kind, {"type": kind, **fields}


def test_anthropic_thinking_text_tool_use_and_a_context_editing_report_accumulate() -> None:
    report = {"applied_edits": [{"type": "clear_tool_uses_20250919", "cleared_tool_uses": 2}]}
    start = {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "stop_reason": None}
    events = [
        anthropic("message_start", message={**start, "usage": {"input_tokens": 9, "output_tokens": 1}}),
        anthropic("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""}),
        anthropic("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "Let me "}),
        anthropic("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "see."}),
        anthropic("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "sig=="}),
        anthropic("content_block_stop", index=0),
        anthropic("content_block_start", index=1, content_block={"type": "text", "text": ""}),
        anthropic("ping"),
        anthropic("content_block_delta", index=1, delta={"type": "text_delta", "text": "Reading "}),
        anthropic("content_block_delta", index=1, delta={"type": "citations_delta", "citation": {"n": 1}}),
        anthropic("content_block_delta", index=1, delta={"type": "text_delta", "text": "it."}),
        anthropic("content_block_stop", index=1),
        anthropic(
            "content_block_start",
            index=2,
            content_block={"type": "tool_use", "id": "t1", "name": "r", "input": {}},
        ),
        anthropic("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": ""}),
        anthropic(
            "content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": '{"p": '}
        ),
        anthropic("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": "[1]}"}),
        anthropic("content_block_stop", index=2),
        anthropic(
            "message_delta",
            delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={"output_tokens": 30, "input_tokens": None},
            context_management=report,
        ),
        anthropic("message_stop"),
    ]
    accumulator = AnthropicAccumulator()
    texts = feed(accumulator, events)
    assert "".join(texts) == "Reading it." and [t for t in texts if t] == ["Reading ", "it."]
    raw = accumulator.raw()
    assert raw["content"] == [
        {"type": "thinking", "thinking": "Let me see.", "signature": "sig=="},
        {"type": "text", "text": "Reading it.", "citations": [{"n": 1}]},
        {"type": "tool_use", "id": "t1", "name": "r", "input": {"p": [1]}},
    ]
    assert raw["usage"] == {"input_tokens": 9, "output_tokens": 30}  # a null never erases a count
    assert raw["stop_reason"] == "tool_use" and raw["context_management"] == report
    parsed = parse_response("anthropic", raw)
    assert parsed.message == Message.assistant("Reading it.", [ToolCall("t1", "r", '{"p":[1]}')])


def test_anthropic_completes_on_its_stop_reason_and_not_before() -> None:
    accumulator = AnthropicAccumulator()
    feed(accumulator, [anthropic("message_start", message={"content": []})])
    assert not accumulator.complete
    feed(accumulator, [anthropic("message_delta", delta={"stop_reason": "end_turn"})])
    assert accumulator.complete


def test_gemini_joins_adjacent_texts_keeps_thoughts_apart_and_streams_only_the_answer() -> None:
    def part_chunk(*parts: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
        candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}, "index": 0}
        if finish:
            candidate["finishReason"] = finish
        return None, {
            "candidates": [candidate],
            "usageMetadata": {"promptTokenCount": 4},
            "modelVersion": "g",
        }

    call = {"functionCall": {"name": "ls", "args": {"d": "."}}}
    events = [
        part_chunk({"text": "plan ", "thought": True}),
        part_chunk({"text": "it", "thought": True}),
        part_chunk({"text": "Hel"}),
        part_chunk({"text": "lo"}, call, finish="STOP"),
    ]
    accumulator = GeminiAccumulator()
    assert feed(accumulator, events) == ["", "", "Hel", "lo"]
    assert accumulator.complete
    raw = accumulator.raw()
    assert raw["candidates"][0]["content"]["parts"] == [
        {"text": "plan it", "thought": True},
        {"text": "Hello"},
        call,
    ]
    assert parse_response("gemini", raw).message == Message.assistant(
        "Hello", [ToolCall("ls:0", "ls", '{"d":"."}')]
    )


def test_gemini_a_blocked_prompt_settles_the_answer_without_candidates() -> None:
    accumulator = GeminiAccumulator()
    feed(accumulator, [(None, {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {}})])
    assert accumulator.complete
    assert parse_response("gemini", accumulator.raw()).stop_reason == "SAFETY"


def test_bedrock_reasoning_text_and_tool_use_accumulate_into_a_converse_answer() -> None:
    events: list[tuple[str | None, dict[str, Any]]] = [
        ("messageStart", {"role": "assistant"}),
        ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "hm"}}}),
        ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "s"}}}),
        ("contentBlockStop", {"contentBlockIndex": 0}),
        ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": "On "}}),
        ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": "it."}}),
        ("contentBlockStop", {"contentBlockIndex": 1}),
        (
            "contentBlockStart",
            {"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "t", "name": "ls"}}},
        ),
        ("contentBlockStop", {"contentBlockIndex": 2}),
        ("messageStop", {"stopReason": "tool_use"}),
        ("metadata", {"usage": {"inputTokens": 3, "outputTokens": 4}, "metrics": {"latencyMs": 9}}),
    ]
    accumulator = BedrockAccumulator()
    assert "".join(feed(accumulator, events)) == "On it."
    raw = accumulator.raw()
    assert raw["output"]["message"]["content"] == [
        {"reasoningContent": {"reasoningText": {"text": "hm", "signature": "s"}}},
        {"text": "On it."},
        {"toolUse": {"toolUseId": "t", "name": "ls"}},  # no input delta: the block had no input
    ]
    parsed = parse_response("bedrock-converse", raw)
    assert parsed.message == Message.assistant("On it.", [ToolCall("t", "ls", "{}")])
    assert (parsed.stop_reason, parsed.usage.input_tokens) == ("tool_use", 3)


@pytest.mark.parametrize(
    ("accumulator", "events", "what"),
    [
        (
            AnthropicAccumulator(),
            [
                anthropic("content_block_start", index=0, content_block={"type": "tool_use", "input": {}}),
                anthropic(
                    "content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": '{"p'}
                ),
                anthropic("content_block_stop", index=0),
            ],
            "tool input of block 0 is not JSON",
        ),
        (
            BedrockAccumulator(),
            [
                ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"toolUse": {"input": "{"}}}),
                ("contentBlockStop", {"contentBlockIndex": 0}),
            ],
            "toolUse input of block 0 is not JSON",
        ),
    ],
    ids=["anthropic", "bedrock"],
)
def test_tool_input_that_is_not_json_is_a_malformed_stream(accumulator: Any, events: Any, what: str) -> None:
    with pytest.raises(MalformedStream) as info:
        feed(accumulator, events)
    assert str(info.value).startswith(what)
    assert info.value.data is not None and json.dumps(info.value.data)
