"""Planned compaction: trim → structured summary → emergency truncation (SPEC §5).

:class:`HistoryCompactor` holds what a session's compactions share — the
summarizer back-off, the undo stack, the memory-flush bookkeeping and the
counters — and rewrites a history in up to three levels:

1. **Trim** (:func:`~ctxrecover.passes.trim.trim_history`, no LLM); done when
   under budget.
2. **Summary**: the messages between the system floor and the last
   ``keep_recent`` (cut snapped to a tool-block boundary) become one
   ``user`` summary whose recall marker addresses the archived segment
   (one range entry, recalled as its full transcript);
   verbatim messages are re-attached after it. By default earlier summaries
   stay as they are and only what came after them is summarized
   (``policy.summary_scope``, :mod:`ctxrecover.summarize.span`). Skipped without
   a summarizer, during back-off, for a segment under
   ``policy.summary_min_messages``, and when even an empty summary could not
   bring the history under budget (the recent messages alone are too large:
   truncation would drop the summary again, so no call is made).
3. **Emergency truncation** (:func:`~ctxrecover.passes.truncate.emergency_truncate`),
   then :func:`~ctxrecover.passes.shrink.shrink_to_budget` if still over.

Verbatim messages over ``policy.verbatim_budget_fraction`` of the budget age
out (oldest first) into recall stubs before Levels 2–3, so compaction always
converges. Nothing is lost: whatever leaves the history is archived first and
reachable through ``<<ccr:KEY>>`` markers. The input list and its messages are
never mutated. A cancelled summary raises
:class:`~ctxrecover.errors.CompactionCancelled` and changes nothing; it never
turns into a blind truncation.

One compactor per session; not thread-safe.

>>> from ctxrecover.archive import MemoryArchive
>>> from ctxrecover.policy import DEFAULT_POLICY
>>> compactor = HistoryCompactor(DEFAULT_POLICY, MemoryArchive())
>>> history = [Message.user("hi"), Message.assistant("hello")]
>>> compactor.compact(history, budget_chars=1000, keep_recent=8).report.skipped
True
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import get_args

from ctxrecover.archive import Archive, archive_range, marker, put_entries, read_original
from ctxrecover.errors import CompactionCancelled, ConfigError, SummarizerError
from ctxrecover.events import EventBus, PostCompact, PreCompact, SessionStats, Trigger
from ctxrecover.messages import Message
from ctxrecover.passes.shrink import shrink_to_budget
from ctxrecover.passes.trim import trim_history
from ctxrecover.passes.truncate import emergency_truncate, leading_system_count
from ctxrecover.policy import Policy
from ctxrecover.sizes import format_payload_size, total_weight, weight
from ctxrecover.summarize import CancelToken, Summarizer, build_prompt, render_segment, summarize_with_gate
from ctxrecover.summarize.span import assemble, covered, recent_start, split_span, summary_span

__all__ = [
    "CompactionReport",
    "CompactionResult",
    "CompactionRun",
    "HistoryCompactor",
    "MANUAL_KEEP_RECENT",
    "SUMMARY_HEADER",
    "SUMMARY_RECALL_NOTE",
    "VERBATIM_AGED_OUT_STUB",
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
VERBATIM_AGED_OUT_STUB = (
    "[verbatim {role} message ({chars} chars) aged out of the window — restore it with @recall {marker}]"
)

#: Messages a manual ``/compact`` keeps after its summary (pass as ``keep_recent``).
MANUAL_KEEP_RECENT = 4
TRIGGERS: frozenset[str] = frozenset(get_args(Trigger))

# (pushed, snapshot evicted by the push): what popping a snapshot must restore.
_UndoToken = tuple[bool, list[Message] | None]

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


class _CountingArchive:
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


class CompactionRun:
    """Mutable tallies of one :meth:`HistoryCompactor.compact` call (budget, level reached,
    summarizer usage); :meth:`HistoryCompactor.levels` reads and updates it."""

    def __init__(self, trigger: Trigger, budget: int, source: list[Message], archive: Archive) -> None:
        self.trigger = trigger
        self.budget = budget
        self.messages_before = len(source)
        self.chars_before = total_weight(source)
        self.archive = _CountingArchive(archive)
        self.level = LEVEL_NONE
        self.calls = self.input_tokens = self.output_tokens = 0
        self.cost = 0.0
        self.backoff_skip = False
        self.summary_failure: str | None = None
        self.aged_out = 0

    def account(self, usage: object) -> None:
        """Add the summarizer usage carried by a GatedSummary or SummarizationFailed."""
        self.calls += getattr(usage, "calls", 0)
        self.input_tokens += getattr(usage, "input_tokens", 0)
        self.output_tokens += getattr(usage, "output_tokens", 0)
        self.cost += getattr(usage, "cost_usd", 0.0)

    def report(
        self, result: list[Message], *, skipped: bool, cancelled: bool, elapsed: float
    ) -> CompactionReport:
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


def _unchanged(result: Sequence[Message], source: Sequence[Message]) -> bool:
    return len(result) == len(source) and all(a is b for a, b in zip(result, source, strict=True))


def _truncation_keep(history: Sequence[Message], keep_recent: int) -> int:
    """``keep_recent``, or fewer so that the truncated history starts with a user message.

    When Level 3 would drop nothing, its notice is not inserted; a history whose first
    non-system message is not a user message then loses its leading messages up to the
    first user message instead (archived, with the notice).
    """
    floor = leading_system_count(history)
    start = recent_start(history, floor, keep_recent)
    if any(m.role != "system" and not m.preserve_verbatim for m in history[floor:start]):
        return keep_recent
    first = next((m for m in history[floor:] if m.role != "system"), None)
    if first is None or first.role == "user":
        return keep_recent
    first_user = next((i for i in range(floor, len(history)) if history[i].role == "user"), None)
    if first_user is None:
        return keep_recent
    return sum(1 for m in history[first_user:] if m.role != "system")


class HistoryCompactor:
    """Planned compaction for one session (SPEC §5): trim → summary → emergency truncation.

    ``summarizer=None`` skips Level 2. ``events`` receives the status lines and
    the ``PreCompact``/``PostCompact`` hooks; ``stats`` (a fresh
    :class:`SessionStats` by default) receives the counters. ``memory_sink``
    gets every non-system message once, before the first compaction that could
    rewrite it. ``clock`` times the report.
    """

    def __init__(
        self,
        policy: Policy,
        archive: Archive,
        *,
        summarizer: Summarizer | None = None,
        events: EventBus | None = None,
        stats: SessionStats | None = None,
        memory_sink: Callable[[list[Message]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy
        self.archive = archive
        self.summarizer = summarizer
        self.events = events if events is not None else EventBus()
        self.stats = stats if stats is not None else SessionStats()
        self.memory_sink = memory_sink
        self.clock = clock
        self.last_report: CompactionReport | None = None
        self._undo: deque[list[Message]] = deque(maxlen=policy.undo_depth)
        self._backoff_remaining = 0
        # Messages already given to memory_sink, by identity; holding them keeps ids unique.
        self._flushed: dict[int, Message] = {}
        # The snapshot pushed by prepare_rewrite, until record_rewrite/discard_snapshot settles it.
        self._pending: _UndoToken | None = None

    # -- public ---------------------------------------------------------------------
    @property
    def backoff_remaining(self) -> int:
        """Compactions that will still skip the summary after one failed to reach the budget."""
        return self._backoff_remaining

    @property
    def undo_levels(self) -> int:
        """Snapshots :meth:`undo` can restore (at most ``policy.undo_depth``)."""
        return len(self._undo)

    def undo(self) -> list[Message] | None:
        """Pop and return the history as it was before the newest applied compaction, or None."""
        return self._undo.pop() if self._undo else None

    def prepare_rewrite(self, history: Sequence[Message]) -> None:
        """Before a rewrite done outside :meth:`compact` (recovery, SPEC §6 step 3).

        Flushes the not-yet-flushed messages to the memory sink and pushes an undo
        snapshot; settle it with :meth:`record_rewrite` or :meth:`discard_snapshot`.
        """
        self._pending = self._prepare(list(history))

    def record_rewrite(self, history: Sequence[Message]) -> None:
        """That rewrite changed the history: keep its snapshot; the provider's prompt cache rebuilds."""
        self._pending = None
        self.stats.cache_rebuilds_expected += 1
        self._remember_flushed(list(history))

    def discard_snapshot(self) -> None:
        """That rewrite changed nothing: pop its snapshot, so undo never restores an identical history."""
        if self._pending is not None:
            self._pop_undo(self._pending)
            self._pending = None

    def compact(
        self,
        history: Sequence[Message],
        *,
        budget_chars: int,
        keep_recent: int,
        trigger: Trigger = "auto",
        cancel: CancelToken | None = None,
        instruction: str | None = None,
    ) -> CompactionResult:
        """Compact ``history`` to ``budget_chars`` (weights), keeping the last ``keep_recent`` messages.

        A history within budget is ``skipped``, unless a manual ``instruction`` asks
        for a guided summary (Level 2 is then attempted whatever the size, back-off
        included). Raises :class:`CompactionCancelled` when ``cancel`` fires before
        or during the summary; :class:`ConfigError` for bad arguments.
        """
        instruction = self._validate(budget_chars, keep_recent, trigger, instruction)
        started = self.clock()
        source = list(history)
        run = CompactionRun(trigger, budget_chars, source, self.archive)
        self._status(
            "start",
            STATUS_START
            % (len(source), format_payload_size(run.chars_before), format_payload_size(budget_chars)),
        )
        undo_token = self._prepare(source)
        self.events.emit(PreCompact(trigger))
        try:
            result = self.levels(source, run, keep_recent, cancel, instruction)
        except CompactionCancelled:
            self._status("cancelled", STATUS_CANCELLED)
            self._finish(run, source, undo_token, started, skipped=True, cancelled=True)
            raise
        except BaseException:
            self._pop_undo(undo_token)
            self.events.emit(PostCompact(trigger, "skipped"))
            raise
        skipped = _unchanged(result, source)
        if skipped:
            result = source
        report = self._finish(run, result, undo_token, started, skipped=skipped, cancelled=False)
        return CompactionResult(history=result, report=report)

    # -- levels ---------------------------------------------------------------------
    def levels(
        self,
        history: list[Message],
        run: CompactionRun,
        keep_recent: int,
        cancel: CancelToken | None,
        instruction: str | None,
    ) -> list[Message]:
        """The compaction strategy: trim → summary → emergency truncation → shrink (SPEC §5).

        The extension point for other strategies (see ``simulator.research.baselines``): a
        subclass overrides it and keeps :meth:`compact`'s bookkeeping — status
        events, hooks, undo, memory flush, counters. Set ``run.level`` to the
        level reached and archive through ``run.archive``.
        """
        if run.chars_before <= run.budget and instruction is None:
            return history
        self._status("trim", STATUS_TRIM)
        run.level = LEVEL_TRIM
        current, _ = trim_history(history, archive=run.archive)
        chars = total_weight(current)
        if chars <= run.budget and instruction is None:
            self._status(
                "trim_enough",
                STATUS_TRIM_ENOUGH % (format_payload_size(run.chars_before), format_payload_size(chars)),
            )
            return current
        current = self._age_verbatim(current, run)
        summarized = self._summarize(current, run, keep_recent, cancel, instruction)
        if summarized is not None:
            run.level = LEVEL_SUMMARY
            if total_weight(summarized) <= run.budget:
                return summarized
            self._backoff_remaining = self.policy.summarizer_backoff_compactions
            current = summarized
        return self._truncate(current, run, keep_recent)

    def _age_verbatim(self, history: list[Message], run: CompactionRun) -> list[Message]:
        """Replace the oldest verbatim messages by recall stubs until they fit their share of the budget."""
        cap = int(run.budget * self.policy.verbatim_budget_fraction)
        indices = [i for i, m in enumerate(history) if m.preserve_verbatim and m.role != "system"]
        verbatim_chars = sum(weight(history[i]) for i in indices)
        if verbatim_chars <= cap:
            return history
        result = list(history)
        for i in indices:
            if verbatim_chars <= cap:
                break
            msg = history[i]
            stub = VERBATIM_AGED_OUT_STUB.format(
                role=msg.role, chars=len(msg.content), marker=marker(run.archive.put(msg.content))
            )
            result[i] = msg.replace(content=stub, preserve_verbatim=False)
            verbatim_chars -= weight(msg)
            run.aged_out += 1
        return result

    def _summarize(
        self,
        history: list[Message],
        run: CompactionRun,
        keep_recent: int,
        cancel: CancelToken | None,
        instruction: str | None,
    ) -> list[Message] | None:
        """Level 2: the summarized history, or None when skipped or failed.

        The span follows ``policy.summary_scope`` (a guided ``/compact`` covers the whole
        segment). A ``target`` summary that comes out larger than expected and leaves the
        history over budget is followed by a second one over the rest of the segment.
        """
        if self.summarizer is None:
            return None
        if self._backoff_remaining > 0 and instruction is None:
            self._backoff_remaining -= 1
            run.backoff_skip = True
            return None
        policy = self.policy
        scope = "segment" if instruction is not None else policy.summary_scope
        span = summary_span(
            history,
            keep_recent=keep_recent,
            scope=scope,
            min_messages=policy.summary_min_messages,
            budget_chars=None if instruction is not None else run.budget,
            target_chars=int(run.budget * policy.summary_target_ratio),
            summaries_cap_chars=int(run.budget * policy.summaries_budget_fraction),
            overhead_chars=SUMMARY_OVERHEAD_CHARS,
        )
        if span is None:
            return None
        result = self._summarize_span(self.summarizer, history, span, run, cancel, instruction)
        if result is None or scope != "target" or total_weight(result) <= run.budget:
            return result
        rest = summary_span(
            result,
            keep_recent=keep_recent,
            scope="incremental",
            min_messages=policy.summary_min_messages,
            budget_chars=run.budget,
            summaries_cap_chars=total_weight(result),  # keep every summary: only the rest is new
            overhead_chars=SUMMARY_OVERHEAD_CHARS,
        )
        if rest is None:
            return result
        return self._summarize_span(self.summarizer, result, rest, run, cancel, None) or result

    def _summarize_span(
        self,
        summarizer: Summarizer,
        history: list[Message],
        span: tuple[int, int],
        run: CompactionRun,
        cancel: CancelToken | None,
        instruction: str | None,
    ) -> list[Message] | None:
        """``history`` with ``history[start:end]`` replaced by its summary, or None when it failed."""
        start, end = span
        _, summarized, _ = split_span(history[start:end])
        if cancel is not None:
            cancel.raise_if_cancelled()
        self._status("summary", STATUS_SUMMARY)
        prompt_head = build_prompt("", instruction)
        segment_text = render_segment(
            summarized,
            archive=run.archive,
            window_tokens=summarizer.window_tokens,
            prompt_chars=len(prompt_head),
        )
        try:
            gated = summarize_with_gate(
                summarizer,
                prompt_head + segment_text,
                total_weight(summarized),
                retries=self.policy.summarizer_retries,
                instruction=instruction,
                timeout=self.policy.summarizer_timeout_s,
                cancel=cancel,
            )
        except SummarizerError as exc:
            run.account(exc)
            run.summary_failure = " ".join(str(exc).split()) or type(exc).__name__
            self._status("summary_failed", STATUS_SUMMARY_FAILED % run.summary_failure)
            return None
        run.account(gated)
        if cancel is not None:
            cancel.raise_if_cancelled()
        key = archive_range(run.archive, summarized)
        count = covered(summarized)
        summary = Message.user(
            SUMMARY_HEADER % count + gated.text + SUMMARY_RECALL_NOTE.format(marker=marker(key)),
            is_summary=True,
            summary_of=count,
        )
        result = assemble(history, start, end, summary)
        self._status(
            "summary_applied",
            STATUS_SUMMARY_APPLIED
            % (
                run.messages_before,
                len(result),
                format_payload_size(run.chars_before),
                format_payload_size(total_weight(result)),
            ),
        )
        return result

    def _truncate(self, history: list[Message], run: CompactionRun, keep_recent: int) -> list[Message]:
        """Level 3: emergency truncation, then content shrinking while still over budget."""
        self._status("emergency", STATUS_EMERGENCY)
        run.level = LEVEL_TRUNCATION
        current, _ = emergency_truncate(history, _truncation_keep(history, keep_recent), archive=run.archive)
        if total_weight(current) > run.budget:
            current, _ = shrink_to_budget(
                current, run.budget, archive=run.archive, min_chars=self.policy.shrink_min_chars
            )
        self._status("truncated", STATUS_TRUNCATED % (run.messages_before, len(current)))
        return current

    # -- bookkeeping ----------------------------------------------------------------
    def _validate(
        self, budget_chars: int, keep_recent: int, trigger: str, instruction: str | None
    ) -> str | None:
        if not isinstance(budget_chars, int) or budget_chars < 0:
            raise ConfigError(f"compact() needs budget_chars >= 0 (a char budget), got {budget_chars!r}")
        if not isinstance(keep_recent, int) or keep_recent < 0:
            raise ConfigError(f"compact() needs keep_recent >= 0 (messages kept whole), got {keep_recent!r}")
        if trigger not in TRIGGERS:
            raise ConfigError(f"compact() trigger must be one of {sorted(TRIGGERS)}, got {trigger!r}")
        if instruction is None or not instruction.strip():
            return None
        if trigger != "manual":
            raise ConfigError("an instruction is /compact guidance: pass it with trigger='manual'")
        if self.summarizer is None:
            raise ConfigError(
                "a guided /compact needs a summarizer: configure CHATCLI_COMPACT_MODEL or pass "
                "HistoryCompactor(summarizer=...)"
            )
        return instruction

    def _status(self, phase: str, message: str) -> None:
        self.events.status(phase, message)

    def _flush_memory(self, history: list[Message]) -> None:
        if self.memory_sink is None:
            return
        fresh = [m for m in history if m.role != "system" and id(m) not in self._flushed]
        if fresh:
            self.memory_sink(fresh)
            self._flushed.update((id(m), m) for m in fresh)

    def _remember_flushed(self, result: list[Message]) -> None:
        """After a rewrite: its products count as flushed; forget messages no history can bring back."""
        if self.memory_sink is None:
            return
        live = {id(m): m for snapshot in (*self._undo, result) for m in snapshot if m.role != "system"}
        self._flushed = live

    def _prepare(self, source: list[Message]) -> _UndoToken:
        """Memory flush, then an undo snapshot of ``source``."""
        self._flush_memory(source)
        return self._push_undo(source)

    def _push_undo(self, snapshot: list[Message]) -> _UndoToken:
        """Push ``snapshot``; the token lets :meth:`_pop_undo` restore a snapshot evicted by it."""
        if self._undo.maxlen == 0:
            return False, None
        evicted = self._undo[0] if len(self._undo) == self._undo.maxlen else None
        self._undo.append(list(snapshot))
        return True, evicted

    def _pop_undo(self, token: _UndoToken) -> None:
        pushed, evicted = token
        if not pushed:
            return
        self._undo.pop()
        if evicted is not None:
            self._undo.appendleft(evicted)

    def _finish(
        self,
        run: CompactionRun,
        result: list[Message],
        undo_token: _UndoToken,
        started: float,
        *,
        skipped: bool,
        cancelled: bool,
    ) -> CompactionReport:
        stats = self.stats
        if skipped:
            self._pop_undo(undo_token)
            stats.skipped_compactions += 1
        else:
            stats.compactions += 1
            stats.cache_rebuilds_expected += 1
            if run.level == LEVEL_TRUNCATION:
                stats.level3_compactions += 1
            self._remember_flushed(result)
        stats.summarizer_calls += run.calls
        stats.summarizer_input_tokens += run.input_tokens
        stats.summarizer_output_tokens += run.output_tokens
        stats.summarizer_cost_usd += run.cost
        stats.count_archived("planned", run.archive.chars)
        report = run.report(result, skipped=skipped, cancelled=cancelled, elapsed=self.clock() - started)
        self.last_report = report
        self.events.emit(PostCompact(run.trigger, "skipped" if skipped else "applied"))
        return report
