"""What recovery and pre-flight say (SPEC §6, §7, §11): the user-visible texts and their codes.

The SPEC texts are reproduced exactly; the texts of the gateway model's decisions (SPEC §11: content
blocks, header faults, a floor that is not the system prompt, a lifted cap, a lowered max_tokens) are
ours, in the same style: a symbol, what happened with real sizes, what it means, what to do.
"""

from __future__ import annotations

from ctxrecover.sizes import MIB, format_payload_size

__all__ = [
    "ASSUMED_CAP_CODE",
    "ASSUMED_CAP_NOTICE",
    "CAP_LIFTED_NOTICE",
    "BLOCK_BUDGET_NOTICE",
    "BLOCK_NOT_REPRODUCED_CODE",
    "BLOCK_BUDGET_CODE",
    "BLOCK_BUDGET_SIZE_NOTICE",
    "BLOCK_NOT_REPRODUCED_NOTICE",
    "CONTENT_BLOCK_CODE",
    "CONTENT_BLOCK_NOTICE",
    "CONTENT_FLOOR_CODE",
    "CONTENT_REFUSED_CODE",
    "CONTENT_REFUSED_NOTICE",
    "CONTENT_FLOOR_NOTICE",
    "CONTENT_WITHHELD_CODE",
    "CONTENT_WITHHELD_NOTICE",
    "POLICY_BLOCK_CODE",
    "POLICY_BLOCK_NOTICE",
    "WITHHELD_AGAIN_NOTICE",
    "FLOOR_NEAR_FAIL_NOTICE",
    "FLOOR_SMALLEST_FAIL_NOTICE",
    "FLOOR_TOOLS_FAIL_NOTICE",
    "HEADER_FAULT_CODE",
    "HEADER_FAULT_NOTICE",
    "OUTPUT_LIMIT_CODE",
    "OUTPUT_LIMIT_DEFAULT_NOTICE",
    "OUTPUT_LIMIT_NOTICE",
    "PREFLIGHT_LEARNED_NOTICE",
    "ROLE_LABELS",
    "SUSPECTED_REPEAT_REASON",
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
# SPEC §11: the same line when the cap in force was learned, not configured.
PREFLIGHT_LEARNED_NOTICE = "ℹ pre-flight: history %s ≈ %d%% of learned cap (%s) — compacting"
UNCAPPED_HISTORY_NOTICE = (
    "ℹ history %s — if you are behind a proxy/gateway, export CHATCLI_MAX_PAYLOAD=5MB "
    "(adjust to the proxy limit)"
)


# -- SPEC §11 decisions (our texts) ------------------------------------------------------------
#: The learned cap no longer holds: a request at or above every size-consistent rejection passed.
CAP_LIFTED_NOTICE = (
    "ℹ Gateway accepted a %s request — the learned payload cap (%s) is lifted for this session"
)
#: A rejection no larger than an accepted request: rejected size, largest accepted size, index, role, size.
CONTENT_BLOCK_NOTICE = (
    "✖ Gateway refused a %s request although it had accepted a %s one — a content/policy block, not a "
    "size limit: payload cap unchanged, history not compacted. Likely trigger: the newest message "
    "(#%d, %s, %s) — remove or rephrase it, or ask the gateway's administrators which rule matched"
)
#: SPEC §12, one per culprit: the block's status and size, the part withheld (passes.withhold.part_label).
CONTENT_WITHHELD_NOTICE = (
    "⚠ The gateway blocked this request for its content (%s at %s): %s withheld and archived — recall it "
    "locally; ask your security team to allow it"
)
#: Content identical to a part withheld earlier (the same file read again), withheld before sending.
WITHHELD_AGAIN_NOTICE = (
    "⚠ %s is identical to content the gateway refused earlier: withheld and archived before sending — "
    "recall it locally; ask your security team to allow it"
)
#: SPEC §12: even a one-word request with no conversation content was refused (status, size).
POLICY_BLOCK_NOTICE = (
    "✖ The gateway refused even a one-word request carrying no conversation content (%s at %s): it refuses "
    "this route or client, not this conversation — nothing was compacted and no cap was learned; check the "
    "proxy's access rules for this route, then try again"
)
#: SPEC §12: the system prompt or the tool definitions themselves are refused (what, status, size).
CONTENT_FLOOR_NOTICE = (
    "✖ The gateway refuses the %s itself: a request of only it and a one-word message was blocked (%s at "
    "%s) — no compaction can help; ask your security team to allow it, or change it"
)
#: SPEC §12: the turn's budget of blocked requests is spent (blocked, budget, where the search stopped).
BLOCK_BUDGET_NOTICE = (
    "✖ The gateway blocked %d requests of this turn for their content (budget %d, "
    "CHATCLI_MAX_BLOCKED_REQUESTS): the refused content is among %s — set it aside, or ask your security "
    "team which rule matched"
)
#: A retry refused again after the turn's budget of blocked requests was spent (blocked, budget, last size).
BLOCK_BUDGET_SIZE_NOTICE = (
    "✖ The gateway blocked %d requests of this turn (budget %d, CHATCLI_MAX_BLOCKED_REQUESTS), the last "
    "at %s: nothing more is sent this turn — compact or set aside what it carries, or ask your security "
    "team which rule matched"
)
#: A block the experiments could not reproduce (status, size): the content passed when tested again.
BLOCK_NOT_REPRODUCED_NOTICE = (
    "⚠ The gateway's block (%s at %s) did not reproduce: the same content passed in a test request — "
    "nothing withheld, the request is sent again"
)
#: SPEC §12: the provider itself refused the content (its reason, as ``wire path = value``).
CONTENT_REFUSED_NOTICE = (
    "✖ The provider refused this request's content (%s): nothing was compacted or retried — rephrase it, "
    "or remove what it flagged"
)
#: HTTP 431: header bytes (or "unknown size"), body bytes.
HEADER_FAULT_NOTICE = (
    "✖ Gateway rejected the request headers (HTTP 431, %s of headers; body %s) — a header limit, not a "
    "body size: history compaction cannot help. Shorten cookies, tokens or custom headers, or raise the "
    "proxy's header-size limit"
)
#: The system prompt fits but system prompt + tool definitions do not: system, tools, rejected size.
FLOOR_TOOLS_FAIL_NOTICE = (
    "✖ The non-compactable request base (system prompt: %s, tool definitions: %s) meets or exceeds the "
    "size the gateway rejected (%s). History compaction cannot help — reduce MCP servers or tool "
    "definitions, or raise the proxy/WAF body-size limit"
)
#: Compaction did all it could and the request is still too large: smallest request, its parts, rejected.
#: Compaction's smallest request is below the rejected size by less than the model's resolution:
#: that request, system, tools, newest messages, the share, the rejected size.
FLOOR_NEAR_FAIL_NOTICE = (
    "✖ The smallest request compaction can produce is %s (system prompt: %s, tool definitions: %s, "
    "newest messages: %s), less than %s below the size the gateway rejected (%s). History compaction "
    "cannot help further — shorten the newest messages, reduce MCP servers, skills or personas, or raise "
    "the proxy/WAF body-size limit"
)
FLOOR_SMALLEST_FAIL_NOTICE = (
    "✖ The smallest request compaction can produce is %s (system prompt: %s, tool definitions: %s, "
    "newest messages: %s) and meets or exceeds the size the gateway rejected (%s). History compaction "
    "cannot help further — shorten the newest messages, reduce MCP servers, skills or personas, or raise "
    "the proxy/WAF body-size limit"
)
#: A 400 saying max_tokens is too large: the rejected value, the value retried.
OUTPUT_LIMIT_NOTICE = (
    "ℹ Provider rejected max_tokens=%d as too large — retrying with max_tokens=%d for this session "
    "(no compaction)"
)
#: The same when the request set no max_tokens (the provider's default was refused): the value retried.
OUTPUT_LIMIT_DEFAULT_NOTICE = (
    "ℹ Provider rejected its default max_tokens (the request set none) as too large — retrying with "
    "max_tokens=%d for this session (no compaction)"
)
#: Reason label of an EOF/reset with a large history (SPEC §2.5), and of one repeated at a size (§11).
SUSPECTED_REPEAT_REASON = "suspected payload limit (network error repeated at %s)"
#: How notices name a message's role.
ROLE_LABELS: dict[str, str] = {
    "system": "system message",
    "user": "user message",
    "assistant": "assistant message",
    "tool": "tool result",
}

# Notice codes, for filtering events.
RECOVERABLE_FAILURE_CODE = "recoverable_failure"
LEARNED_CAP_CODE = "learned_cap"
ASSUMED_CAP_CODE = "assumed_cap"
FLOOR_FAIL_CODE = "payload_floor"
FLOOR_WARNING_CODE = "payload_floor_warning"
PREFLIGHT_CODE = "preflight"
UNCAPPED_HISTORY_CODE = "uncapped_history"
CONTENT_BLOCK_CODE = "content_block"
BLOCK_NOT_REPRODUCED_CODE = "block_not_reproduced"
BLOCK_BUDGET_CODE = "block_budget"
CONTENT_WITHHELD_CODE = "content_withheld"
CONTENT_REFUSED_CODE = "content_refused"
POLICY_BLOCK_CODE = "policy_block"
CONTENT_FLOOR_CODE = "content_floor"
HEADER_FAULT_CODE = "header_fault"
OUTPUT_LIMIT_CODE = "output_limit"


def size_text(n: int) -> str:
    """``4 MB`` for a whole number of MiB (the SPEC's wording), else :func:`format_payload_size`."""
    return f"{n // MIB} MB" if n >= MIB and n % MIB == 0 else format_payload_size(n)
