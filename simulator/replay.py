"""Replay a recorded conversation through a real Session behind a fault scenario.

:func:`replay` feeds a transcript to a :class:`ctxrecover.session.Session` message by
message. Each time the transcript reaches an assistant message, that is a **turn**:
the session must produce it (``session.complete()``), and the scenario's mock
provider answers with exactly that recorded message (text and tool calls with their
ids), so the session's history stays aligned with the transcript. Requests go
through a real :class:`~ctxrecover.transport.HttpxSender` and the scenario's
:class:`~simulator.proxy.middlebox.Middlebox`, in process (an httpx client that hands each
request to the middlebox, :class:`~simulator.proxy.inprocess.InProcessClient`) or over a real
loopback TCP server; every request carries the ``x-ctxsim-turn``
header (1-based) so turn-keyed faults work on both, and a fake API key so its
headers are as large as a real client's. Retry back-offs are not slept.

One :class:`~simulator.research.metrics.AttemptRecord` is written per request attempt by
:mod:`simulator.recorder` (which attempt gets which notice, compaction and archive
delta is documented there). Without a transcript, the scenario's own ``[workload]``
transcript is replayed, shaped by the workload (:mod:`simulator.workloads`).

A turn that raises a :class:`~ctxrecover.errors.RecoveryError` ends the replay:
without that reply the recorded conversation cannot go on. Its last record reads
``failed`` or ``fail_fast_floor``, and :attr:`ReplayResult.outcome` says how the
run ended, in the terms of :data:`simulator.proxy.scenario.OUTCOMES`. One error is
answered as the library documents: a :class:`~ctxrecover.errors.ContentBlockedError`
(the gateway refused a message's content, not the request's size) makes the replay
set that message aside (:meth:`Session.set_aside <ctxrecover.session.Session.set_aside>`:
archived whole, recallable) and ask for the turn again, once per message.

Deterministic: the same inputs and seed give the same records, except
``elapsed_ms`` (wall time).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from ctxrecover.archive import MemoryArchive
from ctxrecover.errors import (
    ContentBlockedError,
    ContentFloorError,
    ContentRefusedError,
    PayloadFloorError,
    PolicyBlockedError,
    RecoveryError,
    RecoveryExhausted,
)
from ctxrecover.events import EventBus, SessionStats, StatusEvent
from ctxrecover.messages import Message
from ctxrecover.policy import DEFAULT_POLICY, Policy
from ctxrecover.session import Session
from simulator.providers.mock import ParsedRequest, Reply
from simulator.proxy.expectation import Observed
from simulator.proxy.inprocess import DEFAULT_MOCK_BASE_URL, InProcessClient, mount_inprocess
from simulator.proxy.loopback import TURN_HEADER, LoopbackServer
from simulator.proxy.middlebox import Middlebox
from simulator.proxy.scenario import Expectation, Scenario, load_scenario
from simulator.research.ledger import Losses
from simulator.research.metrics import AttemptRecord, episodes, records_to_frame, summarize_run
from simulator.research.retention import fact_survival
from simulator.summarizers import make_summarizer
from simulator.transcripts.loaders import Transcript

if TYPE_CHECKING:
    import pandas as pd

    from simulator.research.baselines import Strategy
from simulator.recorder import ContentBlock, CountingArchive, Recorder, ReplayEvent, ReplaySender, proxy_cap
from simulator.workloads import (
    ReplayError,
    Turn,
    load_named_transcript,
    shape_transcript,
    split_turns,
    workload_transcript,
)

__all__ = [
    "ENGINE_TIERS",
    "FloorFailure",
    "ReplayResult",
    "TRANSPORTS",
    "expectation_problems",
    "observed",
    "replay",
]


TRANSPORTS: tuple[str, ...] = ("inprocess", "loopback")
# Where the gateway comes from: the scenario's mock faults, or the real program a scenario names (engine =).
ENGINE_TIERS: tuple[str, ...] = ("mock", "real")
REAL_TIER_MAX_BODY = 64 * 1024 * 1024  # the mock behind a real engine takes whatever the engine lets through
# The middlebox behind httpx.MockTransport and the whole httpx client stack: what "inprocess" does in
# fewer steps (InProcessClient), kept as the reference a test compares every scenario's records with.
REFERENCE_TRANSPORT = "inprocess-httpx"
# Sent like a real client's key (its header counts against header-size caps); never a real key.
REPLAY_API_KEY = "sk-ctxsim-replay-not-a-real-key"


@dataclass(frozen=True, slots=True)
class FloorFailure:
    """What a :class:`~ctxrecover.errors.PayloadFloorError` named: the part over the gateway's limit
    (``system_prompt``, ``tool_definitions`` or ``smallest_request``), its real size, the size the
    gateway rejected, and the 0-based turn it ended."""

    over: str
    over_bytes: int
    rejected_bytes: int
    turn: int


@dataclass(frozen=True)
class ReplayResult:
    """Everything one replay produced; ``frame`` and ``summary`` are computed on first use.

    ``transcript`` is the transcript as given, ``replayed`` as the workload shaped
    it (:func:`shape_transcript`); ``conversation`` the
    messages the session was given or produced (the original that ``chars_lost``
    checks ``final_history`` and ``archive`` against; ``losses`` splits it per
    field, :class:`~simulator.research.ledger.Losses`). ``outcome`` is one of
    :data:`simulator.proxy.scenario.OUTCOMES`; ``error`` the message of the
    :class:`~ctxrecover.errors.RecoveryError` that ended the replay, if any.
    ``divergences`` counts replies that differ from the recording (a truncated
    answer kept after the escalations ran out). ``learned_cap`` is the session's
    payload cap at the end (None when it never learned one); ``summarizer_calls``
    what each call of the mock summarizer did
    (:data:`simulator.summarizers.CALL_OUTCOMES`). ``content_blocks`` are the content
    blocks the replay met and answered by setting the refused message aside; ``withheld`` the parts
    the session itself withheld as content the gateway refused (SPEC §12). ``notes`` say how the
    scenario was fitted to the transcript (:meth:`Scenario.fitted
    <simulator.proxy.scenario.Scenario.fitted>`: a planted turn beyond it moved to its last turn);
    ``scenario`` is the scenario as it ran. ``floor`` is what a ``fail_fast_floor`` named.
    ``signatures`` maps each refused attempt's ``(turn, attempt)`` to its failure signature
    (:func:`ctxrecover.recovery.failure_signature`: kind, status, page fingerprint);
    ``fresh_parts`` each refused request's (experiments aside) to the number of its parts the last
    accepted request did not carry as they are (:func:`simulator.recorder.fresh_part_count`).
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
    losses: Losses
    fact_survival: float
    outcome: str
    turns: int
    turns_completed: int
    learned_cap: int | None = None
    summarizer_calls: tuple[str, ...] = ()
    divergences: int = 0
    error: str | None = None
    content_blocks: tuple[ContentBlock, ...] = ()
    withheld: int = 0
    notes: tuple[str, ...] = ()
    floor: FloorFailure | None = None
    signatures: Mapping[tuple[int, int], str] = dataclasses.field(default_factory=dict)
    fresh_parts: Mapping[tuple[int, int], int] = dataclasses.field(default_factory=dict)

    @cached_property
    def frame(self) -> pd.DataFrame:
        """The records as a typed DataFrame (:data:`simulator.research.metrics.RUN_COLUMNS`)."""
        return records_to_frame(self.records)

    @cached_property
    def summary(self) -> dict[str, Any]:
        """:func:`simulator.research.metrics.summarize_run` plus outcome, expectation and retention."""
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
    def status_lines(self) -> list[str]:
        """Every compaction status line of the replay (``📦 Compacting history …``, …), in order."""
        return [e.item.message for e in self.events if isinstance(e.item, StatusEvent)]

    @property
    def failure_kinds(self) -> list[str]:
        """The failure kinds of the attempts, in order (rejections and truncations)."""
        return [r.failure_kind for r in self.records if r.failure_kind]

    @property
    def max_compaction_level(self) -> int | None:
        """The deepest planned-compaction step any attempt followed (1 trim, 2 summary, 3 truncation),
        or None."""
        levels = [r.compaction_level for r in self.records if r.compaction_level is not None]
        return max(levels) if levels else None

    @property
    def max_recovery_level(self) -> int | None:
        """The highest recovery level any attempt followed (the ladder's rung, 1–3), or None."""
        levels = [r.recovery_level for r in self.records if r.recovery_level is not None]
        return max(levels) if levels else None


