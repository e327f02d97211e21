"""What a summarizer reads: its input budget, the rendered segment and the summary prompt (SPEC §5).

The segment is budgeted against the *summarizer's* window, not the agent's:
half of it (floor 20 000 chars) minus the prompt, split max-min fairly between
messages. A ``<<ccr:KEY>>`` stub (a message holding less than half of its archived
original) is rendered as that original when the original fits its share — except a message
set aside because a gateway refused to carry it (:func:`is_set_aside`): what is known to be refused
is never sent again, not even inside a summarizer's prompt; it stays archived and recallable.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ctxrecover.archive import extract_keys
from ctxrecover.errors import ConfigError
from ctxrecover.passes.cuts import head_end, tail_start
from ctxrecover.passes.parts import SET_ASIDE_NOTE

if TYPE_CHECKING:
    from ctxrecover.archive import Archive
    from ctxrecover.messages import Message

__all__ = [
    "DEFAULT_CHARS_PER_TOKEN",
    "SEGMENT_HEADER",
    "SUMMARY_PROMPT",
    "build_prompt",
    "is_set_aside",
    "render_segment",
    "split_prompt",
    "summary_input_budget",
]

# -- input budgeting (SPEC §5 level 2) ------------------------------------------------
SUMMARY_INPUT_SHARE = 0.5  # the segment may take half of the summarizer's window
SUMMARY_INPUT_FLOOR_CHARS = 20_000
MIN_SHARE_PER_MESSAGE = 600
HEAD_SHARE = 0.75  # head and tail are kept 3:1
TRUNCATION_SEPARATOR = "\n... [truncated for summarization] ...\n"
LINE_TEMPLATE = "[{role}]: {content}\n\n"
TOOL_CALLS_TEMPLATE = "\n[tool_calls: {names}]"
DEFAULT_CHARS_PER_TOKEN = 4.0
# A message is a stub, restored from its archived original for the summarizer, when it holds less
# than this share of that original (a one-line "cleared" note, a 5 KB preview of a 40 KB result). A
# head-and-tail cut that kept more (recovery Level 1 keeps 5 000 chars of a long answer) is read as it
# is: restoring it would pay for the whole original to learn the part the cut left out.
STUB_MAX_SHARE = 0.5
# The stub Session.set_aside leaves (passes.parts.SET_ASIDE_NOTE): its size and recall marker vary.
SET_ASIDE_RE = re.compile(r".+?".join(map(re.escape, SET_ASIDE_NOTE.split("%s"))))
SET_ASIDE_HEAD = SET_ASIDE_NOTE.split("%s", 1)[0]

# -- prompt ----------------------------------------------------------------------------
SUMMARY_PROMPT = """You are a precise, factual note-taker. Extract only facts that are stated in the \
conversation segment below; your notes replace the segment in the working context of an agent that \
is still doing the task.

Use exactly this structure and leave out any section with nothing to report:

## Files Read
- <exact path> (<line count or size, if known>) — <what it contains, in one line>

## Files Modified
- <exact path>:<lines> — <what changed and why>

## Commands Executed
- <command or tool call> → <outcome: success/failure and the key output>

## Key Decisions
- <decision> — <rationale>

## Errors & Resolutions
- <first line of the exact error message> → <how it was resolved, or "unresolved">

## Current Task State
- Done: <what is finished>
- Pending: <what remains, and the next step>

