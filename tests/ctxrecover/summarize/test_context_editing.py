"""SPEC §9: Anthropic context editing requested and mirrored locally."""

from __future__ import annotations

import copy

from ctxrecover.archive import MemoryArchive, extract_keys
from ctxrecover.messages import Message, ToolCall
from ctxrecover.summarize.context_editing import (
    CONTEXT_MANAGEMENT_BETA,
    context_management_request,
    mirror_applied_edits,
)


def _history(n: int) -> list[Message]:
    history = [Message.system("sys"), Message.user("task")]
    for i in range(n):
        history.append(Message.assistant("", [ToolCall(f"t{i}", "read", "{}")]))
        history.append(Message.tool(f"t{i}", f"result {i} " + "x" * 100))
    history.append(Message.assistant("done"))
    return history


def test_request_carries_beta_header_and_clear_tool_uses_edit() -> None:
    headers, body = context_management_request()
    assert headers == {"anthropic-beta": CONTEXT_MANAGEMENT_BETA}
    assert body == {
        "context_management": {
            "edits": [
                {
                    "type": "clear_tool_uses_20250919",
                    "trigger": {"type": "input_tokens", "value": 100_000},
                    "keep": {"type": "tool_uses", "value": 5},
                    "clear_at_least": {"type": "input_tokens", "value": 20_000},
                }
            ]
        }
    }


def test_applied_edits_stub_the_oldest_results_with_recallable_markers() -> None:
    history, store = _history(8), MemoryArchive()
    before = copy.deepcopy(history)
    raw = {
        "context_management": {
            "applied_edits": [
                {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 3, "cleared_input_tokens": 21000}
            ]
        }
    }
    out, report = mirror_applied_edits(history, raw, archive=store)
    assert history == before
    assert (report.edits, report.cleared_tool_uses, report.cleared_input_tokens, report.mirrored) == (
        1,
        3,
        21000,
        3,
    )
    tools = [m for m in out if m.role == "tool"]
    for i, msg in enumerate(tools[:3]):
        assert msg.content.startswith("[Tool result cleared by the provider's context editing — ")
        (key,) = extract_keys(msg.content)
        assert store.get(key) == f"result {i} " + "x" * 100
        assert msg.tool_call_id == f"t{i}"
    assert [m.content for m in tools[3:]] == [m.content for m in history if m.role == "tool"][3:]


def test_no_applied_edits_returns_the_same_list() -> None:
    history = _history(2)
    out, report = mirror_applied_edits(history, {"content": []}, archive=MemoryArchive())
    assert out is history and not report.applied