def _no_sleep(_seconds: float) -> None:
    """Replays never wait: retry back-offs and slow faults are simulated, not slept."""


def _reply_of(msg: Message) -> Reply:
    try:
        return Reply(msg.content, msg.tool_calls)
    except ValueError as exc:
        raise ReplayError(f"recorded assistant message cannot be scripted: {exc}") from None


def _same_reply(recorded: Message, produced: Message) -> bool:
    def calls(msg: Message) -> list[tuple[str, object]]:
        return [(c.name, json.loads(c.arguments or "{}")) for c in msg.tool_calls]

    return recorded.content == produced.content and calls(recorded) == calls(produced)


#: The errors a block's experiments end a run with (SPEC §12), and the run outcome each reads as.
ERROR_OUTCOMES: tuple[tuple[type[RecoveryError], str], ...] = (
    (PolicyBlockedError, "policy_blocked"),
    (ContentFloorError, "content_floor"),
    (ContentRefusedError, "content_refused"),
)


def _run_outcome(
    records: Sequence[AttemptRecord], stats: SessionStats, error: RecoveryError | None, recorder: Recorder
) -> str:
    if isinstance(error, PayloadFloorError):
        return "fail_fast_floor"
    for kind, outcome in ERROR_OUTCOMES:
        if isinstance(error, kind):
            return outcome
    if error is not None:
        spent = recorder.failed_attempts > 1
        return "failed" if spent or isinstance(error, RecoveryExhausted) else "no_compaction"
    if any(r.outcome.startswith("recovered@") for r in records):
        return "recovered"
    if recorder.withheld:
        return "content_withheld"
    if recorder.content_blocks:
        return "content_blocked"
    if stats.escalations:
        return "escalated"
    if any(r.outcome == "rejected:output_limit" for r in records):
        return "max_tokens_lowered"
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