Rules:
- Copy paths, identifiers, numbers and error messages exactly; never paraphrase them.
- Reference code by file:line instead of quoting it; no code blocks or XML tags.
- Add nothing that is not explicitly in the segment; keep each bullet to one line.
- Keep every <<ccr:KEY>> marker you see next to the fact it belongs to: it points to the archived \
original.
- Answer with the notes only: no preamble, no apology, no closing remarks."""
INSTRUCTION_TEMPLATE = (
    "\n\nUSER GUIDANCE FOR THIS SUMMARY (from /compact; follow it wherever it does not "
    "contradict the rules above):\n{instruction}"
)
SEGMENT_HEADER = "\n\nCONVERSATION SEGMENT TO EXTRACT FROM:\n\n"


def summary_input_budget(
    window_tokens: int, prompt_chars: int, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN
) -> int:
    """Chars the rendered segment may take: half the window (floor 20 000) minus the prompt."""
    if not isinstance(window_tokens, int) or window_tokens <= 0:
        raise ConfigError(
            f"window_tokens must be the summarizer's context window in tokens (> 0), got {window_tokens!r}"
        )
    if chars_per_token <= 0:
        raise ConfigError(f"chars_per_token must be > 0 (default 4.0), got {chars_per_token!r}")
    half_window = int(window_tokens * chars_per_token * SUMMARY_INPUT_SHARE)
    return max(0, max(SUMMARY_INPUT_FLOOR_CHARS, half_window) - max(0, prompt_chars))


def _fair_shares(demands: Sequence[int], budget: int) -> list[int]:
    """Max-min fair split of ``budget``: short demands are met, the rest share what is left.

    Every share is at least ``MIN_SHARE_PER_MESSAGE`` (or the whole demand when smaller).
    """
    shares = [0] * len(demands)
    remaining = max(0, budget)
    order = sorted(range(len(demands)), key=demands.__getitem__)
    for position, index in enumerate(order):
        fair = max(MIN_SHARE_PER_MESSAGE, remaining // (len(demands) - position))
        shares[index] = min(demands[index], fair)
        remaining -= shares[index]
    return shares


def is_set_aside(content: str) -> bool:
    """Whether ``content`` is (or holds) the stub of a message set aside because a gateway refused
    to carry it (:data:`~ctxrecover.passes.SET_ASIDE_NOTE`)."""
    return SET_ASIDE_HEAD in content and SET_ASIDE_RE.search(content) is not None


def _archived_original(content: str, archive: Archive | None) -> str | None:
    """The original a stub was folded from: the first marker whose entry is over
    ``1 / STUB_MAX_SHARE`` times as long as the message (a cut that still holds most of its
    original is read as it is). Never the original of a set-aside message: the gateway
    refused it, and a summary quoting it would be refused again."""
    if archive is None or is_set_aside(content):
        return None
    for key in extract_keys(content):
        original = archive.get(key)
        if original is not None and len(content) < len(original) * STUB_MAX_SHARE:
            return original
    return None


def _head_and_tail(content: str, share: int) -> str:
    if len(content) <= share:
        return content
    kept = max(0, share - len(TRUNCATION_SEPARATOR))
    head_room = round(kept * HEAD_SHARE)
    head = head_end(content, head_room)
    return content[:head] + TRUNCATION_SEPARATOR + content[tail_start(content, kept - head_room, head) :]


def render_segment(
    segment: list[Message],
    *,
    archive: Archive | None,
    window_tokens: int,
    prompt_chars: int,
    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
) -> str:
    """Render a segment for the summarizer within its input budget (SPEC §5 level 2).

    Each message is a line ``[role]: content\\n\\n`` (tool calls appended as
    ``\\n[tool_calls: a, b]``). The content budget (see :func:`summary_input_budget`,
    minus the framing) is split max-min fairly: short messages keep their text and
    their unused share goes to the longer ones; no share is below 600 chars. A
    message folded into a ``<<ccr:KEY>>`` stub is restored from ``archive`` when the
    original fits its share; a longer text keeps head and tail 3:1 around
    ``\\n... [truncated for summarization] ...\\n``. The total stays within the
    budget unless the 600-char floor makes that impossible. A message that holds half of
    its original or more (a head-and-tail cut), and a message set aside for a gateway's
    content rule (:func:`is_set_aside`), are read as they are. Input is not mutated.
    """
    budget = summary_input_budget(window_tokens, prompt_chars, chars_per_token)
    if not segment:
        return ""
    suffixes = [
        TOOL_CALLS_TEMPLATE.format(names=", ".join(call.name for call in msg.tool_calls))
        if msg.tool_calls
        else ""
        for msg in segment
    ]
    line_overhead = len(LINE_TEMPLATE.format(role="", content=""))
    framing = sum(len(m.role) + len(s) + line_overhead for m, s in zip(segment, suffixes, strict=True))
    content_budget = budget - framing
    # A summary (or truncation notice) stands for a whole earlier segment: it is fed as is.
    # Restoring the transcript behind its marker would re-summarize the conversation from
    # its start at every compaction (quadratic summarizer cost); single-message stubs
    # (previews, cleared results) are restored when their original fits.
    originals = [None if msg.is_summary else _archived_original(msg.content, archive) for msg in segment]
    demands = [len(o) if o is not None else len(m.content) for m, o in zip(segment, originals, strict=True)]
    # A stub whose original does not fit gives its claim back; shares only grow, so
    # the originals already judged to fit keep fitting.
    while True:
        shares = _fair_shares(demands, content_budget)
        too_big = [i for i, o in enumerate(originals) if o is not None and len(o) > shares[i]]
        if not too_big:
            break
        for i in too_big:
            originals[i] = None
            demands[i] = len(segment[i].content)
    parts = []
    for msg, original, share, suffix in zip(segment, originals, shares, suffixes, strict=True):
        content = original if original is not None else _head_and_tail(msg.content, share)
        parts.append(f"[{msg.role}]: {content}{suffix}\n\n")  # LINE_TEMPLATE, inlined on the hot path
    return "".join(parts)


def build_prompt(segment_text: str, instruction: str | None = None) -> str:
    """The summary prompt, the user's ``/compact`` guidance if any, then the segment."""
    guidance = ""
    if instruction is not None and instruction.strip():
        guidance = INSTRUCTION_TEMPLATE.format(instruction=instruction.strip())
    return SUMMARY_PROMPT + guidance + SEGMENT_HEADER + segment_text


def split_prompt(prompt: str) -> tuple[str, str]:
    """``(prompt head, segment)`` of a :func:`build_prompt` text; no header → all segment."""
    head, header, segment = prompt.partition(SEGMENT_HEADER)
    if not header:
        return "", prompt
    return head + header, segment
