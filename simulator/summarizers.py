"""Deterministic mock summarizers for replays, sweeps and benchmarks.

Each one implements :class:`ctxrecover.summarize.Summarizer` (``window_tokens`` and
``summarize(prompt, *, instruction, timeout, cancel)``), records every call on
``.calls`` — with what the call did, one of :data:`CALL_OUTCOMES` — and reports usage
at ``ceil(chars / 4)`` tokens, priced from :data:`SUMMARIZER_PRICES`. Failed calls
report no usage (a failing API returns none).

=================  =====================================================================
behaviour          answer
=================  =====================================================================
``extractive``     a structured summary built from the segment (passes the quality gate)
``refusing``       ``I'm sorry, I cannot help with that.`` (rejected by the gate)
``too-short``      ``ok`` (rejected by the gate for segments of 1 500+ chars)
``slow``           extractive after ``delay_s``, waiting in slices that watch ``cancel``
``failing``        raises :class:`SummarizerError` like an HTTP 500
``overflowing``    a 256-token window: raises the provider's overflow text as
                   :class:`SummarizerError` (answers extractively if the prompt fits)
``instant``        a fixed short summary (for benchmarks)
``none``           no summarizer (:func:`make_summarizer` returns None)
=================  =====================================================================

>>> s = make_summarizer("refusing")
>>> s.summarize("hello").text
"I'm sorry, I cannot help with that."
>>> len(s.calls), s.input_tokens, s.calls[0].outcome
(1, 2, 'refused')
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from ctxrecover.archive import MARKER_RE
from ctxrecover.errors import CompactionCancelled, ConfigError, SummarizerError
from ctxrecover.summarize import CancelToken, SummaryResult

__all__ = [
    "BEHAVIOURS",
    "CALL_OUTCOMES",
    "DEFAULT_SUMMARIZER_MODEL",
    "ExtractiveSummarizer",
    "FailingSummarizer",
    "FixedSummarizer",
    "InstantSummarizer",
    "MockSummarizer",
    "ModelPrice",
    "OverflowingSummarizer",
    "RefusingSummarizer",
    "SUMMARIZER_PRICES",
    "SlowSummarizer",
    "SummarizerCall",
    "TooShortSummarizer",
    "extractive_summary",
    "make_summarizer",
]


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """USD per million tokens, input and output."""

    input: float
    output: float


# List prices (USD per MTok in/out) of cheap summarizer models, so sweeps report realistic costs.
SUMMARIZER_PRICES: Mapping[str, ModelPrice] = MappingProxyType(
    {
        "mock-gpt-4o-mini": ModelPrice(0.15, 0.60),  # OpenAI gpt-4o-mini
        "mock-claude-3-5-haiku": ModelPrice(0.80, 4.00),  # Anthropic claude-3-5-haiku
        "mock-gemini-2.0-flash": ModelPrice(0.10, 0.40),  # Google gemini-2.0-flash
        "mock-local": ModelPrice(0.0, 0.0),  # a self-hosted model
    }
)
DEFAULT_SUMMARIZER_MODEL = "mock-gpt-4o-mini"
# What one call did (SummarizerCall.outcome; a scenario's [expect] summarizer names one of these).
CALL_OUTCOMES: tuple[str, ...] = (
    "answered",  # a summary text
    "refused",  # a refusal text (the quality gate rejects it)
    "too_short",  # a text too short for its segment (the quality gate rejects it)
    "failed",  # raised SummarizerError (an HTTP 500)
    "overflowed",  # raised SummarizerError: the prompt is over the summarizer's own window
    "timed_out",  # raised SummarizerError: the call's timeout ran out
    "cancelled",  # raised CompactionCancelled
)
CHARS_PER_TOKEN = 4
DEFAULT_WINDOW_TOKENS = 128_000

# The segment follows this header in a ctxrecover.summarize.build_prompt text (SPEC §5).
SEGMENT_HEADER = "\n\nCONVERSATION SEGMENT TO EXTRACT FROM:\n\n"

# -- canned answers ------------------------------------------------------------------------
REFUSAL_TEXT = "I'm sorry, I cannot help with that."
TOO_SHORT_TEXT = "ok"
INSTANT_SUMMARY = (
    "## Current Task State\n"
    "- Done: the earlier messages were condensed by the instant benchmark summarizer.\n"
    "- Pending: continue the task from the most recent messages."
)
EMPTY_SEGMENT_SUMMARY = "## Current Task State\n- Done: the segment held nothing to extract."
FAILING_STATUS = 500
FAILING_BODY = (
    '{"error": {"message": "The server had an error while processing your request.", "type": "server_error"}}'
)
FAILING_MESSAGE = "summarizer HTTP {status}: {body}"
# OpenAI's real context_length_exceeded body, the text an overflowing summarizer request carries.
OVERFLOW_BODY = (
    "This model's maximum context length is {window} tokens. However, your messages resulted in "
    "{tokens} tokens. Please reduce the length of the messages."
)
OVERFLOW_MESSAGE = (
    "summarizer request overflowed its own window (HTTP 400, {chars} prompt chars, "
    "window {window} tokens): {body}"
)
OVERFLOW_WINDOW_TOKENS = 256  # smaller than the summary prompt alone
TIMEOUT_MESSAGE = "summarizer {model} timed out after {timeout:g}s"
DEFAULT_SLOW_DELAY_S = 2.0
SLOW_SLICE_S = 0.02

# -- extraction ----------------------------------------------------------------------------
SUMMARY_FRACTION = 0.2  # the summary takes at most this share of the segment...
SUMMARY_FLOOR_CHARS = 400  # ...but may always use this many chars
BULLET_MAX_CHARS = 160
SECTIONS: tuple[str, ...] = (
    "Files Read",
    "Files Modified",
    "Commands Executed",
    "Key Decisions",
    "Errors & Resolutions",
    "Current Task State",
)
MESSAGE_RE = re.compile(r"^\[(system|user|assistant|tool)\]: ", re.MULTILINE)
TOOL_CALLS_RE = re.compile(r"\n?\[tool_calls: ([^\]\n]*)\]\s*$")
PATH_RE = re.compile(
    r"(?<![\w/.:~-])(?:~|\.{1,2})?/?(?:[\w.-]+/)+[\w.-]+\.[A-Za-z0-9]{1,8}\b"
    r"|(?<![\w/.:-])[\w-]+\.(?:py|pyi|js|ts|tsx|go|rs|java|rb|c|h|cpp|md|json|toml|yaml|yml|cfg|ini|txt|sh|sql)\b"
)
MODIFY_RE = re.compile(
    r"\b(?:wrote|written|writ(?:e|ing) to|edit(?:ed|ing)?|modif(?:y|ied|ying)|updat(?:e|ed|ing)|"
    r"creat(?:e|ed|ing)|patch(?:ed|ing)?|sav(?:e|ed|ing)|replac(?:e|ed|ing)|fix(?:ed)? in)\b",
    re.IGNORECASE,
)
COMMAND_RE = re.compile(r"^\s*(?:\$|>>>|%)\s+(\S.*)$")
ERROR_RE = re.compile(
    r"\b(?:error|exception|traceback|failed|failure|fatal|panic|denied|not found)\b|\w(?:Error|Exception)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class SummarizerCall:
    """One recorded ``summarize`` call: what was asked, what came back or went wrong, its usage.

    ``outcome`` says what the call did, one of :data:`CALL_OUTCOMES`.
    """

    prompt: str
    instruction: str | None
    timeout: float | None
    text: str | None
    error: str | None
    input_tokens: int
    output_tokens: int
    cost_usd: float
    outcome: str


def _tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _segment_of(prompt: str) -> str:
    """The segment of a build_prompt text (the whole prompt when it has no segment header)."""
    head, header, segment = prompt.partition(SEGMENT_HEADER)
    return segment if header else head


class MockSummarizer:
    """Base of the mocks: validation, call recording, usage and cost.

    Subclasses implement ``_answer``; it may raise :class:`SummarizerError` or
    :class:`CompactionCancelled` (recorded, then re-raised). ``answered`` and
    ``error_outcome`` name what a text answer and a :class:`SummarizerError` are
    (:data:`CALL_OUTCOMES`).
    """

    behaviour: ClassVar[str] = ""
    answered: ClassVar[str] = "answered"
    error_outcome: ClassVar[str] = "failed"

    def __init__(
        self, *, model: str = DEFAULT_SUMMARIZER_MODEL, window_tokens: int = DEFAULT_WINDOW_TOKENS
    ) -> None:
        if model not in SUMMARIZER_PRICES:
            raise ConfigError(
                f"unknown mock summarizer model {model!r}; use one of {', '.join(SUMMARIZER_PRICES)}"
            )
        if not isinstance(window_tokens, int) or window_tokens <= 0:
            raise ConfigError(
                f"window_tokens must be the summarizer's window in tokens (> 0), got {window_tokens!r}"
            )
        self.model = model
        self.window_tokens = window_tokens
        self.price = SUMMARIZER_PRICES[model]
        self.calls: list[SummarizerCall] = []

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, window_tokens={self.window_tokens})"

    def summarize(
        self,
        prompt: str,
        *,
        instruction: str | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> SummaryResult:
        """Answer ``prompt`` per this mock's behaviour and record the call."""
        try:
            if cancel is not None:
                cancel.raise_if_cancelled()
            text = self._answer(prompt, timeout=timeout, cancel=cancel)
        except (SummarizerError, CompactionCancelled) as exc:
            outcome = "cancelled" if isinstance(exc, CompactionCancelled) else self.error_outcome
            self.calls.append(
                SummarizerCall(prompt, instruction, timeout, None, str(exc), 0, 0, 0.0, outcome)
            )
            raise
        input_tokens, output_tokens = _tokens(prompt), _tokens(text)
        cost = (input_tokens * self.price.input + output_tokens * self.price.output) / 1_000_000
        self.calls.append(
            SummarizerCall(
                prompt, instruction, timeout, text, None, input_tokens, output_tokens, cost, self.answered
            )
        )
        return SummaryResult(
            text=text, input_tokens=input_tokens, output_tokens=output_tokens, cost_usd=cost, model=self.model
        )

    def _answer(self, prompt: str, *, timeout: float | None, cancel: CancelToken | None) -> str:
        raise NotImplementedError

    @property
    def input_tokens(self) -> int:
        """Input tokens of every recorded call."""
        return sum(call.input_tokens for call in self.calls)

    @property
    def output_tokens(self) -> int:
        """Output tokens of every recorded call."""
        return sum(call.output_tokens for call in self.calls)

    @property
    def cost_usd(self) -> float:
        """USD spent on every recorded call."""
        return sum(call.cost_usd for call in self.calls)


