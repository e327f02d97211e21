"""The summary quality gate (SPEC §5 Level 2): reject empty, refusing or too-short answers, try once more.

:func:`gated_summary` asks a summarizer — as a flow: it yields the
:class:`~ctxrecover.summarize.protocol.SummarizeCall` and is sent the answer —,
checks the answer with :func:`check_summary` and asks once more before giving up
with a :class:`SummarizationFailed` that carries the calls, tokens and cost
already spent. :func:`summarize_with_gate` does the same, calling the summarizer
itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ctxrecover.cancel import CancelToken
from ctxrecover.errors import CompactionCancelled, ConfigError, SummarizerError
from ctxrecover.summarize.protocol import SummarizeCall, SummarizeFlow, Summarizer, run_summaries

__all__ = [
    "GatedSummary",
    "SummarizationFailed",
    "check_summary",
    "gated_summary",
    "summarize_with_gate",
    "summary_min_chars",
]

# -- quality gate ------------------------------------------------------------------------
# An answer is a refusal when it *starts* with one of these (case-insensitive, after
# leading whitespace, quotes and markdown emphasis; curly apostrophes count as straight).
REFUSAL_PREFIXES: tuple[str, ...] = (
    # English
    r"i'?m sorry",
    r"i am sorry",
    r"sorry,",
    r"i apologi[sz]e",
    r"i can'?t\b",
    r"i cannot\b",
    r"i can not\b",
    r"i'?m (?:not able|unable)\b",
    r"i am (?:not able|unable)\b",
    r"i won'?t\b",
    r"i will not\b",
    r"as an ai\b",
    r"unfortunately,? i\b",
    # Portuguese
    r"desculp[ae]\b",
    r"lamento\b",
    r"sinto muito\b",
    r"n[ãa]o posso\b",
    r"n[ãa]o consigo\b",
    r"infelizmente,? n[ãa]o\b",
    r"como (?:uma )?ia\b",
    r"como um modelo de linguagem\b",
    # Spanish
    r"lo siento\b",
    r"no puedo\b",
)
REFUSAL_RE = re.compile(r"^(?:" + "|".join(REFUSAL_PREFIXES) + ")", re.IGNORECASE)
_LEADING_NOISE = " \t\r\n\"'`*_>“‘"
# Minimum summary length: one char per 500 chars of segment, never more than 80 chars.
# `SUMMARY` (7 chars) passes for a 200-char segment (floor 0) and fails for a
# 100 000-char one (floor 80).
SUMMARY_MIN_CHARS_PER_SEGMENT_CHARS = 500
SUMMARY_MIN_CHARS_CAP = 80
REFUSAL_EXCERPT_CHARS = 40


@dataclass(frozen=True, slots=True)
class GatedSummary:
    """An answer that passed the quality gate, with the usage of every call spent on it."""

    text: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    rejections: tuple[str, ...] = ()
    model: str | None = None


class SummarizationFailed(SummarizerError):
    """The summarizer failed or every answer was rejected; usage already spent is attached.

    The compactor accounts ``calls``/``input_tokens``/``output_tokens``/``cost_usd`` and
    falls back to truncation.
    """

    def __init__(
        self,
        message: str,
        *,
        calls: int = 0,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_usd: float = 0.0,
        rejections: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.calls = calls
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cost_usd = cost_usd
        self.rejections = rejections


# -- quality gate -------------------------------------------------------------------------
def summary_min_chars(segment_chars: int) -> int:
    """Shortest acceptable summary: segment_chars / 500, capped at 80 chars."""
    return min(SUMMARY_MIN_CHARS_CAP, max(0, segment_chars) // SUMMARY_MIN_CHARS_PER_SEGMENT_CHARS)


def check_summary(text: str, segment_chars: int) -> str | None:
    """None when ``text`` is an acceptable summary, else a short reason.

    Rejects empty/whitespace answers, refusals (English, Portuguese, Spanish
    prefixes in ``REFUSAL_PREFIXES``, checked on the start of the answer) and
    answers shorter than :func:`summary_min_chars`.

    >>> check_summary("SUMMARY", 200) is None, check_summary("SUMMARY", 100_000)
    (True, 'too short: 7 chars for a 100000-char segment (minimum 80)')
    """
    stripped = (text or "").strip()
    if not stripped:
        return "empty answer"
    opening = stripped.lstrip(_LEADING_NOISE).replace("’", "'")
    if REFUSAL_RE.match(opening):
        excerpt = opening[:REFUSAL_EXCERPT_CHARS].splitlines()[0]
        return f"refusal: {excerpt!r}"
    floor = summary_min_chars(segment_chars)
    if len(stripped) < floor:
        return f"too short: {len(stripped)} chars for a {segment_chars}-char segment (minimum {floor})"
    return None


def summarize_with_gate(
    summarizer: Summarizer,
    prompt: str,
    segment_chars: int,
    *,
    retries: int = 1,
    instruction: str | None = None,
    timeout: float | None = None,
    cancel: CancelToken | None = None,
) -> GatedSummary:
    """:func:`gated_summary`, calling ``summarizer`` on the spot (blocking)."""
    return run_summaries(
        gated_summary(
            summarizer,
            prompt,
            segment_chars,
            retries=retries,
            instruction=instruction,
            timeout=timeout,
            cancel=cancel,
        )
    )


def gated_summary(
    summarizer: Summarizer,
    prompt: str,
    segment_chars: int,
    *,
    retries: int = 1,
    instruction: str | None = None,
    timeout: float | None = None,
    cancel: CancelToken | None = None,
) -> SummarizeFlow[GatedSummary]:
    """Ask ``summarizer`` and apply :func:`check_summary`; a rejected answer is asked again ``retries`` times.

    A flow: each call is yielded as a :class:`SummarizeCall` for the driver to carry out.
    A last rejection or any summarizer error raises :class:`SummarizationFailed` with
    the usage spent so far; :class:`CompactionCancelled` propagates untouched.
    """
    if retries < 0:
        raise ConfigError(f"retries must be >= 0 (extra attempts after a rejection), got {retries}")
    calls = input_tokens = output_tokens = 0
    cost = 0.0
    rejections: list[str] = []

    def failed(message: str) -> SummarizationFailed:
        return SummarizationFailed(
            message,
            calls=calls,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_usd=cost,
            rejections=tuple(rejections),
        )

    for _attempt in range(retries + 1):
        if cancel is not None:
            cancel.raise_if_cancelled()
        calls += 1
        try:
            result = yield SummarizeCall(summarizer, prompt, instruction, timeout, cancel)
        except CompactionCancelled:
            raise
        except Exception as exc:
            raise failed(str(exc) or type(exc).__name__) from exc
        input_tokens += result.input_tokens
        output_tokens += result.output_tokens
        cost += result.cost_usd
        reason = check_summary(result.text, segment_chars)
        if reason is None:
            return GatedSummary(
                text=result.text.strip(),
                calls=calls,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cost_usd=cost,
                rejections=tuple(rejections),
                model=result.model,
            )
        rejections.append(reason)
    raise failed(f"summary rejected ({'; '.join(rejections)})")