def _client(
    stack: ExitStack, transport: str, box: Middlebox, turn_header: Callable[[httpx.Request], None]
) -> tuple[str, httpx.Client]:
    """The base URL and the client a replay posts through, entered on ``stack`` (see :data:`TRANSPORTS`)."""
    options: dict[str, Any] = {"trust_env": False, "event_hooks": {"request": [turn_header]}}
    if transport == "loopback":
        server = stack.enter_context(LoopbackServer(box))
        # plain HTTP on 127.0.0.1: skip loading a TLS trust store (~20 ms per replay)
        client = httpx.Client(transport=httpx.HTTPTransport(verify=False), **options)
        return server.base_url, stack.enter_context(client)
    if transport == REFERENCE_TRANSPORT:
        client = httpx.Client(transport=mount_inprocess(box), **options)
    else:
        client = InProcessClient(box, **options)
    return DEFAULT_MOCK_BASE_URL, stack.enter_context(client)


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
    engines: str = "mock",
) -> ReplayResult:
    """Replay ``transcript`` under ``scenario`` with ``policy``; one record per request attempt.

    ``transcript`` is a :class:`~simulator.transcripts.loaders.Transcript`, a path or a
    bundled name, or None for the scenario's own workload
    (:func:`workload_transcript`); ``scenario`` a :class:`Scenario` or a bundled
    name or path. The scenario's ``[policy]`` overrides apply on top of ``policy``.
    ``seed`` seeds the middlebox and the mock provider (None: the scenario's seed).
    ``transport`` is ``inprocess`` (an :class:`~simulator.proxy.inprocess.InProcessClient` hands
    each request to the middlebox) or ``loopback`` (a real TCP server on 127.0.0.1);
    ``inprocess-httpx`` (:data:`REFERENCE_TRANSPORT`, not offered by the CLI) puts the middlebox
    behind ``httpx.MockTransport`` and the whole httpx client stack, the reference ``inprocess``
    is tested against (the same records). ``on_event`` sees every library event and every
    finished attempt as a :class:`ReplayEvent`, as they happen. ``policy_name``
    labels the run (default: the strategy's name, else ``default``).

    ``strategy`` (a :class:`simulator.research.baselines.Strategy`, e.g. one of
    :data:`simulator.research.baselines.BASELINES`) replaces parts of ctxrecover: its Policy
    overrides apply over ``policy`` (before the scenario's), and the Session gets
    the compactor, ladder and cap state its factory builds for this run — built
    with the run's policy, archive, an event bus feeding ``on_event``, the
    session's stats and the scenario's summarizer.

    ``engines="real"`` replays a scenario that names an engine (``engine = "haproxy"``) through that
    real program on loopback, the mock provider behind it (:mod:`simulator.engines.tier`); other
    scenarios replay as ``transport`` says.
    """
    if engines not in ENGINE_TIERS:
        raise ReplayError(f"unknown engines {engines!r}; use one of {', '.join(ENGINE_TIERS)}")
    if transport not in (*TRANSPORTS, REFERENCE_TRANSPORT):
        raise ReplayError(f"unknown transport {transport!r}; use one of {', '.join(TRANSPORTS)}")
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    original = _as_transcript(transcript, scenario)
    recorded_turns = len(split_turns(original.messages)[0])
    if not recorded_turns:
        raise ReplayError(f"transcript {original.name!r} has no assistant reply to replay")
    scenario, notes = scenario.fitted(recorded_turns)
    shaped = shape_transcript(original, scenario)
    turns, trailing = split_turns(shaped.messages)
    seed = scenario.seed if seed is None else seed
    run_policy = scenario.apply_policy(policy if strategy is None else strategy.apply(policy))
    if policy_name is None:
        policy_name = "default" if strategy is None else strategy.name
    run_id = f"{original.name}|{scenario.name}|{policy_name}|s{seed}"
    identity = {
        "run_id": run_id,
        "transcript": original.name,
        "transcript_sha256": original.sha256,
        "scenario": scenario.name,
        "policy": policy_name,
        "seed": seed,
    }
    archive = CountingArchive()
    script = _Script()
    provider = scenario.build_provider(script, seed=seed)
    recorder = Recorder(identity, archive, provider, cap=proxy_cap(scenario), on_event=on_event)
    box = Middlebox(provider, scenario.faults, seed=seed, sleep=_no_sleep, turn_of=_header_turn)
    with ExitStack() as stack:
        if engines == "real" and scenario.engine is not None:
            from simulator.engines.tier import engine_for

            upstream = stack.enter_context(LoopbackServer(provider, max_body_bytes=REAL_TIER_MAX_BODY))
            engine = stack.enter_context(engine_for(scenario, upstream.base_url))
            options: dict[str, Any] = {
                "trust_env": False,
                "event_hooks": {"request": [_turn_header(lambda: recorder.turn)]},
            }
            client = httpx.Client(transport=httpx.HTTPTransport(verify=False), **options)
            base_url, client = engine.url, stack.enter_context(client)
        else:
            base_url, client = _client(stack, transport, box, _turn_header(lambda: recorder.turn))
        sender = ReplaySender(
            recorder,
            scenario.provider.format,
            base_url=base_url,
            model=scenario.provider.model,
            api_key=REPLAY_API_KEY,
            client=client,
        )
        stats, summarizer = SessionStats(), _summarizer(scenario)
        options = (
            {}
            if strategy is None
            else strategy.session_options(
                run_policy, archive, EventBus(recorder.on_library_event), stats, summarizer=summarizer
            )
        )
        session = Session(
            sender,
            policy=run_policy,
            archive=archive,
            summarizer=summarizer,
            on_event=recorder.on_library_event,
            model=scenario.provider.model,
            max_tokens=scenario.workload.max_tokens,
            sleep=_no_sleep,
            stats=stats,
            **options,
        )
        recorder.attach(session)
        error, completed, divergences = _drive(session, recorder, script, turns, trailing)
    final = session.history
    recorder.finish(final)
    records = tuple(recorder.records)
    return ReplayResult(
        run_id=run_id,
        transcript=original,
        replayed=shaped,
        scenario=scenario,
        policy=run_policy,
        policy_name=policy_name,
        seed=seed,
        transport=transport,
        records=records,
        events=tuple(recorder.events),
        conversation=tuple(recorder.fed),
        final_history=tuple(final),
        archive=archive,
        stats=dataclasses.replace(session.stats),
        chars_lost=recorder.lost,
        losses=recorder.losses,
        fact_survival=fact_survival(shaped.facts, final, archive),
        outcome=_run_outcome(records, session.stats, error, recorder),
        turns=len(turns),
        turns_completed=completed,
        learned_cap=session.learned_cap,
        summarizer_calls=tuple(call.outcome for call in getattr(summarizer, "calls", ())),
        divergences=divergences,
        error=None if error is None else str(error),
        content_blocks=tuple(recorder.content_blocks),
        withheld=recorder.withheld,
        notes=notes,
        signatures=dict(recorder.signatures),
        fresh_parts=dict(recorder.fresh_parts),
        floor=(
            FloorFailure(error.over, error.over_bytes, error.rejected_bytes, completed)
            if isinstance(error, PayloadFloorError)
            else None
        ),
    )


