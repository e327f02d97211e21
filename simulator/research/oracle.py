"""The oracle of rejected requests: for each failure episode, the fewest rejected requests any policy
obeying SPEC §§6, 11 and 12 could need (issue 24, P5).

A rejected request is how a limit is found: no policy learns a gateway's cap, or that a body is too
large for a context window, without one. What a lawful policy may spend beyond that is fixed by the
SPEC, per limit an episode meets (:data:`ORACLE_RULES`, each with its section):

- **an unambiguous signal** — a 413, a context overflow, a 431, a block page a size experiment
  reads as size, a ``max_tokens`` error, a rate limit: **1** (§6: the rejection teaches the limit,
  the retry fits it; §11: a block above every accepted size settled by the experiment that passes);
- **an ambiguous network failure** — a reset, an EOF, a 502/503/504 without a provider's body
  (``transient_network``): **2** for the first of its kind in a session, which earns one plain
  retry as it was (§2.4, §11), and **1** for later ones, which are payload evidence at once (§11);
- **a content block** among ``n`` candidate parts — the parts new since the last accepted request
  (§12's first tier): **1 + ⌈log2 n⌉**, the blocked requests delta debugging needs for one culprit
  among ``n`` (§12);
- **a policy block**, or **a refused base** (the minimal request or the system prompt alone refused):
  **2** — the block, and the one experiment every lawful policy must send to tell it from size and
  content, refused too (§12).

An *episode* here is a turn's run of rejected requests from its first rejection to the answer it
delivers: the experiments a block search sends (requests with at most ``experiment_max_tokens``,
answered truncated) do not end it, since they are part of settling the one block
(:func:`simulator.research.metrics.episodes` splits at them). An episode meeting several limits in
turn (a real 413, then a content rule on the retry) costs the sum of each limit's fewest. The
matrix test tier holds every run to this oracle; the benchmark reports ``rejected ÷ oracle``.

>>> oracle_rejections([("payload_too_large", False, 0), ("transient_network", False, 0),
...                    ("transient_network", False, 0), ("waf_rejection", True, 5)])
[1, 2, 1, 4]
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
    POLICY_BLOCK_CODE,
)
from simulator.research.metrics import OUTCOME_TRUNCATED, REJECTED_PREFIX, TERMINAL_REJECTIONS, AttemptRecord
from simulator.workloads import split_turns

if TYPE_CHECKING:
    from simulator.replay import ReplayResult

__all__ = [
    "AMBIGUOUS_KINDS",
    "BLOCK_READINGS",
    "ORACLE_RULES",
    "OracleEpisode",
    "Signal",
    "content_candidates",
    "fewest_rejected",
    "oracle_episodes",
    "oracle_rejections",
    "versus_oracle",
]

# The rules of the oracle, each with the SPEC sections it reads (the module docstring explains them).
ORACLE_RULES: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "unambiguous": ("1", "§6 steps 1 and 7, §11 size-consistent blocks, §8/§11 max_tokens"),
        "ambiguous_first": ("2: the rejection and one plain retry", "§2.4, §11 size-correlated failures"),
        "ambiguous_later": ("1: payload evidence at once", "§11 size-correlated failures"),
        "content": ("1 + ⌈log2 n⌉ for one culprit among n new parts", "§12 find the culprit"),
        "policy_or_floor": ("2: the block and the refused minimal request", "§12 three hypotheses"),
    }
)
# Failure kinds of a signal that does not say whether size caused it (SPEC §2.4, §11).
AMBIGUOUS_KINDS: frozenset[str] = frozenset({"transient_network"})
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
    the ``candidates`` (parts new since the last accepted request) its culprit was among."""

    kind: str
    reading: str | None = None
    candidates: int = 0


def fewest_rejected(signal: Signal, *, first_of_kind: bool) -> int:
    """The fewest rejected requests a lawful policy needs for ``signal`` (:data:`ORACLE_RULES`);
    ``first_of_kind``: no episode of the session met this failure kind before."""
    if signal.reading == "content":
        return 1 + math.ceil(math.log2(max(1, signal.candidates)))
    if signal.reading in ("policy", "floor"):
        return 2
    if signal.kind in AMBIGUOUS_KINDS:
        return 2 if first_of_kind else 1
    return 1


