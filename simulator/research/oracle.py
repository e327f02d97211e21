"""The oracle of rejected requests: for each failure episode, the fewest rejected requests any policy
obeying SPEC §§6, 11 and 12 could need (issue 24, P5) — the one oracle the benchmark and the matrix
test tier (:mod:`simulator.research.workload_matrix`) both read.

A rejected request is how a limit is found: no policy learns a gateway's cap, or that a body is too
large for a context window, without one. What a lawful policy may spend beyond that is fixed by the
SPEC, per limit an episode meets (:data:`ORACLE_RULES`, each with its section):

- **an unambiguous signal** — a 413, a context overflow, a 431, a ``max_tokens`` error, a rate
  limit, a block page of a signature already read as size: **1** (§6: the rejection teaches the
  limit, the retry fits it);
- **a block page read as size** the first time its signature is (kind, status, page fingerprint:
  :func:`ctxrecover.recovery.failure_signature`): **2** — the block, and the same size without the
  content new since the last accepted request, refused too (§12: no cap without a size experiment;
  the replay records it as ``experiment:blocked``);
- **an ambiguous network failure** — a reset, an EOF, a 502/503/504 without a provider's body
  (``transient_network``): **2** for the first of its signature in a session, which earns one plain
  retry as it was (§2.4, §11), and **1** for later ones, which are payload evidence at once (§11);
- **a content block** among ``n`` candidate parts — the parts of the refused request the last
  accepted request did not carry as they are, new messages and what the library rewrote since
  (§12's first tier; the replay's ``fresh_parts``, else :func:`content_candidates`):
  **1 + ⌈log2 n⌉**, the blocked requests delta debugging needs for one culprit among ``n`` (§12).
  A turn whose search kept out ``k`` culprits met ``k`` blocks: the first, and each resend without
  the culprits found so far refused again, the ``j``-th (from 0) among the ``n − j`` parts left:
  **Σ (1 + ⌈log2 (n − j)⌉)** for j < k;
- **a policy block**, or **a refused base** (the minimal request or the system prompt alone refused):
  **2** — the block, and the one experiment every lawful policy must send to tell it from size and
  content, refused too (§12).

An *episode* is :func:`simulator.research.metrics.episodes`' (a turn's run of rejected requests, block
experiments included, to the attempt that ends it); its rejected requests count every
``experiment:blocked`` of it. An episode meeting several limits in turn (a real 413, then a content
rule on the retry) costs the sum of each limit's fewest. A block page's reading comes from the notice
the library gave (:data:`BLOCK_READINGS`); without one it was read as size.

>>> oracle_rejections([Signal("payload_too_large"), Signal("transient_network"),
...                    Signal("transient_network"), Signal("waf_rejection", "content", 5),
...                    Signal("waf_rejection"), Signal("waf_rejection"),
...                    Signal("waf_rejection", "content", 4, culprits=2)])
[1, 2, 1, 4, 2, 1, 6]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ctxrecover.events import Notice
from ctxrecover.passes.withhold import parts_of
from ctxrecover.recovery import (
    CONTENT_BLOCK_CODE,
    CONTENT_FLOOR_CODE,
    CONTENT_WITHHELD_CODE,
    CONTENT_WITHHELD_NOTICE,
    POLICY_BLOCK_CODE,
)
from simulator.research.metrics import REJECTED_PREFIX, AttemptRecord, continues_episode, is_rejection
from simulator.workloads import split_turns

if TYPE_CHECKING:
    from simulator.replay import ReplayResult

__all__ = [
    "AMBIGUOUS_KINDS",
    "BLOCK_KINDS",
    "BLOCK_READINGS",
    "ORACLE_RULES",
    "OracleEpisode",
    "Signal",
    "content_candidates",
    "culprits_kept_out",
    "fewest_rejected",
    "oracle_episodes",
    "oracle_rejections",
    "versus_oracle",
]

# The rules of the oracle, each with the SPEC sections it reads (the module docstring explains them).
ORACLE_RULES: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "unambiguous": ("1", "§6 steps 1 and 7, §11 size-consistent blocks, §8/§11 max_tokens"),
        "block_as_size_first": (
            "2: the block and the size experiment, refused too",
            "§12 three hypotheses (size), blocks never become caps",
        ),
        "ambiguous_first": ("2: the rejection and one plain retry", "§2.4, §11 size-correlated failures"),
        "ambiguous_later": ("1: payload evidence at once", "§11 size-correlated failures"),
        "content": (
            "1 + ⌈log2 n⌉ for one culprit among n new parts; per block met, for each culprit kept out",
            "§12 find the culprit",
        ),
        "policy_or_floor": ("2: the block and the refused minimal request", "§12 three hypotheses"),
    }
)
# Failure kinds of a signal that does not say whether size caused it (SPEC §2.4, §11).
AMBIGUOUS_KINDS: frozenset[str] = frozenset({"transient_network"})
# Failure kinds of a block page: size, content or policy until an experiment settles it (SPEC §12).
BLOCK_KINDS: frozenset[str] = frozenset({"waf_rejection"})
# How an episode's block was settled, from the notice the library gave (ctxrecover.recovery codes).
BLOCK_READINGS: Mapping[str, str] = MappingProxyType(
    {
        CONTENT_WITHHELD_CODE: "content",
        CONTENT_BLOCK_CODE: "content",
        POLICY_BLOCK_CODE: "policy",
        CONTENT_FLOOR_CODE: "floor",
    }
)


@dataclass(frozen=True, slots=True)
class Signal:
    """One limit an episode met: the failure kind it was first rejected with; for a block page the
    ``reading`` that settled it (:data:`BLOCK_READINGS`, None for a size reading); for a content block
    the ``candidates`` (parts the last accepted request did not carry) its culprits were among and the
    ``culprits`` its turn kept out (at least 1: each is a block met, module docstring); the
    ``signature`` (:func:`ctxrecover.recovery.failure_signature`) that tells one page or network
    failure from another ("" when unknown: the kind stands for it)."""

    kind: str
    reading: str | None = None
    candidates: int = 0
    signature: str = ""
    culprits: int = 1

    @property
    def key(self) -> tuple[str, str | None]:
        """What a session remembers of this limit: its signature (else kind) and its reading."""
        return (self.signature or self.kind, self.reading)


def fewest_rejected(signal: Signal, *, first_of_kind: bool) -> int:
    """The fewest rejected requests a lawful policy needs for ``signal`` (:data:`ORACLE_RULES`);
    ``first_of_kind``: no earlier limit of the session had the signal's :attr:`Signal.key`."""
    if signal.reading == "content":
        return sum(
            1 + math.ceil(math.log2(max(1, signal.candidates - found)))
            for found in range(max(1, signal.culprits))
        )
    if signal.reading in ("policy", "floor"):
        return 2
    if signal.kind in AMBIGUOUS_KINDS or signal.kind in BLOCK_KINDS:
        return 2 if first_of_kind else 1
    return 1