# -- extractive summary ------------------------------------------------------------------------
def _split_messages(segment: str) -> list[tuple[str, str]]:
    """``(role, body)`` of each ``[role]: content`` block of a rendered segment."""
    starts = list(MESSAGE_RE.finditer(segment))
    ends = [match.start() for match in starts[1:]] + [len(segment)]
    return [
        (match.group(1), segment[match.end() : end].rstrip("\n"))
        for match, end in zip(starts, ends, strict=False)
    ]


def _bullet(text: str, markers: list[str] | None = None, *, max_chars: int) -> str:
    text = " ".join(MARKER_RE.sub("", text).split())
    if len(text) > max_chars:
        text = text[: max_chars - 1] + "…"
    return "- " + " ".join([text, *(markers or [])]).strip()


def _first_line(body: str) -> str:
    for line in body.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _fit(sections: dict[str, list[str]], budget: int) -> str:
    """Sections with bullets taken round-robin while they fit ``budget``; empty sections are left out."""
    sections = {name: list(dict.fromkeys(bullets)) for name, bullets in sections.items()}
    kept: dict[str, list[str]] = {name: [] for name in sections}
    used = 0
    for rank in range(max(map(len, sections.values()), default=0)):
        for name, bullets in sections.items():
            if rank >= len(bullets):
                continue
            cost = len(bullets[rank]) + 1 + (0 if kept[name] else len(f"## {name}\n") + 1)
            if used + cost <= budget:
                kept[name].append(bullets[rank])
                used += cost
    return "\n\n".join(f"## {name}\n" + "\n".join(bullets) for name, bullets in kept.items() if bullets)


