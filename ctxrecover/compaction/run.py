"""One compaction in progress and what it reports: :class:`CompactionRun`, :class:`CompactionReport`.

A run carries what every level reads — the budget, the messages to keep whole, a
``/compact`` instruction, the cancel token, the summarizer and its back-off — and
tallies what the levels did (level reached, summarizer usage, chars archived). The
status lines of SPEC §5 are here too: each level says what it is doing through
:meth:`CompactionRun.status`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import get_args

from ctxrecover.archive import Archive, marker, put_entries, read_original
from ctxrecover.cancel import CancelToken
from ctxrecover.events import EventBus, Trigger
from ctxrecover.messages import Message
from ctxrecover.policy import Policy
from ctxrecover.sizes import total_weight
from ctxrecover.summarize import Summarizer

__all__ = [
    "LEVEL_NONE",
    "LEVEL_SUMMARY",
    "LEVEL_TRIM",
    "LEVEL_TRUNCATION",
    "SUMMARY_HEADER",
    "SUMMARY_OVERHEAD_CHARS",
    "SUMMARY_RECALL_NOTE",
    "TRIGGERS",
    "Backoff",
    "CompactionReport",
    "CompactionResult",
    "CompactionRun",
]

# -- status lines (SPEC §5), one per phase --------------------------------------------
STATUS_START = "📦 Compacting history (%d msgs, %s → target %s)"
STATUS_TRIM = "🧹 Trim: stripping reasoning/dedup (no LLM)…"
STATUS_TRIM_ENOUGH = "✓ Trim was enough (%s → %s)"
STATUS_SUMMARY = "🧠 Summarizing old messages via LLM (may take 30-90s — ESC cancels)…"
STATUS_SUMMARY_APPLIED = "✓ Summary applied (%d → %d msgs, %s → %s)"
STATUS_SUMMARY_FAILED = "⚠ Summarization failed (%s) — falling back to truncation"
STATUS_EMERGENCY = "✂ Emergency truncation — old messages dropped"
STATUS_TRUNCATED = "✓ Truncated (%d → %d msgs)"
STATUS_CANCELLED = "⚠ Compaction cancelled by user"

# -- texts placed in the history ------------------------------------------------------
SUMMARY_HEADER = "[STRUCTURED SUMMARY — covering %d earlier messages]\n\n"
SUMMARY_RECALL_NOTE = "\n\n[full transcript of the summarized segment recoverable via @recall {marker}]"
# The framing every summary message carries (header and recall note): what even an empty summary weighs.
SUMMARY_OVERHEAD_CHARS = len(SUMMARY_HEADER % 1) + len(SUMMARY_RECALL_NOTE.format(marker=marker("0" * 16)))

TRIGGERS: frozenset[str] = frozenset(get_args(Trigger))

# Levels reported in CompactionReport.level.
LEVEL_NONE, LEVEL_TRIM, LEVEL_SUMMARY, LEVEL_TRUNCATION = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What one compaction did.

    ``level`` is the highest level that ran (1 trim, 2 summary applied,
    3 truncation), or 0 when the compaction was ``skipped`` (changed nothing).
    Summarizer usage includes failed and rejected attempts. ``summary_failure``
    is the reason Level 2 fell back to truncation; ``verbatim_aged_out`` counts
    verbatim messages replaced by recall stubs.
    """

    trigger: Trigger
    budget_chars: int
    level: int = LEVEL_NONE
    messages_before: int = 0
    messages_after: int = 0
    chars_before: int = 0
    chars_after: int = 0
    summarizer_calls: int = 0
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    summarizer_cost_usd: float = 0.0
    backoff_skip: bool = False
    skipped: bool = False
    cancelled: bool = False
    summary_failure: str | None = None
    verbatim_aged_out: int = 0
    chars_archived: int = 0
    elapsed_s: float = 0.0

    @property
    def reached_budget(self) -> bool:
        """True when the resulting history fits ``budget_chars``."""
        return self.chars_after <= self.budget_chars


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """The compacted history (a new list, or a copy of the input when skipped) and its report."""

    history: list[Message]
    report: CompactionReport


