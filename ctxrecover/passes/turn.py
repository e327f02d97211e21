"""A session's turn-boundary passes, in SPEC §3's order, at the cost of what changed.

:class:`TurnPasses` is what a :class:`~ctxrecover.session.Session` runs around
each request: microcompact, dedup of repeated reads and skill aging on the
history (:meth:`~TurnPasses.microcompact`, :meth:`~TurnPasses.dedup`,
:meth:`~TurnPasses.age_skills`); pairing repair and the tool-result
budget on the outgoing copy (:meth:`~TurnPasses.outgoing`); and the sizes every
decision reads — the history's weight and wire bytes, the request's bytes and
weights. Incremental (the default), it threads one
:class:`~ctxrecover.passes.history_index.TurnState` through the incremental
steps and keeps a :class:`~ctxrecover.passes.history_index.SizedHistory` of the
requests, so a turn costs the messages that changed (and :meth:`~TurnPasses.facts` hands what
it knows of the history to a recovery step); with
``incremental=False`` it runs the full passes over the whole history, the
reference the incremental path is tested against. Both give the same
histories, requests, sizes and reports.

The three history passes are housekeeping: a fold the archive refuses to store
(:data:`REFUSED_WRITES`: full, or not writable now) is simply not made — the history
keeps the content whole, nothing is lost — and the refusal reaches the archive's
``on_error`` (a :class:`~ctxrecover.archive.SessionArchive` counts and announces it).
Only a cut the request needs (compaction, recovery, the tool-result budget on the
outgoing copy) ends a turn when the archive has no room.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from ctxrecover.archive import Archive
from ctxrecover.errors import ArchiveFullError, ArchiveWriteError
from ctxrecover.messages import Message
from ctxrecover.passes.dedup_reads import dedup_repeated_reads, dedup_step
from ctxrecover.passes.facts import HistoryFacts, history_facts, indexed_facts, watch_facts
from ctxrecover.passes.floor import SkillAgingReport, age_skill_blocks, age_skills_step
from ctxrecover.passes.history_index import SizedHistory, TurnState
from ctxrecover.passes.microcompact import MicrocompactReport, apply_microcompact, microcompact_step
from ctxrecover.passes.pairing import pairing_step, repair_pairing
from ctxrecover.passes.tool_budget import enforce_tool_result_budget, tool_budget_step
from ctxrecover.policy import Policy
from ctxrecover.sizes import WeightTotals, total_weight
from ctxrecover.wire.formats import WireFormat
from ctxrecover.wire.size import request_size

__all__ = ["REFUSED_WRITES", "TurnPasses"]

_T = TypeVar("_T")
# Archive refusals a housekeeping pass survives by not folding (issue 25): the store has no room or
# cannot be written now. Integrity and corruption errors are not among them: they still raise.
REFUSED_WRITES: tuple[type[Exception], ...] = (ArchiveFullError, ArchiveWriteError)


class TurnPasses:
    """The turn-boundary passes of one session (``archive`` is the one it writes to).

    ``policy`` gives the microcompact, skill-aging and tool-result preview knobs;
    the tool-result limits are arguments of :meth:`outgoing` (a recovery may
    halve them for the session). Writes are counted per pass when ``archive``
    offers ``attributed(source)`` (a :class:`~ctxrecover.archive.SessionArchive`).
    """

    def __init__(
        self,
        policy: Policy,
        archive: Archive,
        wire_format: WireFormat | str,
        *,
        model: str,
        incremental: bool = True,
    ) -> None:
        self.policy = policy
        self.archive = archive
        self.wire_format = WireFormat(wire_format)
        self.model = model
        self.incremental = incremental
        self._state = self._new_state()
        self._sent = SizedHistory(wire_format, model=model)

    @contextlib.contextmanager
    def _stepping(self) -> Iterator[None]:
        """Around incremental steps: one that raises (an archive refusing a write, say) has consumed
        the state half-way, so the next step starts from a fresh state, which re-indexes the history."""
        try:
            yield
        except BaseException:
            self._state = self._new_state()
            raise

    def _new_state(self) -> TurnState:
        """A fresh state whose index keeps the facts a recovery step reads from its first message on
        (a listener made at the first recovery would have to be shown the whole history then)."""
        state = TurnState.new(self.wire_format, model=self.model)
        watch_facts(state)
        return state

    def _attributed(self, source: str) -> contextlib.AbstractContextManager[None]:
        attributed = getattr(self.archive, "attributed", None)
        return attributed(source) if attributed is not None else contextlib.nullcontext()

    def _micro_options(self) -> dict[str, Any]:
        policy = self.policy
        return {
            "truncate_turns": policy.microcompact_truncate_turns,
            "summarize_turns": policy.microcompact_summarize_turns,
            "head_chars": policy.microcompact_head_chars,
            "tail_chars": policy.microcompact_tail_chars,
            "min_content": policy.microcompact_min_content,
        }

    def _housekeeping(self, source: str, run: Callable[[], _T], unchanged: _T) -> _T:
        """``run()`` with its writes counted for ``source``; ``unchanged`` when the archive refuses one."""
        try:
            with self._attributed(source):
                return run()
        except REFUSED_WRITES:
            return unchanged

    def microcompact(self, history: list[Message]) -> tuple[list[Message], MicrocompactReport]:
        """SPEC §3.3 on the history (unchanged when the archive refuses a fold)."""

        def run() -> tuple[list[Message], MicrocompactReport]:
            if not self.incremental:
                return apply_microcompact(history, archive=self.archive, **self._micro_options())
            with self._stepping():
                folded, report, self._state = microcompact_step(
                    history, self._state, archive=self.archive, **self._micro_options()
                )
            return folded, report

        return self._housekeeping("microcompact", run, (history, MicrocompactReport()))

    def dedup(self, history: list[Message]) -> list[Message]:
        """SPEC §3.4 on the history (unchanged when the archive refuses a fold)."""

        def run() -> list[Message]:
            if not self.incremental:
                return dedup_repeated_reads(history, archive=self.archive)[0]
            with self._stepping():
                deduped, _, self._state = dedup_step(history, self._state, archive=self.archive)
            return deduped

        return self._housekeeping("dedup", run, history)

    def age_skills(self, history: list[Message]) -> tuple[list[Message], SkillAgingReport]:
        """SPEC §3.5's skill aging on the history (unchanged when the archive refuses a fold)."""
        age_turns = self.policy.skill_age_turns

        def run() -> tuple[list[Message], SkillAgingReport]:
            if not self.incremental:
                return age_skill_blocks(history, archive=self.archive, age_turns=age_turns)
            with self._stepping():
                aged, report, self._state = age_skills_step(
                    history, self._state, archive=self.archive, age_turns=age_turns
                )
            return aged, report

        return self._housekeeping("skills", run, (history, SkillAgingReport()))

    def outgoing(self, history: list[Message], *, budget_chars: int, max_chars: int) -> list[Message]:
        """The outgoing copy of ``history``: pairing repaired and tool results within their budget
        (SPEC §3.1, §3.2); ``history`` itself is never changed."""
        policy, archive = self.policy, self.archive
        limits = {
            "turn_budget_chars": budget_chars,
            "max_result_chars": max_chars,
            "preview_head": min(policy.tool_result_preview_head, max_chars // 2),
            "preview_tail": min(policy.tool_result_preview_tail, max_chars // 8),
            "turn_floor": policy.tool_result_turn_floor,
        }
        if not self.incremental:
            with self._attributed("pairing"):
                outgoing, _ = repair_pairing(history, archive=archive)
            with self._attributed("tool_budget"):
                outgoing, _ = enforce_tool_result_budget(outgoing, archive=archive, **limits)
            return outgoing
        with self._stepping():
            state = self._state
            with self._attributed("pairing"):
                outgoing, _, state = pairing_step(history, state, archive=archive)
            with self._attributed("tool_budget"):
                if outgoing is history:
                    outgoing, _, state = tool_budget_step(history, state, archive=archive, **limits)
                else:  # a repaired copy of a malformed history: budgeted in full
                    outgoing, _ = enforce_tool_result_budget(outgoing, archive=archive, **limits)
            self._state = state
        return outgoing

    def history_bytes(self, history: Sequence[Message], *, max_tokens: int | None, tools: Any) -> int:
        """Wire bytes of a request carrying ``history`` (the session's, after the passes)."""
        if not self.incremental:
            return request_size(
                history, self.wire_format, model=self.model, max_tokens=max_tokens, tools=tools
            )
        return self._state.request_size(history, max_tokens=max_tokens, tools=tools)

    def facts(self, history: list[Message]) -> HistoryFacts:
        """What a recovery step reads of ``history`` before it cuts — pairing valid, content chars, system
        messages, each range's archive parts — from the incremental state, at the cost of what changed
        (:mod:`ctxrecover.passes.facts`)."""
        if not self.incremental:
            return history_facts(history)
        return indexed_facts(self._state, history)

    def weight(self, history: Sequence[Message]) -> int:
        """``total_weight(history)`` of the session's history."""
        if not self.incremental:
            return total_weight(history)
        return self._state.weights(history).weight

    def request_bytes(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None,
        tools: Any,
        extra: Mapping[str, Any] | None,
    ) -> int:
        """Wire bytes of a request carrying ``messages`` (an outgoing copy)."""
        if not self.incremental:
            return request_size(
                messages, self.wire_format, model=self.model, max_tokens=max_tokens, tools=tools, extra=extra
            )
        return self._sent.size(messages, max_tokens=max_tokens, tools=tools, extra=extra)

    def request_weights(self, messages: Sequence[Message]) -> WeightTotals:
        """Weight, image chars and image tokens of a request's ``messages`` (read them, do not modify); images
        are priced by the rule of the session's provider and model (:mod:`ctxrecover.image_tokens`)."""
        if not self.incremental:
            return WeightTotals(messages, wire_format=self.wire_format.value, model=self.model)
        return self._sent.weights(messages)
