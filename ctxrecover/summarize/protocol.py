"""What a summarizer is: the :class:`Summarizer` protocol and the :class:`SummaryResult` it returns.

Anything with ``window_tokens`` and ``summarize(prompt, ...)`` is a summarizer
(the protocol is runtime-checkable). ``window_tokens`` is the summarizer's *own*
context window — it sizes the summarizer's input — not the agent model's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ctxrecover.cancel import CancelToken

__all__ = ["DEFAULT_SUMMARIZER_TIMEOUT_S", "Summarizer", "SummaryResult", "excerpt"]

DEFAULT_SUMMARIZER_TIMEOUT_S = 180.0  # 3 minutes (SPEC §9)
ERROR_BODY_EXCERPT_CHARS = 300


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


def excerpt(text: str) -> str:
    """``text`` on one line, cut at 300 chars (for error messages that quote a body)."""
    text = " ".join(text.split())
    return text if len(text) <= ERROR_BODY_EXCERPT_CHARS else text[:ERROR_BODY_EXCERPT_CHARS] + "…"
