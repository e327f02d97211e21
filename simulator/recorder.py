"""The replay's recorder: one :class:`~simulator.research.metrics.AttemptRecord` per request attempt.

Conventions (see :data:`simulator.research.metrics.OUTCOMES`):

- notices go to the attempt that caused them: those before a turn's first send
  (pre-flight, planned compaction) to that send, those a rejection triggers
  (failure notice, learned cap, floor warning) to the rejected attempt; the
  ``✖`` text of a floor fail-fast — carried by the exception, not an event — is
  added to the ``fail_fast_floor`` record;
- the planned-compaction step (``compaction_level``: trim, summary, truncation) and the recovery
  level (``recovery_level``: the ladder's rung) are kept apart (:mod:`simulator.research.levels`);
  they, the summarizer and the archive deltas belong to the attempt they preceded;
- a rejected attempt is announced as a :class:`Rejection` the moment it is refused, so a log shows
  it before the notices it causes; its :class:`AttemptRecord` follows once the turn retries
  (``rejected:<kind>``) or gives up (``failed``, ``fail_fast_floor``);
- ``chars_lost`` is probed before every attempt that follows a compaction, and
  at the end of the replay (the final value lands on the last record), by an
  incremental :class:`~simulator.research.ledger.LossLedger` that sees every
  message fed to or produced by the session and every archive write;
- ``identical_retry`` is true when the body repeats one already rejected on this turn, compared
  with recall keys normalised (:func:`ctxrecover.recovery.body_key`): a resend that differs
  only by fresh ``<<ccr:…>>`` keys is the same request;
- a block experiment (a request the session sends to tell size, content and policy apart, SPEC §12;
  ``ChatRequest.purpose == "experiment"``) is an attempt of its own: ``experiment:passed``, or
  ``experiment:blocked`` — a rejected request of its episode, announced like any refusal, ``failed``
  when the turn gives up right after it;
- every refused attempt's failure signature (``kind:status:page fingerprint``, the gateway model's key:
  :func:`ctxrecover.recovery.failure_signature`) is kept by ``(turn, attempt)`` in
  :attr:`Recorder.signatures`, so the oracle of rejected requests tells one block page from another,
  and beside it, in :attr:`Recorder.fresh_parts`, how many of the request's parts the last accepted
  request did not carry as they are (new messages, and new forms of old ones: a summary, a preview) —
  the candidates a content rule's culprit is among (SPEC §12's first tier);
- a content block the replay answers by setting the refused message aside
  (:meth:`Recorder.content_block`) leaves the rejection pending as ``rejected:<kind>``, and the
  compaction a misreading of it did (undone by the session) is not counted as a recovery.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxrecover.archive import MemoryArchive
from ctxrecover.classify import classify
from ctxrecover.errors import ContentBlockedError, PayloadFloorError, RecoveryError
from ctxrecover.events import Event, Notice, PostCompact, PreCompact, SessionStats, StatusEvent
from ctxrecover.messages import Message
from ctxrecover.passes.history_index import SizedHistory
from ctxrecover.passes.withhold import part_keys, parts_of
from ctxrecover.recovery import CONTENT_WITHHELD_CODE, body_key, failure_signature, response_text
from ctxrecover.session import Session
from ctxrecover.sizes import total_weight
from ctxrecover.transport import ChatRequest, ChatResponse, HttpxSender, SendFailed
from simulator.providers.mock import MockProvider
from simulator.proxy.faults import BodyCap, HeaderCap, RateLimit429, ResetAfter
from simulator.proxy.scenario import Scenario
from simulator.research.ledger import Losses, LossLedger
from simulator.research.levels import STATUS_STEPS
from simulator.research.metrics import EXPERIMENT_BLOCKED, EXPERIMENT_PASSED, AttemptRecord

__all__ = [
    "ContentBlock",
    "CountingArchive",
    "Recorder",
    "Rejection",
    "ReplayEvent",
    "ReplaySender",
    "proxy_cap",
]


RECOVERY = "recovery"
APPLIED = "applied"


@dataclass(frozen=True, slots=True)
class Rejection:
    """An attempt refused, announced when it is refused: ``record`` reads ``rejected:<kind>`` with the
    notices so far. Its final :class:`AttemptRecord` comes later (the turn may still give up)."""

    record: AttemptRecord


@dataclass(frozen=True, slots=True)
class ReplayEvent:
    """A library event, a rejection or a finished attempt, tagged with its 0-based turn and 1-based
    attempt."""

    turn: int
    attempt: int
    item: Event | Rejection | AttemptRecord


@dataclass(frozen=True, slots=True)
class ContentBlock:
    """A content/policy block the replay met (0-based ``turn``): the message it set aside, and the
    session's learned payload cap before the turn's first refusal of the same kind (a misreading of
    the block as a size limit starts there) and right after the block."""

    turn: int
    message_index: int
    cap_before: int | None
    cap_after: int | None


def proxy_cap(scenario: Scenario) -> int | None:
    """The smallest body size at which one of the scenario's faults fires, or None when uncapped."""
    caps: list[int] = []
    for fault in scenario.faults:
        if isinstance(fault, BodyCap):
            caps.append(fault.limit)
        elif isinstance(fault, ResetAfter):
            caps.append(max(fault.n_bytes, fault.min_bytes))
        elif not isinstance(fault, HeaderCap | RateLimit429) and fault.min_bytes > 0:
            caps.append(fault.min_bytes)
    return min(caps) if caps else None


