"""How an error text words what went wrong: phrase tables first, then the wording's structure.

Providers and servers word the same fault a hundred ways; most share a shape —
a *subject* (what is too big: tokens, prompt, input, context…) and an *excess*
(how: exceeds, too long, must be <=, ``N tokens > M``) in one clause. Each reader
here takes the evidence text (lowercase, markup already reduced) and returns the
phrase or shape that matched, or None; the patterns are data in :mod:`.tables`.

>>> overflow_wording("prompt token count of 93854 exceeds the limit of 90000")
'prompt + exceeds'
>>> output_limit_wording("max_tokens: 200000 > 64000, which is the maximum allowed number of output tokens")
'max_tokens: 200000 >'
>>> stated_output_limit("max_tokens is too large: 9000. this model supports at most 4096 completion tokens")
4096
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ctxrecover.classify.tables import (
    BILLING_PHRASES,
    CONTEXT_LIMIT_PATTERNS,
    CONTEXT_OVERFLOW_PHRASES,
    HEADER_FAULT_PHRASES,
    HEDGE_PHRASES,
    INPUT_BUDGET_PATTERNS,
    OUTPUT_BUDGET_PATTERNS,
    OUTPUT_LIMIT_SHAPES,
    OUTPUT_LIMIT_VALUES,
    OUTPUT_SUM_FORM,
    OUTPUT_TRUNCATED_PHRASES,
    OVERFLOW_EXCESS,
    OVERFLOW_SUBJECT,
    OVERFLOW_SUBJECT_413,
    PARAMETER_ERROR_SHAPES,
    PAYLOAD_PHRASES,
    PAYLOAD_REASON_PHRASES,
    PAYLOAD_SUBJECT,
    RETRY_CUE_PHRASES,
    TIMEOUT_PHRASES,
)

__all__ = [
    "Budget",
    "billing_wording",
    "budget",
    "context_window",
    "find",
    "find_word",
    "header_wording",
    "output_limit_wording",
    "output_truncated_wording",
    "overflow_wording",
    "parameter_error",
    "payload_wording",
    "stated_output_limit",
]

_CLAUSE_BREAK = re.compile(r"[;!?\n]|(?<!\d)\.|\.(?!\d)")
_SUBJECT = re.compile(OVERFLOW_SUBJECT)
_TOKEN_SUBJECT = re.compile(OVERFLOW_SUBJECT_413)
_EXCESS = re.compile(OVERFLOW_EXCESS)
_PAYLOAD_SUBJECT = re.compile(PAYLOAD_SUBJECT)
_HEADER_SHAPE = re.compile(
    r"(?<![\w-])(?:request )?(?:headers?|cookies?)(?: fields?| size| section| line)?\s+"
    r"(?:(?:is|are|was|were)\s+)?(?:too (?:large|long|big)"
    r"|exceed\w*\s+(?:the\s+)?(?:server\s+|size\s+|maximum\s+)?(?:limit|size|maximum|max))"
)
_TIMEOUTS = re.compile("|".join(re.escape(p) for p in TIMEOUT_PHRASES))
_OUTPUT_SHAPES = tuple(re.compile(p) for p in OUTPUT_LIMIT_SHAPES)
_OUTPUT_SUM = re.compile(OUTPUT_SUM_FORM)
_OUTPUT_VALUES = tuple((re.compile(p), how) for p, how in OUTPUT_LIMIT_VALUES)
_PARAMETER = tuple(re.compile(p) for p in PARAMETER_ERROR_SHAPES)


@dataclass(frozen=True, slots=True)
class Budget:
    """The token budget a text states: the model's ``window``, the ``input``, the ``output`` reserved."""

    window: int
    input: int
    output: int | None = None

    @property
    def output_never_fits(self) -> bool:
        """True when the output budget alone fills the window: no compaction can ever make room for it."""
        return self.output is not None and self.output >= self.window and self.input < self.window


def _first_int(patterns: tuple[re.Pattern[str], ...], text: str) -> int | None:
    return next((int(m.group(1)) for p in patterns if (m := p.search(text))), None)


def context_window(text: str) -> int | None:
    """The window a text states (the smallest, if several), in tokens."""
    found = [int(m.group(1)) for p in CONTEXT_LIMIT_PATTERNS for m in p.finditer(text)]
    found = [n for n in found if n > 0]
    return min(found) if found else None


