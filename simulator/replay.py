"""Replay a recorded conversation through a real Session behind a fault scenario.

:func:`replay` feeds a transcript to a :class:`ctxrecover.session.Session` message by
message. Each time the transcript reaches an assistant message, that is a **turn**:
the session must produce it (``session.complete()``), and the scenario's mock
provider answers with exactly that recorded message (text and tool calls with their
ids), so the session's history stays aligned with the transcript. Requests go
through a real :class:`~ctxrecover.senders.HttpxSender` and the scenario's
:class:`~simulator.middlebox.Middlebox`, in process (``httpx.MockTransport``) or
over a real loopback TCP server; every request carries the ``x-ctxsim-turn``
header (1-based) so turn-keyed faults work on both, and a fake API key so its
headers are as large as a real client's. Retry back-offs are not slept.

One :class:`~simulator.metrics.AttemptRecord` is written per request attempt.
Conventions (see :data:`simulator.metrics.OUTCOMES`):

- notices go to the attempt that caused them: those before a turn's first send
  (pre-flight, planned compaction) to that send, those a rejection triggers
  (failure notice, learned cap, floor warning) to the rejected attempt; the
  ``✖`` text of a floor fail-fast — carried by the exception, not an event — is
  added to the ``fail_fast_floor`` record;
- compaction level, summarizer and archive deltas belong to the attempt they
  preceded;
- ``chars_lost`` is probed before every attempt that follows a compaction, and
  at the end of the replay (the final value lands on the last record);
- ``identical_retry`` compares the sha256 of the body with the last rejected body.

Without a transcript, the scenario's own ``[workload]`` transcript is replayed
(:func:`workload_transcript`: bundled fixtures, or the public transcripts beside
the repository when present). The workload also shapes any transcript: it pads
the system prompt to ``system_prompt_bytes`` and every recorded reply to
``reply_tokens`` (deterministic filler) and sets ``max_tokens``. Assistant
messages with neither text nor tool calls are skipped (no provider accepts them
in a history); an assistant message right after another one is appended to the
previous turn rather than requested (a request may not end with an assistant
message).

A turn that raises a :class:`~ctxrecover.errors.RecoveryError` ends the replay:
without that reply the recorded conversation cannot go on. Its last record reads
``failed`` or ``fail_fast_floor``, and :attr:`ReplayResult.outcome` says how the
run ended, in the terms of :data:`simulator.schedule.OUTCOMES`.

Deterministic: the same inputs and seed give the same records, except
``elapsed_ms`` (wall time).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import httpx

from ctxrecover.archive import MemoryArchive
from ctxrecover.classify import classify
from ctxrecover.errors import PayloadFloorError, RecoveryError, RecoveryExhausted
from ctxrecover.events import Event, EventBus, Notice, PostCompact, PreCompact, SessionStats, StatusEvent
from ctxrecover.messages import Message
from ctxrecover.policy import DEFAULT_POLICY, Policy
from ctxrecover.senders import ChatRequest, ChatResponse, HttpxSender, SendFailed
from ctxrecover.session import Session
from ctxrecover.sizes import total_weight
from simulator.generate import generate_session
from simulator.metrics import AttemptRecord, chars_lost, fact_survival, records_to_frame, summarize_run
from simulator.middlebox import BodyCap, HeaderCap, Middlebox, RateLimit429, ResetAfter
from simulator.providers import MockProvider, ParsedRequest, Reply
from simulator.schedule import Expectation, Scenario, load_scenario
from simulator.summarizers import make_summarizer
from simulator.transcripts import Transcript, TranscriptError, load_transcript
from simulator.transport import DEFAULT_MOCK_BASE_URL, TURN_HEADER, LoopbackServer, mount_inprocess

if TYPE_CHECKING:
    import pandas as pd

    from simulator.baselines import Strategy

__all__ = [
    "FALLBACK_TRANSCRIPT",
    "FIXTURE_TRANSCRIPTS_DIR",
    "GENERATED_TRANSCRIPT",
    "SHARED_TRANSCRIPTS_DIR",
    "TRANSPORTS",
    "ReplayError",
    "ReplayEvent",
    "ReplayResult",
    "Turn",
    "expectation_problems",
    "find_transcript",
    "load_named_transcript",
    "proxy_cap",
    "replay",
    "shape_transcript",
    "split_turns",
    "workload_transcript",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURE_TRANSCRIPTS_DIR = REPO_ROOT / "fixtures" / "transcripts"
SHARED_TRANSCRIPTS_DIR = REPO_ROOT.parent / "shared" / "transcripts"
TRANSCRIPT_SUFFIXES: tuple[str, ...] = ("", ".jsonl", ".json", ".traj")
# A workload names a transcript that is not bundled (the public ones live outside the repo):
# this bundled agent session stands in for it.
FALLBACK_TRANSCRIPT = "coding-120k"
# A workload "generated" to history_bytes: a chat-only fixture, whose request bytes grow turn after turn
# (microcompact shrinks old tool results, never answers), which is what body-size faults need.
GENERATED = "generated"
GENERATED_TRANSCRIPT = "chat-long-answers-600k"
# A generated workload larger than GENERATED_TRANSCRIPT: a seeded chat-only session of long answers.
GENERATED_OPTIONS = MappingProxyType(
    {"tool_turn_ratio": 0.0, "answer_chars": 8000, "recall_every": 0, "feedback_every": 0}
)
GENERATED_CHARS_PER_TURN = 8000

TRANSPORTS: tuple[str, ...] = ("inprocess", "loopback")
# Sent like a real client's key (its header counts against header-size caps); never a real key.
REPLAY_API_KEY = "sk-ctxsim-replay-not-a-real-key"

# Deterministic filler for workload shaping (system prompt bytes, reply tokens).
SYSTEM_FILLER_HEADER = "\n\n# Tool documentation (MCP servers, skills, personas)\n"
SYSTEM_FILLER_LINE = "- tool {index:05d}: parameters, usage notes and examples for this MCP tool.\n"
REPLY_FILLER_HEADER = "\n\nDetails:\n"
REPLY_FILLER_LINE = "- note {index:04d}: what was checked, what it showed and what comes next.\n"
CHARS_PER_TOKEN = 4  # the mock providers' estimate (simulator.providers.estimate_tokens)

# Compaction status phases → the level they reach (ctxrecover.compactor).
STATUS_LEVELS: MappingProxyType[str, int] = MappingProxyType(
    {"trim": 1, "summary_applied": 2, "emergency": 3}
)
FLOOR_WARNING_PREFIX = "⚠ System prompt alone is"
RECOVERY = "recovery"
APPLIED = "applied"


class ReplayError(ValueError):
    """A replay cannot start: bad transport, a transcript with nothing to replay, …"""


# -- values ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn: messages fed before it, the recorded reply, and assistant messages right after it."""

    inputs: tuple[Message, ...]
    reply: Message
    followers: tuple[Message, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplayEvent:
    """A library event or a finished attempt, tagged with its 0-based turn and 1-based attempt."""

    turn: int
    attempt: int
    item: Event | AttemptRecord


@dataclass(frozen=True)
class ReplayResult:
    """Everything one replay produced; ``frame`` and ``summary`` are computed on first use.

    ``transcript`` is the transcript as given, ``replayed`` as the workload shaped
    it (:func:`shape_transcript`); ``conversation`` the
    messages the session was given or produced (the original that ``chars_lost``
    checks ``final_history`` and ``archive`` against). ``outcome`` is one of
    :data:`simulator.schedule.OUTCOMES`; ``error`` the message of the
    :class:`~ctxrecover.errors.RecoveryError` that ended the replay, if any.
    ``divergences`` counts replies that differ from the recording (a truncated
    answer kept after the escalations ran out).
    """

    run_id: str
    transcript: Transcript
    replayed: Transcript
    scenario: Scenario
    policy: Policy
    policy_name: str
    seed: int
    transport: str
    records: tuple[AttemptRecord, ...]
    events: tuple[ReplayEvent, ...]
    conversation: tuple[Message, ...]
    final_history: tuple[Message, ...]
    archive: MemoryArchive
    stats: SessionStats
    chars_lost: int
    fact_survival: float
    outcome: str
    turns: int
    turns_completed: int
    divergences: int = 0
    error: str | None = None

    @cached_property
    def frame(self) -> pd.DataFrame:
        """The records as a typed DataFrame (:data:`simulator.metrics.RUN_COLUMNS`)."""
        return records_to_frame(self.records)

    @cached_property
    def summary(self) -> dict[str, Any]:
        """:func:`simulator.metrics.summarize_run` plus outcome, expectation and retention."""
        return {
            **summarize_run(self.frame, chars_lost=self.chars_lost),
            "run_id": self.run_id,
            "transcript": self.transcript.name,
            "scenario": self.scenario.name,
            "policy": self.policy_name,
            "seed": self.seed,
            "outcome": self.outcome,
            "expected_outcome": self.scenario.expect.outcome,
            "fact_survival": self.fact_survival,
            "turns_total": self.turns,
            "turns_completed": self.turns_completed,
        }

    @property
    def notices(self) -> list[str]:
        """Every notice text of the replay, in order (the ``✖`` floor text included)."""
        return [line for record in self.records for line in record.notices.split("\n") if line]

    @property
    def failure_kinds(self) -> list[str]:
        """The failure kinds of the attempts, in order (rejections and truncations)."""
        return [r.failure_kind for r in self.records if r.failure_kind]

    @property
    def max_compaction_level(self) -> int | None:
        """The highest compaction level any attempt followed, or None."""
        levels = [r.compaction_level for r in self.records if r.compaction_level is not None]
        return max(levels) if levels else None


# -- transcripts and workloads ---------------------------------------------------------------


def find_transcript(name: str | Path) -> Path:
    """A transcript path: ``name`` itself, else a bundled fixture, else a public transcript.

    Bundled names may omit the suffix (``chat-50k``); public transcripts are looked
    up in :data:`SHARED_TRANSCRIPTS_DIR`. Raises :class:`ReplayError` naming where it looked.
    """
    path = Path(name)
    if path.is_file():
        return path
    for directory in (FIXTURE_TRANSCRIPTS_DIR, SHARED_TRANSCRIPTS_DIR):
        for suffix in TRANSCRIPT_SUFFIXES:
            candidate = directory / f"{name}{suffix}"
            if candidate.is_file():
                return candidate
    bundled = ", ".join(sorted(p.stem for p in FIXTURE_TRANSCRIPTS_DIR.glob("*.jsonl")))
    raise ReplayError(
        f"{name}: no such transcript file, and no bundled transcript of that name "
        f"(bundled: {bundled}; public ones are read from {SHARED_TRANSCRIPTS_DIR})"
    )


def load_named_transcript(name: str | Path) -> Transcript:
    """Load a transcript by path or bundled name (:func:`find_transcript`); tau-bench files give run 0."""
    path = find_transcript(name)
    try:
        return load_transcript(path)
    except TranscriptError as exc:  # a multi-run tau-bench file: replay its first run
        if "tau-bench runs" not in str(exc):
            raise
        return load_transcript(path, run=0)


def _prefix(transcript: Transcript, history_bytes: int) -> Transcript:
    """The transcript cut before the first user message at which the history reaches ``history_bytes``."""
    messages = transcript.messages
    weight = 0
    for index, msg in enumerate(messages):
        if msg.role == "user" and weight >= history_bytes:
            facts = tuple(f for f in transcript.facts if f.message_index < index)
            name = f"{transcript.name}[:{index}]"
            return dataclasses.replace(transcript, name=name, messages=messages[:index], facts=facts)
        weight += total_weight((msg,))
    return transcript


def workload_transcript(scenario: Scenario) -> Transcript:
    """The transcript the scenario's ``[workload]`` asks for, from the bundled data.

    A named transcript is looked up with :func:`find_transcript`; when it is not
    available (the public ones live outside the repository),
    :data:`FALLBACK_TRANSCRIPT` stands in. ``generated`` with ``history_bytes``
    takes :data:`GENERATED_TRANSCRIPT` — or, when that is smaller, a chat session of
    long answers generated with the scenario's seed — cut before the user turn at
    which the history reaches that size; no name at all, the fallback.
    """
    workload = scenario.workload
    if workload.transcript and workload.transcript != GENERATED:
        try:
            return load_named_transcript(workload.transcript)
        except ReplayError:
            return load_named_transcript(FALLBACK_TRANSCRIPT)
    if not workload.history_bytes:
        return load_named_transcript(FALLBACK_TRANSCRIPT)
    bundled = load_named_transcript(GENERATED_TRANSCRIPT)
    if total_weight(bundled.messages) < workload.history_bytes:
        turns = workload.history_bytes // GENERATED_CHARS_PER_TURN + 2
        bundled = generate_session(seed=scenario.seed, turns=turns, name=GENERATED, **GENERATED_OPTIONS)
    return _prefix(bundled, workload.history_bytes)


def _filler(header: str, line: str, chars: int) -> str:
    """Deterministic filler of at least ``chars`` characters."""
    parts = [header]
    size = len(header)
    index = 0
    while size < chars:
        index += 1
        text = line.format(index=index)
        parts.append(text)
        size += len(text)
    return "".join(parts)


def _output_chars(msg: Message) -> int:
    return len(msg.content) + sum(len(c.name) + len(c.arguments or "") for c in msg.tool_calls)


def shape_transcript(transcript: Transcript, scenario: Scenario) -> Transcript:
    """The transcript as the scenario's workload shapes it (the same transcript when nothing changes).

    ``system_prompt_bytes`` pads the leading system message (inserted when absent)
    until its UTF-8 content is that large; ``reply_tokens`` pads every assistant
    reply with text until its output is about that many tokens.
    """
    workload = scenario.workload
    messages = list(transcript.messages)
    changed = False
    if workload.system_prompt_bytes:
        has_system = bool(messages) and messages[0].role == "system"
        system = messages[0] if has_system else Message.system("You are a helpful agent.")
        missing = workload.system_prompt_bytes - len(system.content.encode("utf-8"))
        if missing > 0:
            padded = system.content + _filler(SYSTEM_FILLER_HEADER, SYSTEM_FILLER_LINE, missing)
            system = system.replace(content=padded, system_parts=())
        if has_system:
            messages[0] = system
        else:
            messages.insert(0, system)
        changed = True
    if workload.reply_tokens:
        target = workload.reply_tokens * CHARS_PER_TOKEN
        for index, msg in enumerate(messages):
            missing = target - _output_chars(msg)
            if msg.role == "assistant" and missing > 0:
                filler = _filler(REPLY_FILLER_HEADER, REPLY_FILLER_LINE, missing)
                messages[index] = msg.with_content(msg.content + filler)
                changed = True
    if not changed:
        return transcript
    offset = len(messages) - len(transcript.messages)
    facts = tuple(dataclasses.replace(f, message_index=f.message_index + offset) for f in transcript.facts)
    return dataclasses.replace(transcript, messages=tuple(messages), facts=facts)


def _speaks(msg: Message) -> bool:
    return bool(msg.content or msg.tool_calls)


def split_turns(messages: Sequence[Message]) -> tuple[list[Turn], tuple[Message, ...]]:
    """The turns of a conversation and the messages after its last reply.

    A turn's ``inputs`` are the messages fed since the previous turn; its ``reply``
    is the assistant message the session must produce. Assistant messages that
    directly follow a reply are its ``followers`` (fed, not requested); leading
    assistant messages are inputs; empty assistant messages are skipped.
    """
    turns: list[Turn] = []
    pending: list[Message] = []
    for msg in messages:
        if msg.role != "assistant":
            pending.append(msg)
            continue
        if not _speaks(msg):
            continue
        if not any(m.role != "system" for m in pending) and not turns:
            pending.append(msg)
        elif not pending and turns:
            last = turns[-1]
            turns[-1] = dataclasses.replace(last, followers=(*last.followers, msg))
        else:
            turns.append(Turn(tuple(pending), msg))
            pending = []
    return turns, tuple(pending)


# -- caps -------------------------------------------------------------------------------------------


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


# -- the replay ---------------------------------------------------------------------------------


class _CountingArchive(MemoryArchive):
    """A memory archive that counts the chars of new entries."""

    def __init__(self) -> None:
        super().__init__()
        self.chars = 0

    def put(self, content: str) -> str:
        entries = len(self)
        key = super().put(content)  # content is hashed once (megabytes, for a dropped range)
        if len(self) > entries:
            self.chars += len(content)
        return key

    def put_keyed(self, entries: Sequence[tuple[str, str]]) -> None:
        fresh = {key: content for key, content in entries if key not in self}
        super().put_keyed(entries)
        self.chars += sum(map(len, fresh.values()))


class _ReplaySender(HttpxSender):
    """An HttpxSender that reports every attempt (and the exact body it sent) to the recorder."""

    def __init__(self, recorder: _Recorder, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorder = recorder

    def render(self, request: ChatRequest) -> bytes:
        body = super().render(request)
        self.recorder.body = body
        return body

    def send(self, request: ChatRequest) -> ChatResponse:
        self.recorder.before_send(request)
        try:
            response = super().send(request)
        except SendFailed as exc:
            self.recorder.after_failure(exc)
            raise
        self.recorder.after_success(response)
        return response


def _no_sleep(_seconds: float) -> None:
    """Replays never wait: retry back-offs and slow faults are simulated, not slept."""


@dataclass(slots=True)
class _Pending:
    """A rejected attempt whose outcome (retried or terminal) is not known yet."""

    fields: dict[str, Any]
    notices: list[str] = field(default_factory=list)


class _Recorder:
    """Turns session events and sender calls into AttemptRecords (one replay, one recorder)."""

    def __init__(self, identity: dict[str, Any], archive: _CountingArchive, provider: MockProvider, *,
                 cap: int | None, on_event: Callable[[ReplayEvent], Any] | None) -> None:
        self.identity = identity
        self.archive = archive
        self.provider = provider
        self.cap = cap
        self.on_event = on_event
        self.session: Session | None = None
        self.fed: list[Message] = []
        self.records: list[AttemptRecord] = []
        self.events: list[ReplayEvent] = []
        self.body = b""
        self.turn = 0
        self.attempt = 0
        self.pending: _Pending | None = None
        self.in_failure = False
        self.notices: list[str] = []
        self.level: int | None = None
        self.phase_level = 0
        self.recoveries = 0
        self.recovery_level = 0
        self.rejected_hash: str | None = None
        self.lost = 0
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
        self.marks = self._marks()

    def start_turn(self, turn: int) -> None:
        self.turn, self.attempt = turn, 0
        self.recoveries = self.recovery_level = 0
        self.clock = time.perf_counter()

    def emit(self, item: Event | AttemptRecord, attempt: int) -> None:
        event = ReplayEvent(self.turn, attempt, item)
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def on_library_event(self, event: Event) -> None:
        """Listener for the session's event bus."""
        failure_phase = self.in_failure and self.pending is not None
        self.emit(event, self.attempt if failure_phase else self.attempt + 1)
        if isinstance(event, Notice):
            (self.pending.notices if failure_phase and self.pending else self.notices).append(event.text)
        elif isinstance(event, PreCompact):
            if event.trigger == RECOVERY:
                assert self.session is not None
                self.recoveries += 1
                self.phase_level = self.recovery_level = self.session.ladder.level_for(self.recoveries)
            else:
                self.phase_level = 0
        elif isinstance(event, StatusEvent):
            self.phase_level = max(self.phase_level, STATUS_LEVELS.get(event.phase, 0))
        elif isinstance(event, PostCompact):
            if event.outcome == APPLIED and self.phase_level:
                self.level = max(self.level or 0, self.phase_level)
            if event.trigger == RECOVERY:
                self.in_failure = False

    # -- attempts --------------------------------------------------------------------------------
    def before_send(self, request: ChatRequest) -> None:
        assert self.session is not None
        if self.pending is not None:
            self._finish_pending(f"rejected:{self.pending.fields['failure_kind']}")
        self.in_failure = False
        self.attempt += 1
        if self.level is not None:
            self.lost = chars_lost(self.fed, self.session.history, self.archive)
        marks = self._marks()
        calls, tokens, cost, archived = (now - before for now, before in zip(marks, self.marks, strict=True))
        self.marks = marks
        weight = total_weight(request.messages)
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
            "summarizer_calls": calls,
            "summarizer_tokens": tokens,
            "summarizer_cost_usd": cost,
            "chars_archived": archived,
            "chars_lost": self.lost,
        }
        self.level = None
        self.calls_before = self.provider.call_count

    def _common(self) -> dict[str, Any]:
        now = time.perf_counter()
        elapsed, self.clock = (now - self.clock) * 1000, now
        notices, self.notices = self.notices, []
        return {**self.current, "request_bytes": len(self.body), "elapsed_ms": elapsed,
                "notices_before": notices}

    def _record(self, fields: dict[str, Any], notices: list[str], outcome: str) -> None:
        fields = dict(fields)
        lines = fields.pop("notices_before") + notices
        record = AttemptRecord(**fields, outcome=outcome, notices="\n".join(lines))
        self.records.append(record)
        self.emit(record, record.attempt)

    def after_success(self, response: ChatResponse) -> None:
        fields = self._common()
        calls = self.provider.calls
        if len(calls) > self.calls_before and calls[-1].usage is not None:
            fields["provider_cost_usd"] = self.provider.cost(calls[-1].usage)
        fields["identical_retry"] = False
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
        digest = hashlib.sha256(self.body).hexdigest()
        fields["identical_retry"] = digest == self.rejected_hash
        self.rejected_hash = digest
        failure = classify(error, request_bytes=error.request_bytes,
                           history_chars=total_weight(self.session.history))
        fields["failure_kind"] = failure.kind.value
        self.pending = _Pending(fields)
        self.in_failure = True

    def _finish_pending(self, outcome: str, extra_notice: str | None = None) -> None:
        assert self.pending is not None
        pending, self.pending = self.pending, None
        notices = pending.notices + ([extra_notice] if extra_notice else [])
        self._record(pending.fields, notices, outcome)

    def turn_failed(self, error: RecoveryError) -> None:
        """The turn raised: its pending rejection becomes terminal."""
        if self.pending is None:
            raise error  # a RecoveryError without a rejected attempt is a library bug
        if error.failure is not None:
            self.pending.fields["failure_kind"] = error.failure.kind.value
        if isinstance(error, PayloadFloorError):
            self._finish_pending("fail_fast_floor", str(error))
        else:
            self._finish_pending("failed")

    def finish(self, final: Sequence[Message]) -> None:
        self.lost = chars_lost(self.fed, final, self.archive)
        if self.records:
            self.records[-1] = dataclasses.replace(self.records[-1], chars_lost=self.lost)


def _reply_of(msg: Message) -> Reply:
    try:
        return Reply(msg.content, msg.tool_calls)
    except ValueError as exc:
        raise ReplayError(f"recorded assistant message cannot be scripted: {exc}") from None


def _same_reply(recorded: Message, produced: Message) -> bool:
    def calls(msg: Message) -> list[tuple[str, object]]:
        return [(c.name, json.loads(c.arguments or "{}")) for c in msg.tool_calls]

    return recorded.content == produced.content and calls(recorded) == calls(produced)


def _run_outcome(records: Sequence[AttemptRecord], stats: SessionStats, error: RecoveryError | None) -> str:
    if isinstance(error, PayloadFloorError):
        return "fail_fast_floor"
    if error is not None:
        turn = records[-1].turn
        spent = sum(r.turn == turn for r in records) > 1
        return "failed" if spent or isinstance(error, RecoveryExhausted) else "no_compaction"
    if any(r.outcome.startswith("recovered@") for r in records):
        return "recovered"
    if stats.escalations:
        return "escalated"
    if any(r.outcome.startswith("rejected:") for r in records):
        return "retried"
    return "ok"


def _summarizer(scenario: Scenario) -> Any:
    spec = scenario.summarizer
    options = {"window_tokens": spec.context_window} if spec.context_window else {}
    return make_summarizer(spec.behaviour, **options)


def _as_transcript(transcript: Transcript | str | Path | None, scenario: Scenario) -> Transcript:
    if transcript is None:
        return workload_transcript(scenario)
    if isinstance(transcript, Transcript):
        return transcript
    return load_named_transcript(transcript)


def _remap(msg: Message, ids: dict[str, str]) -> Message:
    if msg.role == "tool" and msg.tool_call_id in ids:
        return msg.replace(tool_call_id=ids[msg.tool_call_id])
    return msg


def _turn_header(turn: Callable[[], int]) -> Callable[[httpx.Request], None]:
    def hook(request: httpx.Request) -> None:
        request.headers[TURN_HEADER] = str(turn() + 1)

    return hook


def _header_turn(request: httpx.Request) -> int:
    return int(request.headers.get(TURN_HEADER, "1"))


def replay(
    transcript: Transcript | str | Path | None,
    scenario: Scenario | str | Path,
    *,
    policy: Policy = DEFAULT_POLICY,
    seed: int | None = None,
    transport: str = "inprocess",
    on_event: Callable[[ReplayEvent], Any] | None = None,
    policy_name: str | None = None,
    strategy: Strategy | None = None,
) -> ReplayResult:
    """Replay ``transcript`` under ``scenario`` with ``policy``; one record per request attempt.

    ``transcript`` is a :class:`~simulator.transcripts.Transcript`, a path or a
    bundled name, or None for the scenario's own workload
    (:func:`workload_transcript`); ``scenario`` a :class:`Scenario` or a bundled
    name or path. The scenario's ``[policy]`` overrides apply on top of ``policy``.
    ``seed`` seeds the middlebox and the mock provider (None: the scenario's seed).
    ``transport`` is ``inprocess`` (``httpx.MockTransport``) or ``loopback`` (a real
    TCP server on 127.0.0.1). ``on_event`` sees every library event and every
    finished attempt as a :class:`ReplayEvent`, as they happen. ``policy_name``
    labels the run (default: the strategy's name, else ``default``).

    ``strategy`` (a :class:`simulator.baselines.Strategy`, e.g. one of
    :data:`simulator.baselines.BASELINES`) replaces parts of ctxrecover: its Policy
    overrides apply over ``policy`` (before the scenario's), and the Session gets
    the compactor, ladder and cap state its factory builds for this run — built
    with the run's policy, archive, an event bus feeding ``on_event``, the
    session's stats and the scenario's summarizer.
    """
    if transport not in TRANSPORTS:
        raise ReplayError(f"unknown transport {transport!r}; use one of {', '.join(TRANSPORTS)}")
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    original = _as_transcript(transcript, scenario)
    shaped = shape_transcript(original, scenario)
    turns, trailing = split_turns(shaped.messages)
    if not turns:
        raise ReplayError(f"transcript {original.name!r} has no assistant reply to replay")
    seed = scenario.seed if seed is None else seed
    run_policy = scenario.apply_policy(policy if strategy is None else strategy.apply(policy))
    if policy_name is None:
        policy_name = "default" if strategy is None else strategy.name
    run_id = f"{original.name}|{scenario.name}|{policy_name}|s{seed}"
    identity = {"run_id": run_id, "transcript": original.name, "transcript_sha256": original.sha256,
                "scenario": scenario.name, "policy": policy_name, "seed": seed}
    archive = _CountingArchive()
    script = _Script()
    provider = scenario.build_provider(script, seed=seed)
    recorder = _Recorder(identity, archive, provider, cap=proxy_cap(scenario), on_event=on_event)
    box = Middlebox(provider, scenario.faults, seed=seed, sleep=_no_sleep, turn_of=_header_turn)
    with ExitStack() as stack:
        if transport == "loopback":
            server = stack.enter_context(LoopbackServer(box))
            # plain HTTP on 127.0.0.1: skip loading a TLS trust store (~20 ms per replay)
            base_url, http_transport = server.base_url, httpx.HTTPTransport(verify=False)
        else:
            base_url, http_transport = DEFAULT_MOCK_BASE_URL, mount_inprocess(box)
        client = stack.enter_context(httpx.Client(
            transport=http_transport, trust_env=False,
            event_hooks={"request": [_turn_header(lambda: recorder.turn)]},
        ))
        sender = _ReplaySender(recorder, scenario.provider.format, base_url=base_url,
                               model=scenario.provider.model, api_key=REPLAY_API_KEY, client=client)
        stats, summarizer = SessionStats(), _summarizer(scenario)
        options = {} if strategy is None else strategy.session_options(
            run_policy, archive, EventBus(recorder.on_library_event), stats, summarizer=summarizer
        )
        session = Session(
            sender, policy=run_policy, archive=archive, summarizer=summarizer,
            on_event=recorder.on_library_event, model=scenario.provider.model,
            max_tokens=scenario.workload.max_tokens, sleep=_no_sleep, stats=stats, **options,
        )
        recorder.attach(session)
        error, completed, divergences = _drive(session, recorder, script, turns, trailing)
    final = session.history
    recorder.finish(final)
    records = tuple(recorder.records)
    return ReplayResult(
        run_id=run_id, transcript=original, replayed=shaped, scenario=scenario, policy=run_policy,
        policy_name=policy_name, seed=seed, transport=transport, records=records,
        events=tuple(recorder.events), conversation=tuple(recorder.fed), final_history=tuple(final),
        archive=archive, stats=dataclasses.replace(session.stats), chars_lost=recorder.lost,
        fact_survival=fact_survival(shaped.facts, final, archive),
        outcome=_run_outcome(records, session.stats, error), turns=len(turns), turns_completed=completed,
        divergences=divergences, error=None if error is None else str(error),
    )


class _Script:
    """The mock provider's script: the recorded reply of the current turn."""

    def __init__(self) -> None:
        self.reply: Reply | None = None

    def __call__(self, request: ParsedRequest) -> Reply:
        if self.reply is None:
            raise LookupError(f"no recorded reply is pending at provider call {request.call_index}")
        return self.reply


def _drive(session: Session, recorder: _Recorder, script: _Script, turns: list[Turn],
           trailing: tuple[Message, ...]) -> tuple[RecoveryError | None, int, int]:
    """Run the turns; returns (the error that ended the replay, turns completed, divergences)."""
    ids: dict[str, str] = {}
    divergences = 0

    def feed(messages: Iterator[Message] | Sequence[Message]) -> None:
        for msg in messages:
            msg = _remap(msg, ids)
            session.add(msg)
            recorder.fed.append(msg)

    for index, turn in enumerate(turns):
        recorder.start_turn(index)
        feed(turn.inputs)
        script.reply = _reply_of(turn.reply)
        try:
            produced = session.complete()
        except RecoveryError as error:
            recorder.turn_failed(error)
            return error, index, divergences
        recorder.fed.append(produced)
        divergences += not _same_reply(turn.reply, produced)
        ids.update({rec.id: got.id for rec, got in zip(turn.reply.tool_calls, produced.tool_calls,
                                                         strict=False) if rec.id != got.id})
        feed(turn.followers)
    feed(trailing)
    return None, len(turns), divergences


def expectation_problems(result: ReplayResult, expect: Expectation | None = None) -> list[str]:
    """How ``result`` falls short of the scenario's ``[expect]`` section (empty when it meets it).

    Checks the run outcome, the first failure kind, the highest compaction level,
    the floor warning when expected, and that no character was lost.
    """
    expect = expect or result.scenario.expect
    problems = []
    if result.outcome != expect.outcome:
        problems.append(f"outcome {result.outcome}, expected {expect.outcome}")
    kinds = result.failure_kinds
    if expect.failure_kind is not None and (not kinds or kinds[0] != expect.failure_kind):
        problems.append(f"first failure {kinds[0] if kinds else 'none'}, expected {expect.failure_kind}")
    if expect.compaction_level is not None and result.max_compaction_level != expect.compaction_level:
        problems.append(f"compaction level {result.max_compaction_level}, expected {expect.compaction_level}")
    if expect.floor_warning and not any(n.startswith(FLOOR_WARNING_PREFIX) for n in result.notices):
        problems.append("no floor warning notice")
    if result.chars_lost:
        problems.append(f"{result.chars_lost} chars lost")
    return problems
