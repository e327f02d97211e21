"""Level-2 summarization: input budgeting, prompt, quality gate and summarizers (SPEC §5, §9).

The compactor renders the segment with :func:`render_segment` (budgeted against the
summarizer's *own* window), wraps it with :func:`build_prompt`, and calls
:func:`summarize_with_gate`, which rejects empty, refusing or too-short answers and
tries once more before giving up with a :class:`SummarizationFailed` that carries the
calls, tokens and cost already spent. Summarizers are anything with ``window_tokens``
and ``summarize(prompt, ...)``:

- :class:`HttpSummarizer` — an OpenAI-compatible ``/chat/completions`` endpoint over
  httpx (``CHATCLI_COMPACT_MODEL=provider:model``, see :meth:`HttpSummarizer.from_env`);
- :class:`ContextEngineSummarizer` — an external context engine
  (``context_compact(segment, budget_chars, instruction)``) with a built-in fallback.

>>> token = CancelToken()
>>> token.cancel()
>>> token.cancelled
True
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ctxrecover.archive import extract_keys
from ctxrecover.classify import classify
from ctxrecover.errors import CompactionCancelled, ConfigError, SummarizerError

if TYPE_CHECKING:
    import httpx

    from ctxrecover.archive import Archive
    from ctxrecover.messages import Message

__all__ = [
    "CancelToken",
    "ContextEngine",
    "ContextEngineSummarizer",
    "GatedSummary",
    "HttpSummarizer",
    "SUMMARY_PROMPT",
    "SummarizationFailed",
    "Summarizer",
    "SummaryResult",
    "build_prompt",
    "check_summary",
    "render_segment",
    "summarize_with_gate",
    "summary_input_budget",
    "summary_min_chars",
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

# -- summarizers -------------------------------------------------------------------------
DEFAULT_SUMMARIZER_TIMEOUT_S = 180.0  # 3 minutes (SPEC §9)
WORKER_POLL_S = 0.05  # how often a waiting call looks at its cancel token
ERROR_BODY_EXCERPT_CHARS = 300
OVERFLOW_KINDS = frozenset({"context_overflow", "payload_too_large"})
ENGINE_LABEL = "engine"
FALLBACK_LABEL = "fallback"

COMPACT_MODEL_ENV = "CHATCLI_COMPACT_MODEL"
COMPACT_BASE_URL_ENV = "CHATCLI_COMPACT_BASE_URL"
COMPACT_API_KEY_ENV = "CHATCLI_COMPACT_API_KEY"
COMPACT_WINDOW_ENV = "CHATCLI_COMPACT_WINDOW"
COMPACT_PRICE_IN_ENV = "CHATCLI_COMPACT_PRICE_IN"
COMPACT_PRICE_OUT_ENV = "CHATCLI_COMPACT_PRICE_OUT"
OPENAI_BASE_URL_ENV = "OPENAI_BASE_URL"
OPENAI_API_KEY_ENV = "OPENAI_API_KEY"


@dataclass(frozen=True, slots=True)
class ProviderEndpoint:
    """Where a provider serves OpenAI-compatible chat completions, and how it is reached."""

    base_url: str
    key_env: tuple[str, ...]
    window_tokens: int
    needs_key: bool = True


# OpenAI-compatible endpoints by provider; windows are the SPEC §1.3 provider fallbacks.
PROVIDER_ENDPOINTS: Mapping[str, ProviderEndpoint] = {
    "openai": ProviderEndpoint("https://api.openai.com/v1", ("OPENAI_API_KEY",), 128_000),
    "anthropic": ProviderEndpoint("https://api.anthropic.com/v1", ("ANTHROPIC_API_KEY",), 200_000),
    "google": ProviderEndpoint(
        "https://generativelanguage.googleapis.com/v1beta/openai",
        ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        1_000_000,
    ),
    "groq": ProviderEndpoint("https://api.groq.com/openai/v1", ("GROQ_API_KEY",), 128_000),
    "mistral": ProviderEndpoint("https://api.mistral.ai/v1", ("MISTRAL_API_KEY",), 128_000),
    "openrouter": ProviderEndpoint("https://openrouter.ai/api/v1", ("OPENROUTER_API_KEY",), 128_000),
    "xai": ProviderEndpoint("https://api.x.ai/v1", ("XAI_API_KEY",), 128_000),
    "deepseek": ProviderEndpoint("https://api.deepseek.com/v1", ("DEEPSEEK_API_KEY",), 128_000),
    "together": ProviderEndpoint("https://api.together.xyz/v1", ("TOGETHER_API_KEY",), 128_000),
    "moonshot": ProviderEndpoint("https://api.moonshot.ai/v1", ("MOONSHOT_API_KEY",), 262_144),
    "github": ProviderEndpoint("https://models.github.ai/inference", ("GITHUB_TOKEN",), 128_000),
    "ollama": ProviderEndpoint("http://localhost:11434/v1", (), 8192, needs_key=False),
}
PROVIDER_ALIASES: Mapping[str, str] = {"gemini": "google", "grok": "xai", "githubmodels": "github"}
UNKNOWN_PROVIDER_WINDOW = 50_000

T = TypeVar("T")


# -- cancellation ----------------------------------------------------------------------------
class CancelToken:
    """A thread-safe cancel flag with an optional deadline.

    ``cancel()`` may be called from any thread (an ESC handler, a UI); long calls
    poll ``cancelled`` or call ``raise_if_cancelled()``. A token built with
    ``deadline`` (a ``clock()`` reading) also counts as cancelled once it passes.

    >>> t = CancelToken.after(60)
    >>> t.cancelled, t.remaining() > 59
    (False, True)
    """

    __slots__ = ("_clock", "_deadline", "_event")

    def __init__(self, *, deadline: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._event = threading.Event()
        self._deadline = deadline
        self._clock = clock

    @classmethod
    def after(cls, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> CancelToken:
        """A token that cancels itself ``seconds`` from now."""
        return cls(deadline=clock() + seconds, clock=clock)

    def cancel(self) -> None:
        """Cancel every call watching this token."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """True once ``cancel()`` was called or the deadline passed."""
        return self._event.is_set() or self._deadline_passed()

    def remaining(self) -> float | None:
        """Seconds until the deadline (0 when past), or None without one."""
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - self._clock())

    def raise_if_cancelled(self) -> None:
        """Raise :class:`CompactionCancelled` when cancelled."""
        if self._event.is_set():
            raise CompactionCancelled("compaction cancelled by the user")
        if self._deadline_passed():
            raise CompactionCancelled("compaction cancelled: its deadline passed")

    def _deadline_passed(self) -> bool:
        return self._deadline is not None and self._clock() >= self._deadline


def _run_bounded(call: Callable[[], T], *, timeout: float | None, cancel: CancelToken | None, what: str) -> T:
    """Run ``call`` in a daemon worker; give up on timeout (TimeoutError) or cancel.

    An abandoned worker keeps running in the background until its own I/O timeout;
    the caller never waits for it.
    """
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: B036 - handed to the waiting thread
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name=f"ctxrecover-{what}", daemon=True).start()
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        wait = WORKER_POLL_S
        if deadline is not None:
            wait = min(wait, max(0.0, deadline - time.monotonic()))
        if done.wait(wait):
            break
        if cancel is not None:
            cancel.raise_if_cancelled()
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"{what} timed out after {timeout:g}s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


# -- results ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SummaryResult:
    """One summarizer answer with its usage.

    ``model`` names what answered (a model id, or ``"engine"``/``"fallback"`` for a
    :class:`ContextEngineSummarizer`); ``fallback_reason`` says why an engine was bypassed.
    """

    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    model: str | None = None
    fallback_reason: str | None = None


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


@runtime_checkable
class Summarizer(Protocol):
    """Turns a summary prompt into a :class:`SummaryResult`.

    ``window_tokens`` is the summarizer's own context window (the input budget is
    sized against it). ``instruction`` is the user's ``/compact`` guidance: already
    part of ``prompt`` (see :func:`build_prompt`), passed separately for engines that
    take it as an argument. Raises :class:`SummarizerError` on any failure, including
    its own request overflowing, and :class:`CompactionCancelled` on cancel.
    """

    window_tokens: int

    def summarize(
        self,
        prompt: str,
        *,
        instruction: str | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> SummaryResult: ...


# -- input budgeting ----------------------------------------------------------------------
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


def _archived_original(content: str, archive: Archive | None) -> str | None:
    """The original a stub was folded from: the first marker whose entry is longer than the stub."""
    if archive is None:
        return None
    for key in extract_keys(content):
        original = archive.get(key)
        if original is not None and len(original) > len(content):
            return original
    return None


def _head_and_tail(content: str, share: int) -> str:
    if len(content) <= share:
        return content
    kept = max(0, share - len(TRUNCATION_SEPARATOR))
    head = round(kept * HEAD_SHARE)
    tail = kept - head
    return content[:head] + TRUNCATION_SEPARATOR + (content[-tail:] if tail else "")


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
    budget unless the 600-char floor makes that impossible. Input is not mutated.
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
    originals = [_archived_original(msg.content, archive) for msg in segment]
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


def _split_prompt(prompt: str) -> tuple[str, str]:
    """``(prompt head, segment)`` of a :func:`build_prompt` text; no header → all segment."""
    head, header, segment = prompt.partition(SEGMENT_HEADER)
    if not header:
        return "", prompt
    return head + header, segment


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
    """Ask ``summarizer`` and apply :func:`check_summary`; a rejected answer is retried ``retries`` times.

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
            result = summarizer.summarize(prompt, instruction=instruction, timeout=timeout, cancel=cancel)
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