class CountingArchive(MemoryArchive):
    """A memory archive that counts the chars of new entries and reports every write.

    ``on_write`` (when set) is called with the key of each write — each ``put``
    and each member of a ``put_keyed``, also when the content was already
    stored — so a :class:`~simulator.research.ledger.LossLedger` can count
    archived occurrences.
    """

    def __init__(self, on_write: Callable[[str], object] | None = None) -> None:
        super().__init__()
        self.chars = 0
        self.on_write = on_write

    def put(self, content: str) -> str:
        entries = len(self)
        key = super().put(content)  # content is hashed once (megabytes, for a dropped range)
        if len(self) > entries:
            self.chars += len(content)
        if self.on_write is not None:
            self.on_write(key)
        return key

    def put_keyed(self, entries: Sequence[tuple[str, str]]) -> None:
        fresh = {key: content for key, content in entries if key not in self}
        super().put_keyed(entries)
        self.chars += sum(map(len, fresh.values()))
        if self.on_write is not None:
            for key, _content in entries:
                self.on_write(key)


class ReplaySender(HttpxSender):
    """An HttpxSender that reports every attempt (and the exact body it sent) to the recorder."""

    def __init__(self, recorder: Recorder, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorder = recorder

    def render_chunks(self, request: ChatRequest) -> list[bytes]:
        chunks = super().render_chunks(request)
        self.recorder.body_chunks = chunks
        return chunks

    def send(self, request: ChatRequest) -> ChatResponse:
        self.recorder.before_send(request)
        try:
            response = super().send(request)
        except SendFailed as exc:
            self.recorder.after_failure(exc)
            raise
        self.recorder.after_success(response)
        return response


@dataclass(slots=True)
class Pending:
    """A rejected attempt whose outcome (retried or terminal) is not known yet."""

    fields: dict[str, Any]
    outcome: str  # what it reads as once another attempt follows
    notices: list[str] = field(default_factory=list)


def fresh_part_count(request: Sequence[Message], accepted: Sequence[Message]) -> int:
    """The parts of ``request`` (:func:`ctxrecover.passes.withhold.parts_of`) that ``accepted`` did not
    carry as they are now, compared by content key: new messages, and new forms of old ones."""
    carried = {key for part in parts_of(accepted, range(len(accepted))) for key in part_keys(accepted, part)}
    return sum(
        not carried.issuperset(part_keys(request, part)) for part in parts_of(request, range(len(request)))
    )


class Recorder:
    """Turns session events and sender calls into AttemptRecords (one replay, one recorder)."""

    def __init__(
        self,
        identity: dict[str, Any],
        archive: CountingArchive,
        provider: MockProvider,
        *,
        cap: int | None,
        on_event: Callable[[ReplayEvent], Any] | None,
    ) -> None:
        self.identity = identity
        self.archive = archive
        self.provider = provider
        self.cap = cap
        self.on_event = on_event
        self.session: Session | None = None
        self.sized: SizedHistory | None = None  # each request's weight from what changed since the last
        self.fed: list[Message] = []
        self.records: list[AttemptRecord] = []
        self.events: list[ReplayEvent] = []
        self.body_chunks: list[bytes] = []  # the body of the request being sent, as posted
        self.turn = 0
        self.attempt = 0
        self.pending: Pending | None = None
        self.experiment = False  # the attempt being sent is a block experiment
        self.in_failure = False
        self.notices: list[str] = []
        self.level: int | None = None  # planned compaction's deepest step since the last send
        self.phase_level = 0
        self.recovering = 0  # open recovery compactions (PreCompact(recovery) without its PostCompact)
        self.recovered_level: int | None = None  # the recovery level applied since the last send
        self.recoveries = 0
        self.recovery_level = 0
        self.rejected_keys: set[str] = set()  # body keys rejected on this turn
        self.signatures: dict[tuple[int, int], str] = {}  # (turn, attempt) → failure signature
        self.fresh_parts: dict[tuple[int, int], int] = {}  # (turn, attempt) → parts not accepted before
        self.sending: Sequence[Message] = ()  # the messages of the request being sent
        self.last_accepted: Sequence[Message] = ()  # the messages of the last request answered
        self.turn_cap: int | None = None
        self.content_blocks: list[ContentBlock] = []
        self.withheld = 0  # parts the session withheld as refused content (its notices)
        self.failed_attempts = 0  # requests the turn that ended the replay had sent
        self.lost = 0
        self.ledger = LossLedger(archive, track_writes=True)
        archive.on_write = self.ledger.archived
        self.current: dict[str, Any] = {}
        self.calls_before = 0
        self.clock = time.perf_counter()
        self.marks = self._marks()

    # -- bookkeeping ---------------------------------------------------------------------------
    def _marks(self) -> tuple[int, int, float, int]:
        stats = self.session.stats if self.session else SessionStats()
        tokens = stats.summarizer_input_tokens + stats.summarizer_output_tokens
        return stats.summarizer_calls, tokens, stats.summarizer_cost_usd, self.archive.chars

    def attach(self, session: Session) -> None:
        self.session = session
        self.sized = SizedHistory(session.wire_format, model=session.model)
        self.marks = self._marks()

    def feed(self, msg: Message) -> None:
        """``msg`` joins the original conversation (given to the session, or produced by it)."""
        self.fed.append(msg)
        self.ledger.add_original(msg)

    @property
    def losses(self) -> Losses:
        """Chars lost per field, as of the last probe."""
        return self.ledger.losses

    def start_turn(self, turn: int) -> None:
        self.turn, self.attempt = turn, 0
        self.recoveries = self.recovery_level = 0
        self.rejected_keys = set()
        self.turn_cap = self.session.learned_cap if self.session else None  # for a block sent no request
        self.clock = time.perf_counter()

    def emit(self, item: Event | Rejection | AttemptRecord, attempt: int) -> None:
        event = ReplayEvent(self.turn, attempt, item)
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def on_library_event(self, event: Event) -> None:
        """Listener for the session's event bus."""
        failure_phase = self.in_failure and self.pending is not None
        self.emit(event, self.attempt if failure_phase else self.attempt + 1)
        if isinstance(event, Notice):
            self.withheld += event.code == CONTENT_WITHHELD_CODE
            (self.pending.notices if failure_phase and self.pending else self.notices).append(event.text)
        elif isinstance(event, PreCompact):
            if event.trigger == RECOVERY:
                assert self.session is not None
                self.recoveries += 1
                self.recovering += 1
                self.recovery_level = self.session.ladder.level_for(self.recoveries)
            else:
                self.phase_level = 0
        elif isinstance(event, StatusEvent):
            if not self.recovering:  # a strategy's own compactor inside a recovery is that recovery
                self.phase_level = max(self.phase_level, STATUS_STEPS.get(event.phase, 0))
        elif isinstance(event, PostCompact):
            if event.trigger == RECOVERY:
                self.recovering = max(0, self.recovering - 1)
                if event.outcome == APPLIED:
                    self.recovered_level = max(self.recovered_level or 0, self.recovery_level)
                self.in_failure = False
            elif event.outcome == APPLIED and self.phase_level:
                self.level = max(self.level or 0, self.phase_level)

    # -- attempts --------------------------------------------------------------------------------
    def before_send(self, request: ChatRequest) -> None:
        assert self.session is not None
        if self.pending is not None:
            self._finish_pending(self.pending.outcome)
        self.in_failure = False
        self.experiment = request.purpose == "experiment"
        self.attempt += 1
        self.sending = request.messages
        if self.level is not None:
            self.ledger.observe(self.session.history)
            self.lost = self.ledger.losses.total
        marks = self._marks()
        calls, tokens, cost, archived = (now - before for now, before in zip(marks, self.marks, strict=True))
        self.marks = marks
        assert self.sized is not None
        weight = self.sized.weights(request.messages).weight
        self.current = {
            **self.identity,
            "turn": self.turn,
            "attempt": self.attempt,
            "history_weight": weight,
            "message_count": len(request.messages),
            "estimated_tokens": math.ceil(weight / self.session.policy.chars_per_token),
            "proxy_cap": self.cap,
            "learned_cap": self.session.learned_cap,
            "context_window": self.session.context_window,
            "max_tokens": request.max_tokens,
            "compaction_level": self.level,
            "recovery_level": self.recovered_level,
            "summarizer_calls": calls,
            "summarizer_tokens": tokens,
            "summarizer_cost_usd": cost,
            "chars_archived": archived,
            "chars_lost": self.lost,
        }
        self.level = self.recovered_level = None
        self.calls_before = self.provider.call_count

    def _common(self) -> dict[str, Any]:
        now = time.perf_counter()
        elapsed, self.clock = (now - self.clock) * 1000, now
        notices, self.notices = self.notices, []
        return {
            **self.current,
            "request_bytes": sum(map(len, self.body_chunks)),
            "elapsed_ms": elapsed,
            "notices_before": notices,
        }

    @staticmethod
    def _build(fields: dict[str, Any], notices: list[str], outcome: str) -> AttemptRecord:
        fields = dict(fields)
        lines = fields.pop("notices_before") + notices
        return AttemptRecord(**fields, outcome=outcome, notices="\n".join(lines))

    def _record(self, fields: dict[str, Any], notices: list[str], outcome: str) -> None:
        record = self._build(fields, notices, outcome)
        self.records.append(record)
        self.emit(record, record.attempt)

    def after_success(self, response: ChatResponse) -> None:
        fields = self._common()
        calls = self.provider.calls
        if len(calls) > self.calls_before and calls[-1].usage is not None:
            fields["provider_cost_usd"] = self.provider.cost(calls[-1].usage)
        fields["identical_retry"] = False
        if self.experiment:
            self._record(fields, [], EXPERIMENT_PASSED)
            return
        self.last_accepted = self.sending
        if response.truncated:
            outcome, fields["failure_kind"] = "truncated", "output_truncated"
        elif self.recoveries:
            outcome = f"recovered@L{self.recovery_level}"
        else:
            outcome = "ok"
        self.recoveries = self.recovery_level = 0
        self._record(fields, [], outcome)

    def after_failure(self, error: SendFailed) -> None:
        assert self.session is not None
        fields = self._common()
        key = body_key(b"".join(self.body_chunks))
        fields["identical_retry"] = key in self.rejected_keys
        self.rejected_keys.add(key)
        failure = classify(
            error, request_bytes=error.request_bytes, history_chars=total_weight(self.session.history)
        )
        fields["failure_kind"] = failure.kind.value
        self.signatures[(self.turn, self.attempt)] = failure_signature(failure, response_text(error))
        if not self.experiment:
            self.fresh_parts[(self.turn, self.attempt)] = fresh_part_count(self.sending, self.last_accepted)
        outcome = EXPERIMENT_BLOCKED if self.experiment else f"rejected:{failure.kind.value}"
        self.pending = Pending(fields, outcome)
        self.in_failure = True
        self.emit(Rejection(self._build(fields, [], outcome)), self.attempt)

    def _finish_pending(self, outcome: str, extra_notice: str | None = None) -> None:
        assert self.pending is not None
        pending, self.pending = self.pending, None
        notices = pending.notices + ([extra_notice] if extra_notice else [])
        self._record(pending.fields, notices, outcome)

    def content_block(self, error: ContentBlockedError) -> None:
        """The session raised a content block and the replay sets ``error.message_index`` aside.

        The rejection (if this turn sent one) stays pending: another attempt follows. When every
        refusal of the turn was of the block's kind, the session undid the compaction a misreading
        of it did, so that is no recovery; a refusal of another kind (a real 413) keeps its own.
        """
        assert self.session is not None
        refusals = self._turn_refusals()
        kind = refusals[-1].get("failure_kind") if refusals else None
        same = [fields for fields in refusals if fields.get("failure_kind") == kind]
        cap_before = same[0]["learned_cap"] if same else self.turn_cap
        self.content_blocks.append(
            ContentBlock(self.turn, error.message_index, cap_before, self.session.learned_cap)
        )
        if len(same) == len(refusals):
            self.recoveries = self.recovery_level = 0
        self.in_failure = False

    def _turn_refusals(self) -> list[dict[str, Any]]:
        """The fields of this turn's refused attempts so far, the pending one last (none before a send)."""
        if self.pending is None:
            return []
        earlier = [
            r.to_row()
            for r in self.records
            if r.turn == self.turn and (r.outcome.startswith("rejected:") or r.outcome == EXPERIMENT_BLOCKED)
        ]
        return [*earlier, self.pending.fields]

    def turn_failed(self, error: RecoveryError) -> None:
        """The turn raised: its pending rejection becomes terminal.

        A turn may also fail before it sends anything (a request the session knows would be
        refused is never sent): then there is no attempt to record.
        """
        self.failed_attempts = self.attempt
        if self.pending is None:
            return
        if error.failure is not None:
            self.pending.fields["failure_kind"] = error.failure.kind.value
        if isinstance(error, PayloadFloorError):
            self._finish_pending("fail_fast_floor", str(error))
        else:
            self._finish_pending("failed")

    def finish(self, final: Sequence[Message]) -> None:
        self.ledger.observe(final)
        self.lost = self.ledger.losses.total
        if self.records:
            self.records[-1] = dataclasses.replace(self.records[-1], chars_lost=self.lost)
