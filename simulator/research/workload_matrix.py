"""The matrix tier: every transcript under every scenario, held to invariants no ``[expect]`` states.

A scenario's ``[expect]`` describes its own workload. Replayed over any other
transcript (:meth:`~simulator.proxy.scenario.Scenario.fitted` moves its planted turns),
a run must still hold what is true whatever the workload (:data:`INVARIANTS`):

- ``nothing_lost``: the exact loss ledger finds every original piece (0 chars lost);
- ``real_floor``: a ``fail_fast_floor`` names a part that is really over the gateway's
  limit — at least the smallest body size at which one of the scenario's faults fires
  (:func:`simulator.recorder.proxy_cap`); a floor below it means compaction could have
  saved the turn;
- ``oracle``: each failure episode costs no more rejected requests than the fewest any
  policy obeying SPEC §§6, 11 and 12 could need (:func:`simulator.research.oracle.oracle_episodes`,
  issue 24 item 4: the benchmark's P5 reads the same oracle).

Its ``[expect]`` rows are checked too, and reported apart: those the scenario marks
``own_workload`` (they only describe its own transcript) are informational on another
transcript; the rest hold on every workload (:func:`expectation_split`).

"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from simulator.recorder import proxy_cap
from simulator.research.metrics import is_rejection
from simulator.research.oracle import oracle_episodes

if TYPE_CHECKING:
    from simulator.replay import ReplayResult

__all__ = [
    "INVARIANTS",
    "MatrixRun",
    "Violation",
    "check_run",
    "expectation_split",
    "matrix_run",
    "run_matrix",
]

# What each invariant holds (the names a Violation carries).
INVARIANTS = MappingProxyType(
    {
        "nothing_lost": "every original piece is in the history or behind a marker it reaches",
        "real_floor": "a fail_fast_floor names a part at least as large as the gateway's real limit",
        "oracle": "no failure episode costs more rejected requests than the fewest a lawful policy needs",
    }
)


@dataclass(frozen=True, slots=True)
class Violation:
    """One invariant a run broke: which (:data:`INVARIANTS`), where, and what was seen."""

    invariant: str
    run_id: str
    detail: str


def _oracle_violations(result: ReplayResult) -> list[Violation]:
    return [
        Violation(
            "oracle",
            result.run_id,
            f"turn {episode.turn}: {episode.rejected} rejected request(s) for a "
            f"{'+'.join(s.reading or s.kind for s in episode.signals)} episode; the oracle needs "
            f"{episode.oracle}",
        )
        for episode in oracle_episodes(result)
        if episode.rejected > episode.oracle
    ]


def _floor_violations(result: ReplayResult) -> list[Violation]:
    floor = result.floor
    if floor is None:
        return []
    limit = proxy_cap(result.scenario)
    if limit is not None and floor.over_bytes >= limit:
        return []
    where = "no body-size fault" if limit is None else f"the gateway's limit is {limit:,} bytes"
    return [
        Violation(
            "real_floor",
            result.run_id,
            f"turn {floor.turn}: the {floor.over} ({floor.over_bytes:,} bytes) was named over the limit; "
            f"{where}",
        )
    ]


def check_run(result: ReplayResult) -> list[Violation]:
    """Every :data:`INVARIANTS` violation of one run (empty when it holds them all)."""
    violations = []
    if result.chars_lost:
        lost = ", ".join(f"{name} {chars:,}" for name, chars in result.losses.nonzero().items())
        violations.append(
            Violation("nothing_lost", result.run_id, f"{result.chars_lost:,} chars lost ({lost})")
        )
    return violations + _floor_violations(result) + _oracle_violations(result)


def expectation_split(result: ReplayResult) -> tuple[list[str], list[str]]:
    """The run's ``[expect]`` problems as ``(general, own_workload)``: rows the scenario marks
    ``own_workload`` describe its own transcript only and are reported apart."""
    from simulator.replay import observed

    expect = result.scenario.expect
    general: list[str] = []
    own: list[str] = []
    for field, problem in expect.field_problems(observed(result)):
        (own if field in expect.own_workload else general).append(problem)
    return general, own


@dataclass(frozen=True, slots=True)
class MatrixRun:
    """One cell of the matrix: its run, its invariant violations and its ``[expect]`` problems apart."""

    transcript: str
    scenario: str
    turns: int
    turns_completed: int
    outcome: str
    rejected_requests: int
    chars_lost: int
    notes: tuple[str, ...]
    violations: tuple[Violation, ...]
    expect_general: tuple[str, ...]
    expect_own_workload: tuple[str, ...]


def matrix_run(result: ReplayResult) -> MatrixRun:
    """One replay as a :class:`MatrixRun`."""
    general, own = expectation_split(result)
    return MatrixRun(
        transcript=result.transcript.name,
        scenario=result.scenario.name,
        turns=result.turns,
        turns_completed=result.turns_completed,
        outcome=result.outcome,
        rejected_requests=sum(is_rejection(r.outcome) for r in result.records),
        chars_lost=result.chars_lost,
        notes=result.notes,
        violations=tuple(check_run(result)),
        expect_general=tuple(general),
        expect_own_workload=tuple(own),
    )


def run_matrix(
    transcripts: Sequence[str],
    scenarios: Sequence[str],
    *,
    replay: Callable[[str, str], ReplayResult] | None = None,
    progress: Callable[[MatrixRun], object] | None = None,
) -> list[MatrixRun]:
    """Every transcript under every scenario (scenario-major), each run condensed by :func:`matrix_run`.

    ``replay(transcript, scenario)`` runs one cell (default: :func:`simulator.replay.replay`);
    ``progress`` sees each cell as it finishes.
    """
    if replay is None:
        from simulator.replay import replay as default_replay

        replay = default_replay
    cells = []
    for scenario in scenarios:
        for transcript in transcripts:
            cell = matrix_run(replay(transcript, scenario))
            cells.append(cell)
            if progress is not None:
                progress(cell)
    return cells