def extractive_summary(
    segment: str, *, fraction: float = SUMMARY_FRACTION, bullet_max_chars: int = BULLET_MAX_CHARS
) -> str:
    """A structured summary of a rendered segment, without an LLM.

    Files are paths found by regex (``Files Modified`` when their line says written,
    edited, created…), commands are tool calls with the first line of their result and
    ``$ ``-prompt lines, errors are lines naming an error, decisions are the first line
    of each assistant message, the task state is each user request plus Done/Pending.
    ``<<ccr:KEY>>`` markers stay on the bullet of their message. Bullets are taken
    round-robin across sections until ``max(400, fraction × len(segment))`` chars.

    >>> print(extractive_summary("[user]: fix src/app.py\\n\\n[assistant]: Done.\\n\\n"))
    ## Files Read
    - src/app.py
    <BLANKLINE>
    ## Key Decisions
    - Done.
    <BLANKLINE>
    ## Current Task State
    - Done: Done.
    - Pending: fix src/app.py
    - Asked: fix src/app.py
    """
    sections: dict[str, list[str]] = {name: [] for name in SECTIONS}
    files_read, commands = sections["Files Read"], sections["Commands Executed"]
    decisions = sections["Key Decisions"]
    asked: list[str] = []
    last_answer = last_request = ""
    pending_calls: str | None = None
    for role, body in _split_messages(segment):
        markers = [f"<<ccr:{key}>>" for key in dict.fromkeys(MARKER_RE.findall(body))]
        calls = TOOL_CALLS_RE.search(body) if role == "assistant" else None
        text = body[: calls.start()] if calls else body
        for line in text.splitlines():
            for path in PATH_RE.findall(line):
                (sections["Files Modified"] if MODIFY_RE.search(line) else files_read).append(f"- {path}")
            if command := COMMAND_RE.match(line):
                commands.append(_bullet(command.group(1), max_chars=bullet_max_chars))
            if ERROR_RE.search(line):
                sections["Errors & Resolutions"].append(_bullet(line, max_chars=bullet_max_chars))
        first = _first_line(text)
        if role == "tool":
            outcome = f"{pending_calls or 'tool result'} → {first or '(empty result)'}"
            commands.append(_bullet(outcome, markers, max_chars=bullet_max_chars))
            pending_calls = None
            continue
        if role == "assistant":
            if first:
                decisions.append(_bullet(first, markers, max_chars=bullet_max_chars))
                last_answer = first
            elif markers:
                decisions.append(_bullet("archived original:", markers, max_chars=bullet_max_chars))
            if calls:
                pending_calls = calls.group(1).strip()
            continue
        label = "Asked" if role == "user" else "Context"
        asked.append(_bullet(f"{label}: {first or '(empty)'}", markers, max_chars=bullet_max_chars))
        if role == "user" and first:
            last_request = first
    if pending_calls:
        commands.append(_bullet(f"{pending_calls} → (no result in the segment)", max_chars=bullet_max_chars))
    state = sections["Current Task State"]
    if last_answer:
        state.append(_bullet(f"Done: {last_answer}", max_chars=bullet_max_chars))
    if last_request:
        state.append(_bullet(f"Pending: {last_request}", max_chars=bullet_max_chars))
    state.extend(asked)
    budget = max(SUMMARY_FLOOR_CHARS, int(len(segment) * fraction))
    return _fit(sections, budget) or EMPTY_SEGMENT_SUMMARY


