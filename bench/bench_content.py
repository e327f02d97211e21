"""P9 — blocked requests per content episode against the fewest delta debugging needs, 1 + ⌈log2 n⌉.

A gateway that scores content the CRS way (the ``anomaly-waf`` fault: OWASP CRS 3.3 anomaly scoring,
:mod:`simulator.proxy.anomaly`) refuses a request for what it says, at any size. The library tells
that from size and policy by experiments and then finds the culprit among the parts new since the
last accepted request by delta debugging (SPEC §12); one culprit among ``n`` candidates needs at
least ``1 + ⌈log2 n⌉`` blocked requests (the block, then one halving per bit) — the oracle of
:mod:`simulator.research.oracle`.

Every bundled scenario with an ``anomaly-waf`` fault (``crs-agent-content-withheld``,
``crs-system-prompt-blocked``) is replayed in process on its own workload and on each format
fixture (``fixtures/transcripts/formats``: real-world-shaped transcripts whose own content trips
CRS now and then). The synthetic transcripts are left out: their generated system prompt trips rule
933160 (``file (``), so each ends at its first turn on the content floor, with no content episode
(what ``crs-system-prompt-blocked`` shows on its own workload).

For each **content episode** (:func:`simulator.research.oracle.oracle_episodes` whose every limit
was settled as content) it reports blocked requests ÷ the oracle: the mean and the maximum over
all episodes (target: ≤ 1 for each), the episodes over it, and the chars lost (the exact loss
ledger: 0). Each episode also counts its **culprits** — the parts kept out in its turn (withheld by
the session, or set aside by the replay once the session's blocked-request budget was spent): each
culprit after the first is met as a new block, the resend without those found so far refused again,
so the oracle sums 1 + ⌈log2 (n − j)⌉ over them (j from 0). Episodes where a
content block met another limit on the way (a 413 first, say) are counted apart. Run it with
``python bench/bench_content.py`` (``--quick``: the fast cases only); ``run()`` returns the measures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from simulator.proxy.faults import AnomalyWaf
from simulator.proxy.scenario import list_scenarios, load_scenario
from simulator.replay import ReplayResult, replay
from simulator.research.oracle import culprits_kept_out, oracle_episodes
from simulator.workloads import FORMAT_FIXTURES_DIR, TRANSCRIPT_SUFFIXES

TARGET_RATIO = 1.0
OWN_WORKLOAD = "own workload"
# The cases --quick keeps: each scenario's own workload and two format fixtures that replay fast.
QUICK_TRANSCRIPTS = ("anthropic-messages-hero-image", "claude-code-tidy-dry-run")


def anomaly_scenarios() -> list[str]:
    """The bundled scenarios whose gateway scores content (an ``anomaly-waf`` fault)."""
    return [
        name
        for name in list_scenarios()
        if any(isinstance(f, AnomalyWaf) for f in load_scenario(name).faults)
    ]


def format_fixtures() -> list[str]:
    """The bundled format fixtures, by name."""
    return sorted(
        p.stem for p in FORMAT_FIXTURES_DIR.iterdir() if p.is_file() and p.suffix in TRANSCRIPT_SUFFIXES
    )


def _episode_row(scenario: str, transcript: str, result: ReplayResult, episode: Any) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "transcript": transcript,
        "turn": episode.turn,
        "candidates": [s.candidates for s in episode.signals],
        "limits": [s.reading or s.kind for s in episode.signals],
        "culprits": culprits_kept_out(result, episode.turn),
        "blocked": episode.rejected,
        "oracle": episode.oracle,
        "ratio": episode.rejected / episode.oracle,
        "recovered": episode.recovered,
    }


def run(
    *, scenarios: Sequence[str] | None = None, transcripts: Sequence[str] | None = None
) -> dict[str, Any]:
    """Replay each scenario on its own workload and on each transcript; every content episode's ratio."""
    names = list(scenarios or anomaly_scenarios())
    fixtures = list(format_fixtures() if transcripts is None else transcripts)
    runs: list[dict[str, Any]] = []
    episodes: list[dict[str, Any]] = []
    mixed: list[dict[str, Any]] = []
    for name in names:
        scenario = load_scenario(name)
        own = scenario.workload.transcript
        for transcript in [None, *(t for t in fixtures if t != own)]:
            label = transcript or OWN_WORKLOAD
            result = replay(transcript, scenario)
            runs.append(
                {
                    "scenario": name,
                    "transcript": result.transcript.name if transcript is None else transcript,
                    "outcome": result.outcome,
                    "turns": result.turns,
                    "turns_completed": result.turns_completed,
                    "chars_lost": result.chars_lost,
                }
            )
            for episode in oracle_episodes(result):
                readings = {signal.reading for signal in episode.signals}
                if "content" not in readings:
                    continue
                (episodes if readings == {"content"} else mixed).append(
                    _episode_row(name, label, result, episode)
                )
    ratios = [e["ratio"] for e in episodes]
    worst = max(ratios, default=None)
    return {
        "benchmark": (
            "P9 blocked requests per content episode ÷ (1 + ⌈log2 n⌉) per block met, anomaly-scored WAF"
        ),
        "scenarios": names,
        "transcripts": fixtures,
        "runs": runs,
        "episodes": episodes,
        "mixed_episodes": mixed,
        "mean": statistics.fmean(ratios) if ratios else None,
        "max": worst,
        "blocked": sum(e["blocked"] for e in episodes),
        "oracle": sum(e["oracle"] for e in episodes),
        "over": [e for e in episodes if e["ratio"] > TARGET_RATIO],
        "chars_lost": sum(r["chars_lost"] for r in runs),
        "target": TARGET_RATIO,
        "passed": worst is not None and worst <= TARGET_RATIO,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="own workloads and two fast format fixtures")
    args = parser.parse_args(argv)
    result = run(transcripts=QUICK_TRANSCRIPTS if args.quick else None)
    print(f"P9 — {len(result['episodes'])} content episodes over {len(result['runs'])} replays")
    print(
        f"{'scenario':<30}{'transcript':<34}{'turn':>5}{'n':>4}{'culprits':>9}{'blocked':>8}{'oracle':>7}"
        f"{'ratio':>7}"
    )
    for e in result["episodes"]:
        print(
            f"{e['scenario']:<30}{e['transcript']:<34}{e['turn']:>5}{'+'.join(map(str, e['candidates'])):>4}"
            f"{e['culprits']:>9}{e['blocked']:>8}{e['oracle']:>7}{e['ratio']:>7.2f}"
        )
    if result["max"] is None:
        print("no content episode")
        return 1
    print(
        f"mean {result['mean']:.2f}, max {result['max']:.2f} (target ≤ {TARGET_RATIO:g} each); "
        f"{len(result['mixed_episodes'])} mixed episodes apart; {result['chars_lost']} chars lost — "
        f"{'PASS' if result['passed'] else 'FAIL'}"
    )
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
