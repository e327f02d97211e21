"""Anthropic server-side context editing, mirrored locally (SPEC §9).

With ``CHATCLI_CONTEXT_ENGINE=provider`` every Anthropic request carries the
``context-management-2025-06-27`` beta and a ``clear_tool_uses_20250919`` edit.
When the response reports applied edits, the API has already dropped the
oldest tool results from what the model saw; :func:`mirror_applied_edits`
makes the local history agree: those results become stubs with recall markers
(the originals archived first), so nothing is lost and the next request does
not resend what the server cleared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxrecover.archive import Archive, has_marker, marker
from ctxrecover.messages import Message

__all__ = [
    "CONTEXT_MANAGEMENT_BETA",
    "ContextEditReport",
    "context_management_request",
    "mirror_applied_edits",
]

CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
CLEAR_TOOL_USES_EDIT = "clear_tool_uses_20250919"
TRIGGER_INPUT_TOKENS = 100_000
KEEP_TOOL_USES = 5
CLEAR_AT_LEAST_TOKENS = 20_000
CLEARED_STUB = "[Tool result cleared by the provider's context editing — {chars} chars]"
RECALL_SUFFIX = "\n[full content recoverable via @recall {marker}]"


def context_management_request(
    *,
    trigger_input_tokens: int = TRIGGER_INPUT_TOKENS,
    keep_tool_uses: int = KEEP_TOOL_USES,
    clear_at_least_tokens: int = CLEAR_AT_LEAST_TOKENS,
) -> tuple[dict[str, str], dict[str, Any]]:
    """The ``(headers, body fields)`` that enable tool-result clearing on an Anthropic request."""
    edit = {
        "type": CLEAR_TOOL_USES_EDIT,
        "trigger": {"type": "input_tokens", "value": trigger_input_tokens},
        "keep": {"type": "tool_uses", "value": keep_tool_uses},
        "clear_at_least": {"type": "input_tokens", "value": clear_at_least_tokens},
    }
    return {"anthropic-beta": CONTEXT_MANAGEMENT_BETA}, {"context_management": {"edits": [edit]}}


@dataclass(frozen=True, slots=True)
class ContextEditReport:
    """What the provider cleared and what was mirrored locally."""

    edits: int = 0
    cleared_tool_uses: int = 0
    cleared_input_tokens: int = 0
    mirrored: int = 0

    @property
    def applied(self) -> bool:
        return self.edits > 0


def _applied_edits(raw: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    management = raw.get("context_management") if isinstance(raw, Mapping) else None
    edits = management.get("applied_edits") if isinstance(management, Mapping) else None
    return [e for e in edits if isinstance(e, Mapping)] if isinstance(edits, list) else []


def mirror_applied_edits(
    history: list[Message], raw_response: Mapping[str, Any], *, archive: Archive
) -> tuple[list[Message], ContextEditReport]:
    """Stub the oldest tool results the provider reports as cleared.

    Returns the input list unchanged when the response reports no applied edit.
    """
    edits = _applied_edits(raw_response)
    cleared = sum(int(e.get("cleared_tool_uses") or 0) for e in edits)
    tokens = sum(int(e.get("cleared_input_tokens") or 0) for e in edits)
    if not edits:
        return history, ContextEditReport()
    out = list(history)
    mirrored = 0
    for index, msg in enumerate(out):
        if mirrored >= cleared:
            break
        if msg.role != "tool" or msg.preserve_verbatim:
            continue
        mirrored += 1
        if has_marker(msg.content):  # already a stub: its original is archived
            continue
        key = archive.put(msg.content)
        stub = CLEARED_STUB.format(chars=len(msg.content)) + RECALL_SUFFIX.format(marker=marker(key))
        out[index] = msg.with_content(stub)
    report = ContextEditReport(
        edits=len(edits), cleared_tool_uses=cleared, cleared_input_tokens=tokens, mirrored=mirrored
    )
    return out, report