class ExtractiveSummarizer(MockSummarizer):
    """Answers with :func:`extractive_summary` of the prompt's segment; passes the quality gate."""

    behaviour = "extractive"

    def __init__(
        self,
        *,
        fraction: float = SUMMARY_FRACTION,
        bullet_max_chars: int = BULLET_MAX_CHARS,
        model: str = DEFAULT_SUMMARIZER_MODEL,
        window_tokens: int = DEFAULT_WINDOW_TOKENS,
    ) -> None:
        super().__init__(model=model, window_tokens=window_tokens)
        if not 0 < fraction <= 1:
            raise ConfigError(f"fraction is the summary's share of the segment, in (0, 1]; got {fraction!r}")
        if bullet_max_chars < 20:
            raise ConfigError(
                f"bullet_max_chars must be >= 20 to keep a bullet readable, got {bullet_max_chars}"
            )
        self.fraction = fraction
        self.bullet_max_chars = bullet_max_chars

    def _answer(self, prompt: str, *, timeout: float | None, cancel: CancelToken | None) -> str:
        return extractive_summary(
            _segment_of(prompt), fraction=self.fraction, bullet_max_chars=self.bullet_max_chars
        )


class SlowSummarizer(ExtractiveSummarizer):
    """Answers extractively after ``delay_s``, sleeping in slices of ``slice_s``.

    Before each slice it checks ``cancel`` (→ :class:`CompactionCancelled`) and the
    call's ``timeout`` (→ :class:`SummarizerError` ``timed out``). Time is counted in
    slept slices, so an injected ``sleep`` makes it instant and deterministic.
    """

    behaviour = "slow"
    error_outcome = "timed_out"

    def __init__(
        self,
        delay_s: float = DEFAULT_SLOW_DELAY_S,
        *,
        sleep: Callable[[float], object] = time.sleep,
        slice_s: float = SLOW_SLICE_S,
        model: str = DEFAULT_SUMMARIZER_MODEL,
        window_tokens: int = DEFAULT_WINDOW_TOKENS,
    ) -> None:
        super().__init__(model=model, window_tokens=window_tokens)
        if delay_s < 0 or slice_s <= 0:
            raise ConfigError(
                f"SlowSummarizer needs delay_s >= 0 and slice_s > 0, got {delay_s!r} and {slice_s!r}"
            )
        self.delay_s = delay_s
        self.slice_s = slice_s
        self.sleep = sleep

    def _answer(self, prompt: str, *, timeout: float | None, cancel: CancelToken | None) -> str:
        waited = 0.0
        while waited < self.delay_s:
            if cancel is not None:
                cancel.raise_if_cancelled()
            if timeout is not None and waited >= timeout:
                raise SummarizerError(TIMEOUT_MESSAGE.format(model=self.model, timeout=timeout))
            step = min(self.slice_s, self.delay_s - waited)
            if timeout is not None:
                step = min(step, timeout - waited)
            self.sleep(step)
            waited += step
        if cancel is not None:
            cancel.raise_if_cancelled()
        return super()._answer(prompt, timeout=timeout, cancel=cancel)


