"""The recall tool the model uses to expand <<ccr:KEY>> markers (SPEC §4)."""

from __future__ import annotations

import json

from ctxrecover.archive import MemoryArchive, marker
from ctxrecover.archive.recall_tool import NO_KEYS_TEXT, RecallTool
from ctxrecover.messages import ToolCall


def test_definition_shapes_for_openai_and_anthropic() -> None:
    definition = RecallTool.definition
    assert definition.openai()["function"]["name"] == "recall"
    assert definition.anthropic()["input_schema"]["required"] == ["keys"]
    json.dumps(definition.openai())  # serialisable as a request field


def test_recall_returns_original_as_verbatim_tool_result() -> None:
    store = MemoryArchive()
    key_a, key_b = store.put("alpha text"), store.put("beta text")
    tool = RecallTool(store)
    args = json.dumps({"keys": [marker(key_a), f"ccr:{key_b}"]})
    reply = tool.handle(ToolCall("call_1", "recall", args))
    assert reply.role == "tool" and reply.tool_call_id == "call_1"
    assert reply.preserve_verbatim
    assert reply.content == "alpha text\n\nbeta text"


def test_unknown_key_is_reported_not_raised() -> None:
    tool = RecallTool(MemoryArchive())
    reply = tool.handle(ToolCall("c", "recall", '{"keys": ["0123456789abcdef"]}'))
    assert "0123456789abcdef" in reply.content and "unknown or evicted" in reply.content
    assert not reply.preserve_verbatim


def test_request_without_keys_says_so() -> None:
    reply = RecallTool(MemoryArchive()).handle(ToolCall("c", "recall", "please"))
    assert reply.content == NO_KEYS_TEXT