def oracle_rejections(episode_kinds: Iterable[tuple[str, bool, int]]) -> list[int]:
    """The fewest rejected requests of each episode of a session, for ``(first failure kind, content
    block, candidates)`` per episode in the session's order (one limit per episode)."""
    seen: set[str] = set()
    fewest = []
    for kind, content_block, candidates in episode_kinds:
        signal = Signal(kind, "content" if content_block else None, candidates)
        fewest.append(fewest_rejected(signal, first_of_kind=kind not in seen))
        seen.add(kind)
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
    """The parts (texts and tool-call arguments, :func:`ctxrecover.passes.withhold.parts_of`) of the
    messages new since the last accepted request before 0-based ``turn``: the turn's inputs and the
    previous turn's reply with its followers — SPEC §12's first tier of culprit candidates."""
    turns, _ = split_turns(result.replayed.messages)
    fresh = list(turns[turn].inputs)
    if turn > 0:
        fresh = [turns[turn - 1].reply, *turns[turn - 1].followers, *fresh]
    return len(parts_of(fresh, range(len(fresh))))


def _is_rejection(record: AttemptRecord) -> bool:
    return record.outcome.startswith(REJECTED_PREFIX) or record.outcome in TERMINAL_REJECTIONS


def _is_experiment(record: AttemptRecord, limit: int) -> bool:
    """An answered block-search experiment: a request asking at most ``limit`` tokens, cut there."""
    return (
        record.outcome == OUTCOME_TRUNCATED and record.max_tokens is not None and record.max_tokens <= limit
    )


def _readings(result: ReplayResult) -> dict[tuple[int, int], str]:
    """(turn, attempt) → the block reading of each block notice the run gave."""
    return {
        (event.turn, event.attempt): BLOCK_READINGS[event.item.code]
        for event in result.events
        if isinstance(event.item, Notice) and event.item.code in BLOCK_READINGS
    }


def _signals(
    result: ReplayResult, turn: int, rejected: Sequence[AttemptRecord], readings: Sequence[str]
) -> tuple[Signal, ...]:
    """The limits of one episode: each failure kind in order of first appearance (repeats of a kind are
    the same limit met again), a block page taking the reading its notices gave."""
    kinds = list(
        dict.fromkeys(str(r.failure_kind or r.outcome.removeprefix(REJECTED_PREFIX)) for r in rejected)
    )
    reading = next((r for r in ("policy", "floor", "content") if r in readings), None)
    signals = []
    for kind in kinds:
        if kind == "waf_rejection" and reading is not None:
            candidates = content_candidates(result, turn) if reading == "content" else 0
            signals.append(Signal(kind, reading, candidates))
        else:
            signals.append(Signal(kind))
    return tuple(signals)


def oracle_episodes(result: ReplayResult) -> list[OracleEpisode]:
    """Every failure episode of ``result`` with the oracle's fewest rejected requests (module docstring)."""
    limit = result.policy.experiment_max_tokens
    readings = _readings(result)
    seen: set[str] = set()
    found: list[OracleEpisode] = []
    open_turn: int | None = None
    rejected: list[AttemptRecord] = []
    attempts: list[int] = []

    def close(recovered: bool) -> None:
        assert open_turn is not None
        notes = [
            readings[(open_turn, a)]
            for a in range(attempts[0], attempts[-1] + 2)
            if (open_turn, a) in readings
        ]
        signals = _signals(result, open_turn, rejected, notes)
        oracle = 0
        for signal in signals:
            oracle += fewest_rejected(signal, first_of_kind=signal.kind not in seen)
            seen.add(signal.kind)
        first = signals[0].kind if signals else ""
        found.append(
            OracleEpisode(result.run_id, open_turn, first, len(rejected), signals, oracle, recovered)
        )

    for record in result.records:
        if open_turn is not None and record.turn != open_turn:
            close(False)
            open_turn = None
        if _is_rejection(record):
            if open_turn is None:
                open_turn, rejected, attempts = record.turn, [], []
            rejected.append(record)
            attempts.append(record.attempt)
            if record.outcome in TERMINAL_REJECTIONS:
                close(False)
                open_turn = None
        elif open_turn is not None and not _is_experiment(record, limit):
            attempts.append(record.attempt)
            close(True)
            open_turn = None
    if open_turn is not None:
        close(False)
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