class OverflowingSummarizer(ExtractiveSummarizer):
    """A summarizer with a tiny window: a prompt over it raises the provider's overflow text.

    The :class:`SummarizerError` reads like :class:`ctxrecover.summarize.HttpSummarizer`'s
    (``summarizer request overflowed its own window (HTTP 400, …): This model's maximum
    context length is …``); a prompt that fits is answered extractively.
    """

    behaviour = "overflowing"
    error_outcome = "overflowed"

    def __init__(
        self, *, window_tokens: int = OVERFLOW_WINDOW_TOKENS, model: str = DEFAULT_SUMMARIZER_MODEL
    ) -> None:
        super().__init__(model=model, window_tokens=window_tokens)

    def _answer(self, prompt: str, *, timeout: float | None, cancel: CancelToken | None) -> str:
        tokens = _tokens(prompt)
        if tokens > self.window_tokens:
            body = OVERFLOW_BODY.format(window=self.window_tokens, tokens=tokens)
            message = OVERFLOW_MESSAGE.format(chars=len(prompt), window=self.window_tokens, body=body)
            raise SummarizerError(message)
        return super()._answer(prompt, timeout=timeout, cancel=cancel)


class FailingSummarizer(MockSummarizer):
    """Every call raises :class:`SummarizerError` ``summarizer HTTP 500: {body}``."""

    behaviour = "failing"

    def __init__(
        self,
        *,
        status: int = FAILING_STATUS,
        body: str = FAILING_BODY,
        model: str = DEFAULT_SUMMARIZER_MODEL,
        window_tokens: int = DEFAULT_WINDOW_TOKENS,
    ) -> None:
        super().__init__(model=model, window_tokens=window_tokens)
        self.status = status
        self.body = body

    def _answer(self, prompt: str, *, timeout: float | None, cancel: CancelToken | None) -> str:
        raise SummarizerError(FAILING_MESSAGE.format(status=self.status, body=" ".join(self.body.split())))


