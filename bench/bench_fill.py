"""P10 — how much of the learned cap the retry after a size rejection carries (SPEC §12, fill the cap).

After a size rejection the retry aims at the learned cap, not at a fraction of it: at least 75 % of
it when the history holds that much. Every bundled scenario is replayed in process on its own
workload; for each rejected request read as size (a body-size kind, the cap learned or lowered by
it) the accepted retry of the same turn is found (experiments skipped) and its request bytes are
divided by the learned cap it was sent under. A retry whose history held less than 75 % of that cap
before the rejection is counted apart (it cannot fill it). Reported: the minimum and the mean fill
over every retry (target: minimum ≥ 0.75), the retries under it, and the chars lost (0).

Run it with ``python bench/bench_fill.py``; ``run()`` returns the measures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from simulator.proxy.scenario import list_scenarios, load_scenario
from simulator.replay import replay
from simulator.research.metrics import AttemptRecord

TARGET_FILL = 0.75
#: The failure kinds a body-size limit shows as (what a size rejection is read from).
SIZE_KINDS = frozenset({"payload_too_large", "waf_rejection", "suspected_payload", "transient_network"})


def size_retries(records: Sequence[AttemptRecord]) -> list[tuple[AttemptRecord, AttemptRecord]]:
    """Each rejected request of a body-size kind, with the accepted retry of its turn under a learned cap."""
    pairs: list[tuple[AttemptRecord, AttemptRecord]] = []
    for i, rejected in enumerate(records):
        if not rejected.outcome.startswith("rejected") or rejected.failure_kind not in SIZE_KINDS:
            continue
        for later in records[i + 1 :]:
            if later.turn != rejected.turn:
                break
            if later.outcome.startswith("experiment"):
                continue
            if later.outcome.startswith("recovered") and later.learned_cap:
                pairs.append((rejected, later))
            break
    return pairs


def run(*, scenarios: Sequence[str] | None = None) -> dict[str, Any]:
    """Replay each scenario on its own workload; the fill of every retry after a size rejection."""
    names = list(scenarios or list_scenarios())
    retries: list[dict[str, Any]] = []
    short: list[dict[str, Any]] = []
    lost = 0
    for name in names:
        result = replay(None, load_scenario(name))
        lost += result.chars_lost
        for rejected, retry in size_retries(result.records):
            cap = retry.learned_cap
            assert cap is not None  # size_retries keeps only retries under a learned cap
            row = {
                "scenario": name,
                "turn": retry.turn,
                "rejected_bytes": rejected.request_bytes,
                "retry_bytes": retry.request_bytes,
                "learned_cap": cap,
                "fill": retry.request_bytes / cap,
            }
            (retries if rejected.request_bytes >= TARGET_FILL * cap else short).append(row)
    fills = [r["fill"] for r in retries]
    worst = min(fills, default=None)
    return {
        "benchmark": "P10 retry bytes ÷ learned cap after a size rejection",
        "scenarios": names,
        "retries": retries,
        "short_histories": short,
        "min": worst,
        "mean": statistics.fmean(fills) if fills else None,
        "under": [r for r in retries if r["fill"] < TARGET_FILL],
        "chars_lost": lost,
        "target": TARGET_FILL,
        "passed": worst is not None and worst >= TARGET_FILL and lost == 0,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append", help="a bundled scenario (repeatable; default: all)")
    args = parser.parse_args(argv)
    result = run(scenarios=args.scenario)
    print(f"P10 — {len(result['retries'])} retries after a size rejection")
    print(f"{'scenario':<42}{'turn':>5}{'rejected':>10}{'retry':>10}{'cap':>10}{'fill':>6}")
    for r in result["retries"]:
        print(
            f"{r['scenario']:<42}{r['turn']:>5}{r['rejected_bytes']:>10,}{r['retry_bytes']:>10,}"
            f"{r['learned_cap']:>10,}{r['fill']:>6.2f}"
        )
    if result["min"] is None:
        print("no retry after a size rejection")
        return 1
    print(
        f"min {result['min']:.2f}, mean {result['mean']:.2f} (target min ≥ {TARGET_FILL:g}); "
        f"{len(result['short_histories'])} retries of histories under the target apart; "
        f"{result['chars_lost']} chars lost — {'PASS' if result['passed'] else 'FAIL'}"
    )
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