class _Script:
    """The mock provider's script: the recorded reply of the current turn."""

    def __init__(self) -> None:
        self.reply: Reply | None = None

    def __call__(self, request: ParsedRequest) -> Reply:
        if self.reply is None:
            raise LookupError(f"no recorded reply is pending at provider call {request.call_index}")
        return self.reply


def _drive(
    session: Session, recorder: Recorder, script: _Script, turns: list[Turn], trailing: tuple[Message, ...]
) -> tuple[RecoveryError | None, int, int]:
    """Run the turns; returns (the error that ended the replay, turns completed, divergences)."""
    ids: dict[str, str] = {}
    divergences = 0

    def feed(messages: Iterator[Message] | Sequence[Message]) -> None:
        for msg in messages:
            msg = _remap(msg, ids)
            session.add(msg)
            recorder.feed(msg)

    for index, turn in enumerate(turns):
        recorder.start_turn(index)
        feed(turn.inputs)
        script.reply = _reply_of(turn.reply)
        try:
            produced = _complete(session, recorder)
        except RecoveryError as error:
            recorder.turn_failed(error)
            return error, index, divergences
        recorder.feed(produced)
        divergences += not _same_reply(turn.reply, produced)
        ids.update(
            {
                rec.id: got.id
                for rec, got in zip(turn.reply.tool_calls, produced.tool_calls, strict=False)
                if rec.id != got.id
            }
        )
        feed(turn.followers)
    feed(trailing)
    return None, len(turns), divergences


