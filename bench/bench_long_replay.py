"""P7 — per-turn time of a long, compaction-heavy replay: flat from turn 100 to turn 2,000.

A seeded synthetic agent session (tool calls, file reads, ``@recall`` results, hook
feedback; :func:`simulator.transcripts.generator.generate_session`) of about 2,000
replayed turns goes through :func:`simulator.replay.replay` under a fault-free OpenAI
chat scenario whose policy window is 8,000 tokens, so planned compaction runs every two
or three turns and the archive grows all along (summaries over summaries, truncation
notices over truncation notices). The replay's recorder probes ``chars_lost`` after
every compaction with the incremental loss ledger (:mod:`simulator.research.ledger`).

The time of a turn is the process CPU time from the end of the previous turn's last
attempt to the end of this turn's last attempt (feeding, the library's prologue and
compaction, the recorder's probe, the in-process HTTP round trip to the mock
provider); CPU time rather than wall time, so other jobs on a shared machine do not
show up as turn time. Side by side in one run: the mean over turns 50–149 ("turn
100") and over the last 100 turns ("turn 2,000"), the median of :data:`REPEATS`
replays each. Target: late ÷ early ≤ 1.5.

Run it with ``python bench/bench_long_replay.py``; ``run()`` returns the measures.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from simulator.proxy.scenario import Scenario, scenario_from_document
from simulator.replay import ReplayEvent, replay
from simulator.research.metrics import AttemptRecord
from simulator.transcripts.generator import generate_session
from simulator.transcripts.loaders import Transcript

SESSION_TURNS = 660  # generator turns: about 2,050 replayed turns (each tool step is a turn)
QUICK_SESSION_TURNS = 200  # about 600 replayed turns
SESSION_OPTIONS: dict[str, Any] = {"big_read_chars": 4000}  # file reads of ~4 KB
SEED = 0
EARLY_WINDOW = (50, 150)  # turns 50..149: "turn 100"
WINDOW = 100  # the last 100 turns: "turn 2,000"
REPEATS = 3
TARGET_RATIO = 1.5
SCENARIO: dict[str, Any] = {
    "description": "No fault; a small policy window so planned compaction runs every few turns (P7).",
    "provider": {"format": "openai-chat", "model": "gpt-4o"},
    "policy": {"context_window": 8000},
    "expect": {"outcome": "ok"},
}


def long_session(turns: int = SESSION_TURNS) -> Transcript:
    """The seeded agent session replayed by this benchmark."""
    return generate_session(seed=SEED, turns=turns, name=f"long-agent-t{turns}", **SESSION_OPTIONS)


def compaction_heavy_scenario() -> Scenario:
    """The fault-free scenario with a small window."""
    return scenario_from_document(SCENARIO, name="bench-long-replay")


def turn_times(transcript: Transcript, scenario: Scenario) -> dict[str, Any]:
    """One replay: the CPU time of each turn (ms), and what the run did."""
    ends: dict[int, float] = {}

    def on_event(event: ReplayEvent) -> None:
        if isinstance(event.item, AttemptRecord):
            ends[event.turn] = time.process_time()

    started = time.process_time()
    result = replay(transcript, scenario, on_event=on_event)
    previous, times = started, []
    for turn in sorted(ends):
        times.append((ends[turn] - previous) * 1e3)
        previous = ends[turn]
    return {
        "times_ms": times,
        "turns": result.turns,
        "outcome": result.outcome,
        "compactions": result.stats.compactions,
        "archive_entries": len(result.archive),
        "chars_lost": result.chars_lost,
    }


def run(
    *, quick: bool = False, session_turns: int | None = None, repeats: int | None = None
) -> dict[str, Any]:
    """Replay the long session ``repeats`` times; early and late per-turn means and their ratio."""
    transcript = long_session(session_turns or (QUICK_SESSION_TURNS if quick else SESSION_TURNS))
    scenario = compaction_heavy_scenario()
    runs = [turn_times(transcript, scenario) for _ in range(repeats or (1 if quick else REPEATS))]
    first = runs[0]
    early_lo, early_hi = EARLY_WINDOW
    if first["turns"] <= early_hi:
        raise ValueError(f"the replay has {first['turns']} turns; the late window starts after {early_hi}")
    late_lo = max(early_hi, first["turns"] - WINDOW)
    early = statistics.median(statistics.fmean(r["times_ms"][early_lo:early_hi]) for r in runs)
    late = statistics.median(statistics.fmean(r["times_ms"][late_lo:]) for r in runs)
    ratio = late / early
    return {
        "turns": first["turns"],
        "compactions": first["compactions"],
        "archive_entries": first["archive_entries"],
        "outcome": first["outcome"],
        "chars_lost": first["chars_lost"],
        "early_window": [early_lo, early_hi],
        "late_window": [late_lo, first["turns"]],
        "early_ms": early,
        "late_ms": late,
        "ratio": ratio,
        "total_s": statistics.median(sum(r["times_ms"]) / 1e3 for r in runs),
        "repeats": len(runs),
        "target_ratio": TARGET_RATIO,
        "passed": ratio <= TARGET_RATIO,
    }


def main() -> int:
    result = run(quick="--quick" in sys.argv[1:])
    print(
        f"P7 long replay: {result['turns']} turns, {result['compactions']} compactions, "
        f"{result['archive_entries']} archive entries, outcome {result['outcome']}, "
        f"{result['chars_lost']} chars lost"
    )
    print(
        f"  per turn: {result['early_ms']:.2f} ms at turns {result['early_window']} vs "
        f"{result['late_ms']:.2f} ms at turns {result['late_window']} → ratio {result['ratio']:.2f} "
        f"(target ≤ {TARGET_RATIO}) — {'met' if result['passed'] else 'missed'}"
    )
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