def oracle_rejections(signals: Iterable[Signal]) -> list[int]:
    """The fewest rejected requests of each limit a session met, in the session's order."""
    seen: set[tuple[str, str | None]] = set()
    fewest = []
    for signal in signals:
        fewest.append(fewest_rejected(signal, first_of_kind=signal.key not in seen))
        seen.add(signal.key)
    return fewest


@dataclass(frozen=True, slots=True)
class OracleEpisode:
    """One failure episode of a run: its turn, first failure kind, rejected requests, the limits it met,
    the oracle's fewest for them, and whether the turn delivered an answer afterwards."""

    run_id: str
    turn: int
    first_failure_kind: str
    rejected: int
    signals: tuple[Signal, ...]
    oracle: int
    recovered: bool


def content_candidates(result: ReplayResult, turn: int) -> int:
    """The parts (texts and tool-call arguments, :func:`ctxrecover.passes.withhold.parts_of`, system
    messages aside) of the messages new since the last accepted request before 0-based ``turn``: the
    turn's inputs and the previous turn's reply with its followers — SPEC §12's first tier of culprit
    candidates, the units the library's search withholds."""
    turns, _ = split_turns(result.replayed.messages)
    fresh = list(turns[turn].inputs)
    if turn > 0:
        fresh = [turns[turn - 1].reply, *turns[turn - 1].followers, *fresh]
    return len(parts_of(fresh, range(len(fresh))))


def culprits_kept_out(result: ReplayResult, turn: int) -> int:
    """The parts found and kept out in 0-based ``turn``: withheld by the session's search (its notices;
    content withheld before sending, as identical to what was refused before, was found no block), or
    set aside by the replay after the session gave up (its blocked-request budget spent)."""
    found = CONTENT_WITHHELD_NOTICE.split("%s", 1)[0]
    withheld = sum(
        isinstance(e.item, Notice)
        and e.item.code == CONTENT_WITHHELD_CODE
        and e.item.message.startswith(found)
        and e.turn == turn
        for e in result.events
    )
    return withheld + sum(block.turn == turn for block in result.content_blocks)


def _spans(records: Iterable[AttemptRecord]) -> list[list[AttemptRecord]]:
    """Each episode's attempts, from its first rejected request to the attempt that ends it (if any):
    the split of :func:`simulator.research.metrics.episodes`, on records."""
    spans: list[list[AttemptRecord]] = []
    current: list[AttemptRecord] | None = None
    for record in records:
        if current is not None and record.turn != current[0].turn:
            spans.append(current)  # the turn ended mid-episode
            current = None
        if current is None:
            if not is_rejection(record.outcome):
                continue
            current = []
        current.append(record)
        if not continues_episode(record.outcome):
            spans.append(current)
            current = None
    if current is not None:
        spans.append(current)
    return spans