def _complete(session: Session, recorder: Recorder) -> Message:
    """``session.complete()``, setting aside each message a content block names (once per message)."""
    set_aside: set[int] = set()
    while True:
        try:
            return session.complete()
        except ContentBlockedError as error:
            if error.message_index < 0 or error.message_index in set_aside:
                raise
            recorder.content_block(error)
            session.set_aside(error.message_index)
            set_aside.add(error.message_index)


def observed(result: ReplayResult) -> Observed:
    """What ``result`` showed, in the terms of a scenario's ``[expect]`` table."""
    per_episode = episodes(result.frame)["rejected_requests"] if result.records else ()
    return Observed(
        outcome=result.outcome,
        failure_kinds=tuple(result.failure_kinds),
        compaction_level=result.max_compaction_level,
        rejected_requests=tuple(int(n) for n in per_episode),
        learned_cap=result.learned_cap,
        summarizer_calls=result.summarizer_calls,
        content_blocks=tuple((block.cap_before, block.cap_after) for block in result.content_blocks),
        withheld=result.withheld,
        final_max_tokens=result.records[-1].max_tokens if result.records else None,
        requests_over_cap=sum(
            r.learned_cap is not None and r.request_bytes > r.learned_cap for r in result.records
        ),
        lines=(*result.notices, *result.status_lines, *([result.error] if result.error else [])),
    )


def expectation_problems(result: ReplayResult, expect: Expectation | None = None) -> list[str]:
    """How ``result`` falls short of the scenario's ``[expect]`` section (empty when it meets it).

    Checks every field the expectation names (:mod:`simulator.proxy.expectation`),
    and that no character was lost, per field.
    """
    expect = expect or result.scenario.expect
    problems = expect.problems(observed(result))
    if result.chars_lost:
        by_field = ", ".join(f"{name} {chars:,}" for name, chars in result.losses.nonzero().items())
        problems.append(f"{by_field}: {result.chars_lost} chars lost")
    return problems