# -- OpenAI-compatible HTTP summarizer -------------------------------------------------------
def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ERROR_BODY_EXCERPT_CHARS else text[:ERROR_BODY_EXCERPT_CHARS] + "…"


def _is_overflow(status: int, body: str) -> bool:
    """True when :func:`ctxrecover.classify.classify` reads a rejection as the request being too big."""
    return str(classify(status=status, body=body).kind) in OVERFLOW_KINDS


def _message_text(content: object) -> str:
    """Text of a chat message ``content``: a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _usage_count(usage: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


class HttpSummarizer:
    """A summarizer on any OpenAI-compatible ``POST {base_url}/chat/completions``.

    Sends the prompt as one user message and reads ``choices[0].message.content``
    and ``usage`` (``prompt_tokens``/``completion_tokens``; estimated at 4 chars per
    token when the server reports none). Cost = tokens × ``price_per_mtok_in/out``
    / 1e6. Timeouts, transport errors, HTTP errors and malformed answers raise
    :class:`SummarizerError`; a rejection that ``ctxrecover.classify`` reads as an
    overflow says the summarizer's request overflowed its own window. ``transport``
    is an httpx transport (``httpx.MockTransport`` in tests).

    >>> s = HttpSummarizer(base_url="http://127.0.0.1:1/v1", model="m", window_tokens=8192)
    >>> s.window_tokens
    8192
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        window_tokens: int = PROVIDER_ENDPOINTS["openai"].window_tokens,
        timeout: float = DEFAULT_SUMMARIZER_TIMEOUT_S,
        price_per_mtok_in: float = 0.0,
        price_per_mtok_out: float = 0.0,
        max_output_tokens: int | None = None,
        transport: httpx.BaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"HttpSummarizer base_url must be an http(s) URL, got {base_url!r}")
        if not model:
            raise ConfigError("HttpSummarizer needs a model name, e.g. model='gpt-4o-mini'")
        if not isinstance(window_tokens, int) or window_tokens <= 0:
            raise ConfigError(f"HttpSummarizer window_tokens must be > 0 tokens, got {window_tokens!r}")
        if timeout <= 0:
            raise ConfigError(f"HttpSummarizer timeout must be > 0 seconds, got {timeout!r}")
        if price_per_mtok_in < 0 or price_per_mtok_out < 0:
            raise ConfigError("HttpSummarizer prices are USD per million tokens and must be >= 0")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.window_tokens = window_tokens
        self.timeout = timeout
        self.price_per_mtok_in = price_per_mtok_in
        self.price_per_mtok_out = price_per_mtok_out
        self.max_output_tokens = max_output_tokens
        self.transport = transport
        self.headers = dict(headers or {})

    def __repr__(self) -> str:
        return f"HttpSummarizer(base_url={self.base_url!r}, model={self.model!r})"

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] = os.environ,
        *,
        window_tokens: int | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> HttpSummarizer | None:
        """The dedicated summarizer configured by the environment, or None when not configured.

        Variables:

        - ``CHATCLI_COMPACT_MODEL=provider:model`` (required; unset or blank → None);
        - base URL: ``CHATCLI_COMPACT_BASE_URL``, else ``OPENAI_BASE_URL`` for ``openai`` and
          unknown providers, else the provider's default (``PROVIDER_ENDPOINTS``);
        - key: ``CHATCLI_COMPACT_API_KEY``, else the provider's variable (``OPENAI_API_KEY``,
          ``GROQ_API_KEY``, …; ``OPENAI_API_KEY`` for unknown providers); ollama needs none;
        - window: ``window_tokens``, else ``CHATCLI_COMPACT_WINDOW``, else the provider fallback;
        - prices: ``CHATCLI_COMPACT_PRICE_IN`` / ``CHATCLI_COMPACT_PRICE_OUT`` (USD per million tokens).

        Raises :class:`ConfigError` naming the variable when a value is unusable.
        """
        spec = env.get(COMPACT_MODEL_ENV, "").strip()
        if not spec:
            return None
        provider, _, model = spec.partition(":")
        provider, model = provider.strip().lower(), model.strip()
        if not provider or not model:
            raise ConfigError(
                f"{COMPACT_MODEL_ENV} must be provider:model, e.g. openai:gpt-4o-mini; got {spec!r}"
            )
        provider = PROVIDER_ALIASES.get(provider, provider)
        endpoint = PROVIDER_ENDPOINTS.get(provider)
        base_url = env.get(COMPACT_BASE_URL_ENV, "").strip()
        if not base_url and (endpoint is None or provider == "openai"):
            base_url = env.get(OPENAI_BASE_URL_ENV, "").strip()
        if not base_url and endpoint is not None:
            base_url = endpoint.base_url
        if not base_url:
            raise ConfigError(
                f"{COMPACT_MODEL_ENV}={spec!r} names provider {provider!r} with no known endpoint: "
                f"set {COMPACT_BASE_URL_ENV} to its OpenAI-compatible base URL (e.g. http://host:8000/v1)"
            )
        key_names = (COMPACT_API_KEY_ENV, *(endpoint.key_env if endpoint else (OPENAI_API_KEY_ENV,)))
        api_key = next((env[name].strip() for name in key_names if env.get(name, "").strip()), None)
        needs_key = endpoint.needs_key if endpoint else False
        if api_key is None and needs_key and not env.get(COMPACT_BASE_URL_ENV, "").strip():
            raise ConfigError(f"{COMPACT_MODEL_ENV}={spec!r} needs an API key: set {' or '.join(key_names)}")
        if window_tokens is None:
            fallback_window = endpoint.window_tokens if endpoint else UNKNOWN_PROVIDER_WINDOW
            window_tokens = _env_int(env, COMPACT_WINDOW_ENV, fallback_window)
        return cls(
            base_url=base_url,
            model=model,
            api_key=api_key,
            window_tokens=window_tokens,
            price_per_mtok_in=_env_price(env, COMPACT_PRICE_IN_ENV),
            price_per_mtok_out=_env_price(env, COMPACT_PRICE_OUT_ENV),
            transport=transport,
        )

    def summarize(
        self,
        prompt: str,
        *,
        instruction: str | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> SummaryResult:
        """One chat-completions call; ``instruction`` is already in ``prompt`` and not re-sent."""
        limit = self.timeout if timeout is None else min(timeout, self.timeout)
        if cancel is not None:
            cancel.raise_if_cancelled()
            remaining = cancel.remaining()
            if remaining is not None:
                limit = min(limit, remaining)
        try:
            return _run_bounded(
                lambda: self._request(prompt, limit), timeout=limit, cancel=cancel, what="summarizer"
            )
        except (CompactionCancelled, SummarizerError):
            raise
        except TimeoutError as exc:
            raise SummarizerError(f"summarizer {self.model} timed out after {limit:g}s") from exc
        except Exception as exc:
            raise SummarizerError(f"summarizer {self.model} failed: {type(exc).__name__}: {exc}") from exc

    def _request(self, prompt: str, timeout: float) -> SummaryResult:
        import httpx

        body: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": prompt}]}
        if self.max_output_tokens is not None:
            body["max_tokens"] = self.max_output_tokens
        headers = {"Content-Type": "application/json", **self.headers}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            with httpx.Client(transport=self.transport, timeout=timeout) as client:
                response = client.post(f"{self.base_url}/chat/completions", json=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise SummarizerError(f"summarizer {self.model} timed out after {timeout:g}s") from exc
        except httpx.HTTPError as exc:
            raise SummarizerError(
                f"summarizer request to {self.base_url} failed: {type(exc).__name__}: {exc}"
            ) from exc
        if response.status_code >= 400:
            text = response.text
            if _is_overflow(response.status_code, text):
                raise SummarizerError(
                    f"summarizer request overflowed its own window (HTTP {response.status_code}, "
                    f"{len(prompt)} prompt chars, window {self.window_tokens} tokens): {_excerpt(text)}"
                )
            raise SummarizerError(f"summarizer HTTP {response.status_code}: {_excerpt(text)}")
        return self._parse(response.text, prompt)

    def _parse(self, raw: str, prompt: str) -> SummaryResult:
        try:
            data = json.loads(raw)
            message = data["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise SummarizerError(
                f"summarizer answer is not a chat completion (no choices[0].message): {_excerpt(raw)}"
            ) from exc
        if not isinstance(message, dict):
            raise SummarizerError(f"summarizer answer has a malformed message: {_excerpt(raw)}")
        text = _message_text(message.get("content")) or _message_text(message.get("refusal"))
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        input_tokens = _usage_count(usage, "prompt_tokens", "input_tokens")
        output_tokens = _usage_count(usage, "completion_tokens", "output_tokens")
        if input_tokens is None:
            input_tokens = math.ceil(len(prompt) / DEFAULT_CHARS_PER_TOKEN)
        if output_tokens is None:
            output_tokens = math.ceil(len(text) / DEFAULT_CHARS_PER_TOKEN)
        cost = (input_tokens * self.price_per_mtok_in + output_tokens * self.price_per_mtok_out) / 1_000_000
        model = data.get("model") if isinstance(data.get("model"), str) else self.model
        return SummaryResult(
            text=text, input_tokens=input_tokens, output_tokens=output_tokens, cost_usd=cost, model=model
        )


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {raw!r}")
    return value


def _env_price(env: Mapping[str, str], name: str) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name} must be a price in USD per million tokens (>= 0), got {raw!r}")
    return value


# -- external context engine (SPEC §9) ------------------------------------------------------
ContextEngine = Callable[[str, int, str | None], str]
"""``context_compact(segment, budget_chars, instruction) -> summary`` (an MCP tool, a function)."""


class ContextEngineSummarizer:
    """An external context engine first, the built-in ``fallback`` summarizer when it fails.

    ``engine`` is a callable ``context_compact(segment, budget_chars, instruction) -> str``
    or the http(s) URL of an endpoint that takes ``POST {"segment", "budget_chars",
    "instruction"}`` and answers ``{"summary": "..."}`` or plain text. Its answer replaces
    the segment. An error, a timeout (``timeout``, 3 minutes by default; the callable runs
    in a worker thread, so a hung engine never hangs compaction) or an empty answer falls
    back to ``fallback`` for that compaction. ``SummaryResult.model`` is ``"engine"`` or
    ``"fallback"``; ``fallback_reason`` says what went wrong with the engine.

    >>> s = ContextEngineSummarizer(lambda seg, budget, instr: "notes", fallback=None)
    >>> s.summarize_segment("[user]: hi\\n\\n", 20_000).model
    'engine'
    """

    def __init__(
        self,
        engine: ContextEngine | str,
        *,
        fallback: Summarizer | None,
        timeout: float = DEFAULT_SUMMARIZER_TIMEOUT_S,
        window_tokens: int | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if isinstance(engine, str):
            if not engine.startswith(("http://", "https://")):
                raise ConfigError(
                    f"a context engine must be a callable or an http(s) URL, got {engine!r} "
                    "(for CHATCLI_CONTEXT_ENGINE=mcp:<server>, pass the MCP tool wrapped as a callable)"
                )
        elif not callable(engine):
            raise ConfigError(
                f"a context engine must be a callable or an http(s) URL, got {type(engine).__name__}"
            )
        if timeout <= 0:
            raise ConfigError(f"context engine timeout must be > 0 seconds, got {timeout!r}")
        if window_tokens is None:
            window_tokens = fallback.window_tokens if fallback is not None else UNKNOWN_PROVIDER_WINDOW
        self.engine = engine
        self.fallback = fallback
        self.timeout = timeout
        self.window_tokens = window_tokens
        self.transport = transport

    def __repr__(self) -> str:
        return f"ContextEngineSummarizer(engine={self.engine!r}, fallback={self.fallback!r})"

    def summarize(
        self,
        prompt: str,
        *,
        instruction: str | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> SummaryResult:
        """Summarize a :func:`build_prompt` text: the engine gets its segment and input budget."""
        head, segment = _split_prompt(prompt)
        budget = summary_input_budget(self.window_tokens, len(head))
        return self._summarize(
            segment, budget, prompt, instruction=instruction, timeout=timeout, cancel=cancel
        )

    def summarize_segment(
        self,
        segment_text: str,
        budget_chars: int,
        *,
        instruction: str | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> SummaryResult:
        """Summarize a rendered segment; ``budget_chars`` is passed to the engine as is."""
        return self._summarize(
            segment_text, budget_chars, None, instruction=instruction, timeout=timeout, cancel=cancel
        )

    def _summarize(
        self,
        segment: str,
        budget_chars: int,
        prompt: str | None,
        *,
        instruction: str | None,
        timeout: float | None,
        cancel: CancelToken | None,
    ) -> SummaryResult:
        if cancel is not None:
            cancel.raise_if_cancelled()
        limit = self.timeout if timeout is None else min(timeout, self.timeout)
        try:
            answer = _run_bounded(
                lambda: self._ask_engine(segment, budget_chars, instruction, limit),
                timeout=limit,
                cancel=cancel,
                what="context-engine",
            )
        except CompactionCancelled:
            raise
        except TimeoutError:
            reason = f"context engine timed out after {limit:g}s"
        except Exception as exc:
            reason = f"context engine failed: {type(exc).__name__}: {_excerpt(str(exc))}"
        else:
            if isinstance(answer, str) and answer.strip():
                return SummaryResult(text=answer, model=ENGINE_LABEL)
            if isinstance(answer, str) or answer is None:
                reason = "context engine returned an empty answer"
            else:
                reason = f"context engine returned a {type(answer).__name__}, not text"
        if self.fallback is None:
            raise SummarizerError(f"{reason}, and no built-in summarizer is configured")
        if prompt is None:
            prompt = build_prompt(segment, instruction)
        try:
            result = self.fallback.summarize(prompt, instruction=instruction, timeout=timeout, cancel=cancel)
        except SummarizerError as exc:
            raise SummarizerError(f"{reason}; the built-in summarizer failed too: {exc}") from exc
        return replace(result, model=FALLBACK_LABEL, fallback_reason=reason)

    def _ask_engine(self, segment: str, budget_chars: int, instruction: str | None, timeout: float) -> str:
        if callable(self.engine):
            return self.engine(segment, budget_chars, instruction)
        return self._post(self.engine, segment, budget_chars, instruction, timeout)

    def _post(
        self, url: str, segment: str, budget_chars: int, instruction: str | None, timeout: float
    ) -> str:
        import httpx

        payload = {"segment": segment, "budget_chars": budget_chars, "instruction": instruction}
        with httpx.Client(transport=self.transport, timeout=timeout) as client:
            response = client.post(url, json=payload)
        if response.status_code >= 400:
            raise SummarizerError(f"context engine HTTP {response.status_code}: {_excerpt(response.text)}")
        text = response.text
        if "json" not in response.headers.get("content-type", ""):
            return text
        data = json.loads(text)
        if isinstance(data, str):
            return data
        if isinstance(data, dict) and isinstance(data.get("summary"), str):
            return data["summary"]
        raise SummarizerError(f'context engine answer has no "summary" string: {_excerpt(text)}')
