"""P5 and P6 — recovery efficiency and summarizer cost on the bundled scenario matrix.

Every bundled scenario (``fixtures/scenarios``) is replayed in process with its own
workload under three policies: the default (the ¾ rule learns the payload cap), the
``cap-bisection`` baseline (the cap is bisected between the largest accepted and the
smallest rejected size) and the ``summarize-everything`` baseline (OpenHands'
summarizing condenser: the whole history but the last two messages becomes one LLM
summary, nothing archived).

- **P5** — rejected requests against the oracle (:mod:`simulator.research.oracle`): for each
  failure episode the fewest rejected requests any policy obeying SPEC §§6, 11 and 12 could need
  (1 for an unambiguous signal, 2 for a session's first ambiguous network failure and 1 for later
  ones, 1 + ⌈log2 n⌉ for each content block among the n parts not accepted before), over *every*
  episode kind — 413, WAF 403, content blocks, suspected-payload EOF/resets, 503s masking a 413,
  431s, tight caps, context overflows, rate limits — for the ¾ rule and bisection side by side:
  Σ rejected ÷ Σ oracle (target ≤ 1.05 for the default), with the absolute mean per episode beside
  it, a breakdown by first failure kind and the episodes that cost more than the oracle.
- **P6** — summarizer USD per 100 completed turns, default ÷ summarize-everything,
  over the scenarios where both policies end the same way (equal recovery success).
  Target ≤ 0.5. Beside the cost: summarizer calls, chars lost, fact survival (planted
  facts in the final history or recallable from it) and facts in context (in the final
  history itself, what the model sees without a recall), and the same figures for each
  ``Policy.summary_scope`` side by side (``segment`` is the seed's rule).

Deterministic (mock providers and summarizers, fixed seeds). Run it with
``python bench/bench_recovery.py``; ``run()`` returns the measures.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from ctxrecover.policy import DEFAULT_POLICY, SUMMARY_SCOPES, Policy
from simulator.proxy.scenario import list_scenarios, load_scenario
from simulator.replay import ReplayResult, replay
from simulator.research.baselines import BASELINES
from simulator.research.metrics import episodes
from simulator.research.oracle import versus_oracle
from simulator.research.retention import fact_survival

POLICIES = {  # key → baseline name (None: the default policy)
    "three_quarters": None,
    "bisection": "cap-bisection",
    "summarize_everything": "summarize-everything",
}
EPISODE_COLUMNS = ["first_failure_kind", "rejected_requests", "recovered"]
TARGET_VERSUS_ORACLE = 1.05
TARGET_COST_RATIO = 0.5
TURNS_PER_UNIT = 100


def replay_matrix(
    scenarios: Sequence[str], policy: str | None, *, base: Policy = DEFAULT_POLICY
) -> dict[str, ReplayResult]:
    """One in-process replay per scenario under ``base`` (the default policy) or a named baseline."""
    strategy = BASELINES[policy] if policy else None
    return {name: replay(None, load_scenario(name), policy=base, strategy=strategy) for name in scenarios}


def episode_rows(results: dict[str, ReplayResult]) -> list[dict[str, Any]]:
    """Every failure episode of a matrix, whatever its kind: scenario, kind, rejected requests, recovered."""
    rows = []
    for name, result in results.items():
        frame = episodes(result.frame)
        for kind, rejected, recovered in frame[EPISODE_COLUMNS].itertuples(index=False):
            rows.append(
                {"scenario": name, "kind": str(kind), "rejected": int(rejected), "recovered": bool(recovered)}
            )
    return rows


def _mean(values: list[int]) -> float | None:
    return statistics.fmean(values) if values else None


def efficiency(results: dict[str, ReplayResult]) -> dict[str, Any]:
    """P5 numbers for one policy: rejected requests against the oracle (``oracle``:
    :func:`simulator.research.oracle.versus_oracle`), and per failure episode of
    :func:`simulator.research.metrics.episodes` with a breakdown by kind."""
    rows = episode_rows(results)
    by_kind: dict[str, list[int]] = {}
    for row in rows:
        by_kind.setdefault(row["kind"], []).append(row["rejected"])
    rejected = sum(r["rejected"] for r in rows)
    return {
        "oracle": versus_oracle(results),
        "episodes": len(rows),
        "rejected": rejected,
        "rejected_per_episode": _mean([r["rejected"] for r in rows]),
        "recovered_episodes": sum(r["recovered"] for r in rows),
        "by_kind": {
            kind: {"episodes": len(v), "rejected_per_episode": statistics.fmean(v)}
            for kind, v in sorted(by_kind.items())
        },
        "over_one": [r for r in rows if r["rejected"] > 1],
        "rows": rows,
    }


def summarizer_cost(results: dict[str, ReplayResult], scenarios: Sequence[str]) -> dict[str, Any]:
    """Summarizer USD, calls and completed turns over ``scenarios``, and USD per 100 turns."""
    cost = sum(results[name].stats.summarizer_cost_usd for name in scenarios)
    turns = sum(results[name].turns_completed for name in scenarios)
    return {
        "usd": cost,
        "calls": sum(results[name].stats.summarizer_calls for name in scenarios),
        "turns": turns,
        "usd_per_100_turns": cost / turns * TURNS_PER_UNIT if turns else 0.0,
        "chars_lost": sum(results[name].chars_lost for name in scenarios),
        **_facts(results[name] for name in scenarios),
        "by_scenario": {name: results[name].stats.summarizer_cost_usd for name in scenarios},
        # what each scenario's first summarization cost (the summarizer USD spent before the first
        # attempt that spent any): a policy that summarizes at all pays at least this once
        "first_summary_by_scenario": {name: _first_summary_usd(results[name]) for name in scenarios},
    }


def _first_summary_usd(result: ReplayResult) -> float:
    return next((r.summarizer_cost_usd for r in result.records if r.summarizer_cost_usd), 0.0)


def _facts(results: Iterable[ReplayResult]) -> dict[str, Any]:
    """Planted facts, the share that survives (in the final history or recallable from it) and the
    share still in context (in the final history itself)."""
    total = survived = in_context = 0
    for result in results:
        facts = result.replayed.facts
        total += len(facts)
        survived += round(result.fact_survival * len(facts))
        in_context += round(fact_survival(facts, result.final_history, None) * len(facts))
    return {
        "facts": total,
        "fact_survival": survived / total if total else 1.0,
        "facts_in_context": in_context / total if total else 1.0,
    }


def run(*, scenarios: Sequence[str] | None = None) -> dict[str, Any]:
    """Replay the matrix under the three policies; P5 and P6 numbers."""
    names = list(scenarios or list_scenarios())
    matrix = {key: replay_matrix(names, policy) for key, policy in POLICIES.items()}
    default, bisection, peer = (matrix[key] for key in POLICIES)
    equal = [n for n in names if default[n].outcome == peer[n].outcome == bisection[n].outcome]
    p6_default, p6_bisection, p6_peer = (summarizer_cost(m, equal) for m in (default, bisection, peer))

    def ratio_to_peer(cost: dict[str, Any]) -> float | None:
        return cost["usd_per_100_turns"] / p6_peer["usd_per_100_turns"] if p6_peer["usd"] else None

    ratio = ratio_to_peer(p6_default)
    scopes = {
        scope: p6_default
        if scope == DEFAULT_POLICY.summary_scope
        else summarizer_cost(
            replay_matrix(equal, None, base=DEFAULT_POLICY.replace(summary_scope=scope)), equal
        )
        for scope in SUMMARY_SCOPES
    }
    p5 = {key: efficiency(matrix[key]) for key in ("three_quarters", "bisection")}
    ratio_p5 = p5["three_quarters"]["oracle"]["ratio"]
    p5_ok = ratio_p5 is not None and ratio_p5 <= TARGET_VERSUS_ORACLE
    return {
        "benchmark": "P5/P6 recovery efficiency and summarizer cost",
        "scenarios": names,
        "outcomes": {key: {name: r.outcome for name, r in rs.items()} for key, rs in matrix.items()},
        "P5": {**p5, "target": TARGET_VERSUS_ORACLE, "passed": p5_ok},
        "P6": {
            "equal_outcome_scenarios": equal,
            "default": p6_default,
            "bisection": p6_bisection,
            "summarize_everything": p6_peer,
            "ratio": ratio,
            "ratio_bisection": ratio_to_peer(p6_bisection),
            "summary_scope": DEFAULT_POLICY.summary_scope,
            "by_summary_scope": {scope: {**m, "ratio": ratio_to_peer(m)} for scope, m in scopes.items()},
            "target": TARGET_COST_RATIO,
            "passed": ratio is not None and ratio <= TARGET_COST_RATIO,
        },
    }


def main() -> int:
    result = run()
    p5, p6 = result["P5"], result["P6"]
    print(f"P5 — rejected requests against the oracle, every kind ({len(result['scenarios'])} scenarios)")
    print(f"{'cap learning':<16}{'episodes':>9}{'rejected':>9}{'oracle':>8}{'ratio':>7}{'rejected/ep':>13}")
    for key, label in (("three_quarters", "¾ rule"), ("bisection", "bisection")):
        m = p5[key]["oracle"]
        print(
            f"{label:<16}{m['episodes']:>9}{m['rejected']:>9}{m['oracle']:>8}{m['ratio']:>7.2f}"
            f"{m['mean_rejected']:>13.2f}"
        )
        for kind, k in m["by_kind"].items():
            print(f"  {kind:<22}{k['episodes']:>4} episodes {k['rejected']} rejected, oracle {k['oracle']}")
        for row in m["over_oracle"]:
            print(
                f"  over: {row['scenario']} turn {row['turn']}: {row['rejected']} rejected, "
                f"oracle {row['oracle']}"
            )
    print(f"target ≤ {p5['target']} (¾ rule) — {'PASS' if p5['passed'] else 'FAIL'}")
    equal = len(p6["equal_outcome_scenarios"])
    print(f"\nP6 — summarizer USD per {TURNS_PER_UNIT} turns on {equal} scenarios with equal outcomes")
    print(f"{'scenario':<28}{'default $':>11}{'bisection $':>13}{'summ.-all $':>13}")
    for name in p6["equal_outcome_scenarios"]:
        print(
            f"{name:<28}"
            + "".join(
                f"{p6[key]['by_scenario'][name]:>{width}.5f}"
                for key, width in (("default", 11), ("bisection", 13), ("summarize_everything", 13))
            )
        )
    for key in ("default", "bisection", "summarize_everything"):
        m = p6[key]
        print(
            f"{key:<22} {m['calls']:>3} calls, {m['turns']} turns, ${m['usd_per_100_turns']:.5f} per "
            f"{TURNS_PER_UNIT} turns, {m['chars_lost']:,} chars lost, facts {m['fact_survival']:.3f} "
            f"survive / {m['facts_in_context']:.3f} in context (of {m['facts']})"
        )
    print(f"\nsummary_scope side by side (default: {p6['summary_scope']})")
    print(
        f"{'scope':<14}{'calls':>6}{'$/100 turns':>13}{'ratio':>7}{'facts':>7}{'in context':>12}{'lost':>6}"
    )
    for scope, m in p6["by_summary_scope"].items():
        print(
            f"{scope:<14}{m['calls']:>6}{m['usd_per_100_turns']:>13.5f}{m['ratio'] or float('nan'):>7.3f}"
            f"{m['fact_survival']:>7.3f}{m['facts_in_context']:>12.3f}{m['chars_lost']:>6}"
        )
    ratio = "n/a" if p6["ratio"] is None else f"{p6['ratio']:.2f}"
    print(
        f"ratio {ratio} (target ≤ {p6['target']}) — {'PASS' if p6['passed'] else 'FAIL'}; "
        f"with bisection cap learning {p6['ratio_bisection'] or float('nan'):.2f}"
    )
    return 0 if p5["passed"] and p6["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
