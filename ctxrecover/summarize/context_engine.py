"""An external context engine as a summarizer, with the built-in summarizer as its fallback (SPEC §9).

The engine is a callable ``context_compact(segment, budget_chars, instruction)``
or an http(s) URL. It runs in a worker thread under a timeout, so a hung engine
never hangs compaction; an error, a timeout or an empty answer falls back to the
built-in summarizer for that compaction, and ``SummaryResult.model`` says which
one answered.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from ctxrecover.cancel import CancelToken, run_bounded
from ctxrecover.errors import CompactionCancelled, ConfigError, SummarizerError
from ctxrecover.summarize.http import UNKNOWN_PROVIDER_WINDOW
from ctxrecover.summarize.prompt import build_prompt, split_prompt, summary_input_budget
from ctxrecover.summarize.protocol import DEFAULT_SUMMARIZER_TIMEOUT_S, Summarizer, SummaryResult, excerpt

if TYPE_CHECKING:
    import httpx

__all__ = ["ContextEngine", "ContextEngineSummarizer"]

ENGINE_LABEL = "engine"
FALLBACK_LABEL = "fallback"

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
        head, segment = split_prompt(prompt)
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
            answer = run_bounded(
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
            reason = f"context engine failed: {type(exc).__name__}: {excerpt(str(exc))}"
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
            raise SummarizerError(f"context engine HTTP {response.status_code}: {excerpt(response.text)}")
        text = response.text
        if "json" not in response.headers.get("content-type", ""):
            return text
        data = json.loads(text)
        if isinstance(data, str):
            return data
        summary = data.get("summary") if isinstance(data, dict) else None
        if isinstance(summary, str):
            return summary
        raise SummarizerError(f'context engine answer has no "summary" string: {excerpt(text)}')
