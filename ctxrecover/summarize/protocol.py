"""What a summarizer is: the :class:`Summarizer` protocol, the :class:`SummaryResult` it returns, and
the :class:`SummarizeCall` a sans-IO flow hands its driver.

Anything with ``window_tokens`` and ``summarize(prompt, ...)`` is a summarizer
(the protocol is runtime-checkable). ``window_tokens`` is the summarizer's *own*
context window — it sizes the summarizer's input — not the agent model's.

Compaction never calls a summarizer itself: it *yields* a :class:`SummarizeCall`
and is sent the :class:`SummaryResult` back (or has the summarizer's exception
thrown in), so the same compaction runs under a blocking driver
(:func:`run_summaries`, ``Session``) and under an event loop (``AsyncSession``,
which awaits ``asummarize`` when a summarizer has one, else runs ``summarize`` in
a worker thread).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from ctxrecover.cancel import CancelToken

__all__ = [
    "DEFAULT_SUMMARIZER_TIMEOUT_S",
    "SummarizeCall",
    "SummarizeFlow",
    "Summarizer",
    "SummaryResult",
    "excerpt",
    "run_summaries",
]

_T = TypeVar("_T")

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


@dataclass(frozen=True, slots=True)
class SummarizeCall:
    """A flow's request to its driver: ``summarizer.summarize(prompt, ...)``, answered with the
    :class:`SummaryResult` (or with what the summarizer raised, thrown into the flow)."""

    summarizer: Summarizer
    prompt: str
    instruction: str | None = None
    timeout: float | None = None
    cancel: CancelToken | None = None

    def __call__(self) -> SummaryResult:
        """Carry the call out, blocking (what a synchronous driver does)."""
        return self.summarizer.summarize(
            self.prompt, instruction=self.instruction, timeout=self.timeout, cancel=self.cancel
        )


#: A computation that may ask for summaries on its way to a ``_T``: ``result = yield call``.
SummarizeFlow = Generator[SummarizeCall, Any, _T]


def run_summaries(flow: Generator[SummarizeCall, Any, _T]) -> _T:
    """Drive ``flow`` to its result, carrying out each :class:`SummarizeCall` on the spot.

    What the summarizer raises is thrown into the flow at the ``yield`` that asked.
    """
    reply: Any = None
    error: Exception | None = None
    while True:
        try:
            call = flow.send(reply) if error is None else flow.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        reply, error = None, None
        try:
            reply = call()
        except Exception as exc:  # the flow decides what a summarizer failure means
            error = exc


def excerpt(text: str) -> str:
    """``text`` on one line, cut at 300 chars (for error messages that quote a body)."""
    text = " ".join(text.split())
    return text if len(text) <= ERROR_BODY_EXCERPT_CHARS else text[:ERROR_BODY_EXCERPT_CHARS] + "…"