def stated_input_tokens(text: str) -> int | None:
    """The input tokens an overflow text says the refused request held (the provider's own count)."""
    return _first_int(INPUT_BUDGET_PATTERNS, text)


def budget(text: str) -> Budget | None:
    """The window and the input tokens a text states (and the output budget, if stated), else None."""
    window, used = context_window(text), _first_int(INPUT_BUDGET_PATTERNS, text)
    if window is None or used is None:
        return None
    return Budget(window, used, _first_int(OUTPUT_BUDGET_PATTERNS, text))


def find(text: str, phrases: tuple[str, ...]) -> str | None:
    """The first phrase of ``phrases`` contained in ``text``."""
    return next((p for p in phrases if p in text), None)


def find_word(text: str, words: tuple[str, ...]) -> str | None:
    """The first of ``words`` standing as a whole word in ``text``."""
    return next((w for w in words if re.search(rf"\b{re.escape(w)}\b", text)), None)


def _clauses(text: str) -> list[str]:
    return [c for c in _CLAUSE_BREAK.split(text) if c.strip()]


def _shape(text: str, subject: re.Pattern[str], excluded: re.Pattern[str] | None = None) -> str | None:
    """``"subject + excess"`` for the first clause holding both (never a timeout, nor ``excluded``)."""
    for clause in _clauses(text):
        found = subject.search(clause)
        excess = _EXCESS.search(clause) if found else None
        if found and excess and not _TIMEOUTS.search(clause) and not (excluded and excluded.search(clause)):
            return f"{found.group(0).strip()} + {excess.group(0).strip()}"
    return None


def parameter_error(text: str) -> str | None:
    """A parameter error naming a size (a tool name too long, a scalar over its range): never a size fault."""
    match = next((m for p in _PARAMETER if (m := p.search(text))), None)
    return match.group(0) if match else None


def billing_wording(text: str) -> str | None:
    """An account's credits, spend limit or plan quota — unless it asks to come back in seconds."""
    hit = find(text, BILLING_PHRASES)
    return hit if hit and not find(text, RETRY_CUE_PHRASES) else None


def output_truncated_wording(text: str) -> str | None:
    """A response reported as cut at its output cap."""
    return find(text, OUTPUT_TRUNCATED_PHRASES)


def output_limit_wording(text: str) -> str | None:
    """An output parameter (``max_tokens`` & co.) over the model's limit; "input + max_tokens" is not one."""
    if _OUTPUT_SUM.search(text):
        return None
    match = next((m for p in _OUTPUT_SHAPES if (m := p.search(text))), None)
    return match.group(0) if match else None


def stated_output_limit(text: str) -> int | None:
    """The output cap an output-limit text states, in tokens, if it states one."""
    for pattern, how in _OUTPUT_VALUES:
        match = pattern.search(text)
        if not match:
            continue
        value = int(match.group(1))
        if how == "difference":
            value -= int(match.group(2))
        elif how == "exclusive":
            value -= 1
        if value > 0:
            return value
    return None


def payload_wording(text: str) -> str | None:
    """A body-size cap: a payload phrase, or a size subject and an excess (no token subject) in one clause.

    The 413 reason phrases (``Payload Too Large``) only restate a status: they are
    left to the status rule, which lets a 413 naming the prompt be an overflow.
    """
    hit = find(text, PAYLOAD_PHRASES)
    if hit:
        return hit
    for phrase in PAYLOAD_REASON_PHRASES:
        text = text.replace(phrase, " ")
    return _shape(text, _PAYLOAD_SUBJECT, excluded=_TOKEN_SUBJECT)


def header_wording(text: str) -> str | None:
    """A header-size fault (431 and its relatives): a phrase, or a header subject with an excess."""
    match = _HEADER_SHAPE.search(text)
    return find(text, HEADER_FAULT_PHRASES) or (match.group(0) if match else None)


def overflow_wording(text: str, subject: re.Pattern[str] = _SUBJECT) -> str | None:
    """A context overflow: a SPEC §2.1 phrase, ``max_tokens`` + ``exceed``, or a subject + excess clause.

    Parameter errors, timeouts (``context deadline exceeded``) and texts that only
    list possible causes never count.
    """
    if parameter_error(text) or find(text, HEDGE_PHRASES):
        return None
    hit = find(text, CONTEXT_OVERFLOW_PHRASES)
    if hit:
        return hit
    if "max_tokens" in text and "exceed" in text:
        return "max_tokens + exceed"
    return _shape(text, subject)
