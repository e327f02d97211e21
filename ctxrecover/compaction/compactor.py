"""Planned compaction for one session (SPEC §5): :class:`HistoryCompactor`.

The compactor holds what a session's compactions share — the levels it runs
(:mod:`ctxrecover.compaction.levels`: trim → structured summary → emergency
truncation → shrink by default), the summarizer back-off, the undo stack, the
memory-flush bookkeeping and the counters — and does the bookkeeping around each
run: status lines, ``PreCompact``/``PostCompact`` hooks, undo snapshot, memory
flush, counters and the report.

Nothing is lost: whatever leaves the history is archived first and reachable
through ``<<ccr:KEY>>`` markers. The input list and its messages are never
mutated. A cancelled summary raises :class:`~ctxrecover.errors.CompactionCancelled`
and changes nothing; it never turns into a blind truncation.

:meth:`HistoryCompactor.compact_flow` is the compaction as a sans-IO flow (it
yields each summarizer call for its driver); :meth:`HistoryCompactor.compact`
runs it, calling the summarizer itself. One compactor per session; not thread-safe.

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
from collections.abc import Callable, Generator, Sequence
from typing import Any

from ctxrecover.archive import Archive
from ctxrecover.compaction.levels import DEFAULT_LEVELS, CompactionLevel, run_level
from ctxrecover.compaction.run import (
    LEVEL_TRUNCATION,
    STATUS_CANCELLED,
    STATUS_START,
    TRIGGERS,
    Backoff,
    CompactionReport,
    CompactionResult,
    CompactionRun,
    CountingArchive,
)
from ctxrecover.errors import CompactionCancelled, ConfigError
from ctxrecover.events import EventBus, PostCompact, PreCompact, SessionStats, Trigger
from ctxrecover.messages import Message
from ctxrecover.policy import Policy
from ctxrecover.sizes import format_payload_size, total_weight
from ctxrecover.summarize import CancelToken, SummarizeCall, Summarizer, run_summaries

__all__ = ["MANUAL_KEEP_RECENT", "HistoryCompactor"]

#: Messages a manual ``/compact`` keeps after its summary (pass as ``keep_recent``).
MANUAL_KEEP_RECENT = 4

# (pushed, snapshot evicted by the push): what popping a snapshot must restore.
_UndoToken = tuple[bool, list[Message] | None]


def _unchanged(result: Sequence[Message], source: Sequence[Message]) -> bool:
    return len(result) == len(source) and all(a is b for a, b in zip(result, source, strict=True))


class HistoryCompactor:
    """Planned compaction for one session (SPEC §5): ``levels`` with the session's bookkeeping.

    ``levels`` is the strategy (:data:`~ctxrecover.compaction.levels.DEFAULT_LEVELS`:
    trim → summary → emergency truncation); ``summarizer=None`` skips Level 2.
    ``events`` receives the status lines and the ``PreCompact``/``PostCompact``
    hooks; ``stats`` (a fresh :class:`SessionStats` by default) receives the
    counters. ``memory_sink`` gets every non-system message once, before the first
    compaction that could rewrite it. ``clock`` times the report.
    """

    def __init__(
        self,
        policy: Policy,
        archive: Archive,
        *,
        summarizer: Summarizer | None = None,
        levels: CompactionLevel = DEFAULT_LEVELS,
        events: EventBus | None = None,
        stats: SessionStats | None = None,
        memory_sink: Callable[[list[Message]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not callable(levels):
            raise ConfigError(
                f"HistoryCompactor(levels=...) needs a compaction level such as Trim() + Truncation(), "
                f"got {type(levels).__name__}"
            )
        self.policy = policy
        self.archive = archive
        self.summarizer = summarizer
        self.levels = levels
        self.events = events if events is not None else EventBus()
        self.stats = stats if stats is not None else SessionStats()
        self.memory_sink = memory_sink
        self.clock = clock
        self.last_report: CompactionReport | None = None
        self._undo: deque[list[Message]] = deque(maxlen=policy.undo_depth)
        self._backoff = Backoff()
        # Messages already given to memory_sink, by identity; holding them keeps ids unique.
        self._flushed: dict[int, Message] = {}
        # The snapshot pushed by prepare_rewrite, until record_rewrite/discard_snapshot settles it.
        self._pending: _UndoToken | None = None

    # -- public ---------------------------------------------------------------------
    @property
    def backoff_remaining(self) -> int:
        """Compactions that will still skip the summary after one failed to reach the budget."""
        return self._backoff.remaining

    @property
    def undo_levels(self) -> int:
        """Snapshots :meth:`undo` can restore (at most ``policy.undo_depth``)."""
        return len(self._undo)

    def undo(self) -> list[Message] | None:
        """Pop and return the history as it was before the newest applied compaction, or None."""
        return self._undo.pop() if self._undo else None

    def checkpoint(self) -> tuple[deque[list[Message]], int, dict[int, Message]]:
        """What :meth:`rollback` restores: the undo stack, the back-off and the memory-flush record."""
        return deque(self._undo, maxlen=self._undo.maxlen), self._backoff.remaining, dict(self._flushed)

    def rollback(self, state: tuple[deque[list[Message]], int, dict[int, Message]]) -> None:
        """Return to a :meth:`checkpoint` (the turn that compacted was interrupted)."""
        undo, self._backoff.remaining, flushed = state
        self._undo = deque(undo, maxlen=undo.maxlen)
        self._flushed = dict(flushed)
        self._pending = None

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
        or during the summary; :class:`ConfigError` for bad arguments. The summarizer
        is called on the spot; :meth:`compact_flow` is the same compaction as a flow.
        """
        return run_summaries(
            self.compact_flow(
                history,
                budget_chars=budget_chars,
                keep_recent=keep_recent,
                trigger=trigger,
                cancel=cancel,
                instruction=instruction,
            )
        )

    def compact_flow(
        self,
        history: Sequence[Message],
        *,
        budget_chars: int,
        keep_recent: int,
        trigger: Trigger = "auto",
        cancel: CancelToken | None = None,
        instruction: str | None = None,
    ) -> Generator[SummarizeCall, Any, CompactionResult]:
        """:meth:`compact` as a sans-IO flow: each summarizer call is yielded for the driver to make."""
        instruction = self._validate(budget_chars, keep_recent, trigger, instruction)
        started = self.clock()
        source = list(history)
        run = CompactionRun(
            trigger=trigger,
            budget=budget_chars,
            keep_recent=keep_recent,
            policy=self.policy,
            archive=CountingArchive(self.archive),
            events=self.events,
            backoff=self._backoff,
            summarizer=self.summarizer,
            instruction=instruction,
            cancel=cancel,
            messages_before=len(source),
            chars_before=total_weight(source),
        )
        self._status(
            "start",
            STATUS_START
            % (len(source), format_payload_size(run.chars_before), format_payload_size(budget_chars)),
        )
        undo_token = self._prepare(source)
        self.events.emit(PreCompact(trigger))
        try:
            result = yield from run_level(self.levels, source, run)
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