def _readings(result: ReplayResult) -> dict[tuple[int, int], str]:
    """(turn, attempt) → the block reading of each block notice the run gave."""
    return {
        (event.turn, event.attempt): BLOCK_READINGS[event.item.code]
        for event in result.events
        if isinstance(event.item, Notice) and event.item.code in BLOCK_READINGS
    }


def _block_candidates(result: ReplayResult, span: Sequence[AttemptRecord], kind: str, signature: str) -> int:
    """The candidates of an episode's content block: the parts of the first request refused with its
    page that the last accepted request did not carry as they are (the recorder's count: new messages,
    and what the library rewrote since — a summary, a preview); the transcript's new messages
    (:func:`content_candidates`) when the replay recorded no count."""
    for record in span:
        key = (record.turn, record.attempt)
        if (
            record.failure_kind == kind
            and result.signatures.get(key) == signature
            and key in result.fresh_parts
        ):
            return result.fresh_parts[key]
    return content_candidates(result, span[0].turn)


def _signals(result: ReplayResult, span: Sequence[AttemptRecord], readings: Sequence[str]) -> list[Signal]:
    """The limits of one episode: each failure signature in order of first appearance (repeats are the
    same limit met again), a block page taking the reading its notices gave (size without one)."""
    found: dict[tuple[str, str], None] = {}
    for record in span:
        if is_rejection(record.outcome):
            kind = str(record.failure_kind or record.outcome.removeprefix(REJECTED_PREFIX))
            found[(kind, result.signatures.get((record.turn, record.attempt), ""))] = None
    reading = next((r for r in ("policy", "floor", "content") if r in readings), None)
    signals = []
    for kind, signature in found:
        if kind in BLOCK_KINDS and reading is not None:
            if reading == "content":
                candidates = _block_candidates(result, span, kind, signature)
                culprits = culprits_kept_out(result, span[0].turn)
                signals.append(Signal(kind, reading, candidates, signature, culprits))
            else:
                signals.append(Signal(kind, reading, signature=signature))
        else:
            signals.append(Signal(kind, signature=signature))
    return signals


def oracle_episodes(result: ReplayResult) -> list[OracleEpisode]:
    """Every failure episode of ``result`` with the oracle's fewest rejected requests (module docstring)."""
    readings = _readings(result)
    episodes = []
    for span in _spans(result.records):
        notes = [readings[(r.turn, r.attempt)] for r in span if (r.turn, r.attempt) in readings]
        episodes.append((span, _signals(result, span, notes)))
    fewest = iter(oracle_rejections(signal for _, signals in episodes for signal in signals))
    found = []
    for span, signals in episodes:
        last = span[-1].outcome
        found.append(
            OracleEpisode(
                run_id=result.run_id,
                turn=span[0].turn,
                first_failure_kind=signals[0].kind,
                rejected=sum(is_rejection(r.outcome) for r in span),
                signals=tuple(signals),
                oracle=sum(next(fewest) for _ in signals),
                recovered=not continues_episode(last) and not is_rejection(last),
            )
        )
    return found


def versus_oracle(results: Mapping[str, ReplayResult]) -> dict[str, Any]:
    """Rejected requests against the oracle over every episode of ``results`` (by scenario name):
    ``ratio`` = Σ rejected ÷ Σ oracle (P5), ``mean_rejected`` per episode, a breakdown by first failure
    kind, and the episodes that cost more than the oracle."""
    found = [(name, episode) for name, result in results.items() for episode in oracle_episodes(result)]
    rejected = sum(episode.rejected for _, episode in found)
    oracle = sum(episode.oracle for _, episode in found)
    by_kind: dict[str, dict[str, int]] = {}
    for _, episode in found:
        kind = by_kind.setdefault(episode.first_failure_kind, {"episodes": 0, "rejected": 0, "oracle": 0})
        kind["episodes"] += 1
        kind["rejected"] += episode.rejected
        kind["oracle"] += episode.oracle
    rows = [
        {
            "scenario": name,
            "turn": episode.turn,
            "kind": episode.first_failure_kind,
            "rejected": episode.rejected,
            "oracle": episode.oracle,
            "limits": [signal.reading or signal.kind for signal in episode.signals],
            "recovered": episode.recovered,
        }
        for name, episode in found
    ]
    return {
        "episodes": len(found),
        "rejected": rejected,
        "oracle": oracle,
        "ratio": rejected / oracle if oracle else None,
        "mean_rejected": rejected / len(found) if found else None,
        "mean_oracle": oracle / len(found) if found else None,
        "recovered_episodes": sum(episode.recovered for _, episode in found),
        "by_kind": {
            kind: {**counts, "ratio": counts["rejected"] / counts["oracle"]}
            for kind, counts in sorted(by_kind.items())
        },
        "over_oracle": [
            row for row, (_, episode) in zip(rows, found, strict=True) if episode.rejected > episode.oracle
        ],
        "rows": rows,
    }