class FixedSummarizer(MockSummarizer):
    """Always answers ``text`` (the base of the refusing, too-short and instant mocks)."""

    default_text: ClassVar[str] = ""

    def __init__(
        self,
        *,
        text: str | None = None,
        model: str = DEFAULT_SUMMARIZER_MODEL,
        window_tokens: int = DEFAULT_WINDOW_TOKENS,
    ) -> None:
        super().__init__(model=model, window_tokens=window_tokens)
        self.text = self.default_text if text is None else text

    def _answer(self, prompt: str, *, timeout: float | None, cancel: CancelToken | None) -> str:
        return self.text


class RefusingSummarizer(FixedSummarizer):
    """Answers a refusal; the quality gate rejects it."""

    behaviour = "refusing"
    answered = "refused"
    default_text = REFUSAL_TEXT


class TooShortSummarizer(FixedSummarizer):
    """Answers ``ok``; the quality gate rejects it for any segment of 1 500 chars or more."""

    behaviour = "too-short"
    answered = "too_short"
    default_text = TOO_SHORT_TEXT


class InstantSummarizer(FixedSummarizer):
    """Answers a fixed short summary at once (over 80 chars, so it always passes the gate)."""

    behaviour = "instant"
    default_text = INSTANT_SUMMARY


BEHAVIOURS: Mapping[str, type[MockSummarizer] | None] = MappingProxyType(
    {
        cls.behaviour: cls
        for cls in (
            ExtractiveSummarizer,
            RefusingSummarizer,
            TooShortSummarizer,
            SlowSummarizer,
            FailingSummarizer,
            OverflowingSummarizer,
            InstantSummarizer,
        )
    }
    | {"none": None}
)


def make_summarizer(behaviour: str, **options: object) -> MockSummarizer | None:
    """The mock summarizer a scenario names (``options`` go to its constructor); ``none`` → None.

    >>> type(make_summarizer("slow", delay_s=0.5)).__name__
    'SlowSummarizer'
    """
    if behaviour not in BEHAVIOURS:
        raise ConfigError(f"unknown summarizer behaviour {behaviour!r}; use one of {', '.join(BEHAVIOURS)}")
    cls = BEHAVIOURS[behaviour]
    if cls is None:
        if options:
            raise ConfigError(f"summarizer behaviour 'none' takes no options, got {', '.join(options)}")
        return None
    try:
        return cls(**options)  # type: ignore[arg-type]
    except TypeError as exc:
        raise ConfigError(f"bad options for summarizer behaviour {behaviour!r}: {exc}") from exc
