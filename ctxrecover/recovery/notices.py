"""What recovery and pre-flight say (SPEC §6, §7): the user-visible texts, byte for byte, and their codes."""

from __future__ import annotations

from ctxrecover.sizes import MIB, format_payload_size

__all__ = [
    "ASSUMED_CAP_CODE",
    "ASSUMED_CAP_NOTICE",
    "FLOOR_FAIL_CODE",
    "FLOOR_FAIL_NOTICE",
    "FLOOR_WARNING_CODE",
    "FLOOR_WARNING_NOTICE",
    "LEARNED_CAP_CODE",
    "LEARNED_CAP_NOTICE",
    "PAYLOAD_LIMIT_MARKER",
    "PAYLOAD_LIMIT_NOTICE",
    "PREFLIGHT_CODE",
    "PREFLIGHT_NOTICE",
    "RECOVERABLE_FAILURE_CODE",
    "UNCAPPED_HISTORY_CODE",
    "UNCAPPED_HISTORY_NOTICE",
    "size_text",
]

LEARNED_CAP_NOTICE = (
    "ℹ Gateway rejected a %s request — payload cap set to %s for this session "
    "(export CHATCLI_MAX_PAYLOAD to override)"
)
ASSUMED_CAP_NOTICE = "ℹ Assuming %s payload cap — export CHATCLI_MAX_PAYLOAD (e.g. 5MB, 512KB) to adjust"
FLOOR_FAIL_NOTICE = (
    "✖ The non-compactable request base (system prompt: %s — personas, skills, MCP tool docs) "
    "meets or exceeds the size the gateway rejected (%s). History compaction cannot help — reduce "
    "MCP servers, skills or personas, or raise the proxy/WAF body-size limit"
)
FLOOR_WARNING_NOTICE = (
    "⚠ System prompt alone is %s — close to the gateway's rejection threshold; "
    "consider reducing MCP servers, skills or personas"
)
PAYLOAD_LIMIT_MARKER = "[SYSTEM NOTICE — PAYLOAD LIMIT HIT]"
PAYLOAD_LIMIT_NOTICE = (
    PAYLOAD_LIMIT_MARKER + " A proxy/gateway rejected the previous request due to body size. "
    "History was compacted to recover. Going forward: (1) When reading files, prefer targeted reads "
    "with line ranges (e.g. sed -n '100,200p' file, or read_file with offset+limit) instead of "
    "reading entire files. (2) Prefer grep/ripgrep with specific patterns over full-file reads. "
    "(3) If you previously read a large file, its full content is persisted at the path shown in the "
    "tool-result preview — re-read specific ranges from that file rather than repeating the original "
    "read. (4) Summarize findings incrementally rather than accumulating raw tool output."
)
PREFLIGHT_NOTICE = "ℹ pre-flight: history %s ≈ %d%% of configured cap (%s) — compacting"
UNCAPPED_HISTORY_NOTICE = (
    "ℹ history %s — if you are behind a proxy/gateway, export CHATCLI_MAX_PAYLOAD=5MB "
    "(adjust to the proxy limit)"
)

# Notice codes, for filtering events.
RECOVERABLE_FAILURE_CODE = "recoverable_failure"
LEARNED_CAP_CODE = "learned_cap"
ASSUMED_CAP_CODE = "assumed_cap"
FLOOR_FAIL_CODE = "payload_floor"
FLOOR_WARNING_CODE = "payload_floor_warning"
PREFLIGHT_CODE = "preflight"
UNCAPPED_HISTORY_CODE = "uncapped_history"


def size_text(n: int) -> str:
    """``4 MB`` for a whole number of MiB (the SPEC's wording), else :func:`format_payload_size`."""
    return f"{n // MIB} MB" if n >= MIB and n % MIB == 0 else format_payload_size(n)
