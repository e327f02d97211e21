"""A ready ``recall`` tool that lets the model expand ``<<ccr:KEY>>`` markers.

Register :data:`RECALL_TOOL` with your agent (its ``definition`` is a neutral
name/description/JSON-schema triple; ``openai()`` / ``anthropic()`` give the
provider shapes) and answer its calls with :meth:`RecallTool.handle`; the result
is a ``tool`` message flagged ``preserve_verbatim`` so compaction keeps it whole.

>>> from ctxrecover.archive import MemoryArchive, marker
>>> store = MemoryArchive()
>>> key = store.put("the original text")
>>> tool = RecallTool(store)
>>> reply = tool.handle(ToolCall("c1", "recall", '{"keys": ["%s"]}' % key))
>>> reply.content, reply.preserve_verbatim
('the original text', True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxrecover.archive.lookup import recall
from ctxrecover.archive.store import Archive
from ctxrecover.messages import Message, ToolCall

__all__ = ["RECALL_TOOL_NAME", "RecallTool", "ToolDefinition"]

RECALL_TOOL_NAME = "recall"
RECALL_TOOL_DESCRIPTION = (
    "Restore content that context compaction archived. Pass the markers (<<ccr:KEY>>) or their "
    "16-hex keys that you see in truncated or summarized messages; the original text is returned whole."
)
RECALL_TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "keys": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Markers like <<ccr:0123456789abcdef>> or bare 16-hex keys.",
        }
    },
    "required": ["keys"],
}
NO_KEYS_TEXT = "[recall: no <<ccr:KEY>> marker or 16-hex key found in the request]"


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A provider-neutral tool definition."""

    name: str
    description: str
    parameters: dict[str, Any]

    def openai(self) -> dict[str, Any]:
        """The OpenAI Chat Completions ``tools`` entry."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def anthropic(self) -> dict[str, Any]:
        """The Anthropic Messages ``tools`` entry."""
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}


class RecallTool:
    """The recall tool bound to an archive."""

    definition = ToolDefinition(RECALL_TOOL_NAME, RECALL_TOOL_DESCRIPTION, RECALL_TOOL_PARAMETERS)

    def __init__(self, archive: Archive) -> None:
        self._archive = archive

    def handle(self, call: ToolCall) -> Message:
        """Answer one ``recall`` call with a verbatim tool result.

        The arguments are read leniently (JSON with ``keys``/``key``/``markers``…,
        or plain text holding markers); unknown or evicted keys are reported in
        the result, never raised.
        """
        result = recall(self._archive, call.arguments or "")
        content = result.text if (result.found or result.missing) else NO_KEYS_TEXT
        return Message.tool(call.id, content, name=call.name, preserve_verbatim=bool(result.found))