@dataclass(slots=True)
class Backoff:
    """The summarizer back-off a compactor keeps across its runs (SPEC §5): compactions left that
    skip Level 2 because a summary did not bring the history under budget."""

    remaining: int = 0


class CountingArchive:
    """An :class:`Archive` view that counts the chars handed to the store.

    It reads a range entry expanded (:func:`~ctxrecover.archive.read_original`),
    so a pass that restores an archived original (the summarizer's input) gets
    the transcript, not the index.
    """

    def __init__(self, store: Archive) -> None:
        self.store = store
        self.chars = 0

    def put(self, content: str) -> str:
        key = self.store.put(content)
        self.chars += len(content)
        return key

    def put_keyed(self, entries: Sequence[tuple[str, str]]) -> None:
        put_entries(self.store, entries)
        self.chars += sum(len(content) for _, content in entries)

    def archive(self, content: str) -> str | None:
        key = self.store.archive(content)
        if key is not None:
            self.chars += len(content)
        return key

    def get(self, key: str) -> str | None:
        return read_original(self.store, key)

    def __contains__(self, key: object) -> bool:
        return key in self.store


@dataclass(slots=True)
class CompactionRun:
    """One compaction in progress: what its levels read, and the tallies they update.

    ``instruction`` is a ``/compact`` guidance (a *guided* run: Levels 1–2 run whatever
    the size); ``summarized`` is set once a summary was applied. Levels write through
    ``archive`` (which counts the chars stored) and say what they do with :meth:`status`.
    """

    trigger: Trigger
    budget: int
    keep_recent: int
    policy: Policy
    archive: CountingArchive
    events: EventBus
    backoff: Backoff
    summarizer: Summarizer | None = None
    instruction: str | None = None
    cancel: CancelToken | None = None
    messages_before: int = 0
    chars_before: int = 0
    level: int = LEVEL_NONE
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    backoff_skip: bool = False
    summarized: bool = False
    summary_failure: str | None = None
    aged_out: int = 0

    @property
    def guided(self) -> bool:
        """True for a ``/compact`` with an instruction."""
        return self.instruction is not None

    def needs(self, history: Sequence[Message]) -> bool:
        """Whether a level should act on ``history``: it is over budget, or the run is guided and no
        summary was applied yet."""
        return total_weight(history) > self.budget or (self.guided and not self.summarized)

    def status(self, phase: str, message: str) -> None:
        """One SPEC §5 status line."""
        self.events.status(phase, message)

    def account(self, usage: object) -> None:
        """Add the summarizer usage carried by a GatedSummary or SummarizationFailed."""
        self.calls += getattr(usage, "calls", 0)
        self.input_tokens += getattr(usage, "input_tokens", 0)
        self.output_tokens += getattr(usage, "output_tokens", 0)
        self.cost += getattr(usage, "cost_usd", 0.0)

    def report(
        self, result: list[Message], *, skipped: bool, cancelled: bool, elapsed: float
    ) -> CompactionReport:
        """The run's :class:`CompactionReport` for ``result``."""
        return CompactionReport(
            trigger=self.trigger,
            budget_chars=self.budget,
            level=LEVEL_NONE if skipped else self.level,
            messages_before=self.messages_before,
            messages_after=len(result),
            chars_before=self.chars_before,
            chars_after=total_weight(result),
            summarizer_calls=self.calls,
            summarizer_input_tokens=self.input_tokens,
            summarizer_output_tokens=self.output_tokens,
            summarizer_cost_usd=self.cost,
            backoff_skip=self.backoff_skip,
            skipped=skipped,
            cancelled=cancelled,
            summary_failure=self.summary_failure,
            verbatim_aged_out=self.aged_out,
            chars_archived=self.archive.chars,
            elapsed_s=elapsed,
        )
