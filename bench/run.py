"""Run every benchmark: print a table, write ``bench/results.json``, refresh BENCHMARKS.md.

::

    python bench/run.py                  # all benchmarks, full size (several minutes)
    python bench/run.py --quick          # smaller sizes and fewer repeats; prints, writes nothing
    python bench/run.py --only P3,P5     # a subset; prints, writes nothing
    python bench/run.py --profile DIR    # also a pyinstrument profile of each benchmark in DIR

Every measure is a ratio of two things timed (or counted) in the same run, so
results from different machines compare. ``bench/results.json`` holds one key per
measure (``"P1.turn_cost"``, ``"P3.session"``, ``"P8.ratio"``, …) plus ``targets``, ``status``,
``machine`` (platform, CPUs, load average before and after) and ``date``;
BENCHMARKS.md's table between :data:`START_MARKER` and :data:`END_MARKER` is
rewritten, the prose around it kept. Exits 0 once the results are written (missed
targets are reported, not fatal); ``--strict`` exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench_async
import bench_compaction
import bench_content
import bench_fill
import bench_long_replay
import bench_peers
import bench_recovery
import bench_simulator
import bench_sizing
import bench_turn

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_JSON = BENCH_DIR / "results.json"
BENCHMARKS_MD = BENCH_DIR.parent / "BENCHMARKS.md"
START_MARKER = "<!-- results:start -->"
END_MARKER = "<!-- results:end -->"
BENCHMARK_IDS = ("P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10")
QUICK_P2_SCALES_MB = (1, 2, 4)
QUICK_REPEATS = 3
QUICK_TURNS = 15
QUICK_P3_MESSAGES = 500
QUICK_P3_BYTES = 1_250_000
QUICK_P8_SESSIONS = 32
PACKAGES = ("httpx", "langchain-core", "pyinstrument")
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Measure:
    """One row of the table: a ratio, its target and how it was obtained.

    ``data`` replaces ``value`` in results.json when the measure is more than one
    number (P2's curve: the ratio at each size; the table shows its maximum).
    """

    key: str
    label: str
    value: float | None
    target: str
    passed: bool | None
    detail: str
    data: Any = None

    @property
    def status(self) -> str:
        if self.value is None:
            return "skipped"
        return {True: "met", False: "missed", None: "reported"}[self.passed]


# -- one function per benchmark: (raw results, measures) ---------------------------------------------


def _p1(quick: bool) -> tuple[dict[str, Any], list[Measure]]:
    turn = bench_turn.run(turns=QUICK_TURNS) if quick else bench_turn.run()
    loopback = bench_turn.run_loopback(turns=QUICK_TURNS) if quick else bench_turn.run_loopback()
    sizing = bench_sizing.run()
    name, fmt = max(sizing["formats"].items(), key=lambda item: item[1]["ratio"])
    exact = all(f["exact"] for f in sizing["formats"].values())
    turn_detail = (
        f"turn {turn['turn_ms']:.2f} ms (body assembly {turn['render_ms']:.2f}, "
        f"httpx post + reply {turn['post_ms']:.2f}, session passes {turn['session_ms']:.2f}) "
        f"vs json.dumps {turn['dumps_ms']:.1f} ms of the {turn['body_bytes'] / 1e6:.1f} MB body; "
        f"median of {turn['turns_timed']} turns, {turn['compactions']} compactions"
    )
    tracker_detail = (
        f"component only (not a turn): worst of 5 wire formats ({name}), append + check "
        f"{fmt['append_check_ms'] * 1e3:.1f} µs vs json.dumps {fmt['full_dumps_ms']:.1f} ms; "
        f"exact sizes: {exact}"
    )
    loopback_detail = (
        f"turn {loopback['chunks_ms']:.2f} ms posting the body's blocks as chunks vs "
        f"{loopback['joined_ms']:.2f} ms posting it as one joined buffer, to a server in "
        f"another process; median of {loopback['turns_timed']} alternated turns each"
    )
    return {"turn": turn, "loopback": loopback, "tracker": sizing}, [
        Measure(
            "P1.turn_cost",
            "P1 Session.add + complete() through HttpxSender ÷ json.dumps of the body (5 MB, 2,000 msgs)",
            turn["ratio"],
            "≤ 0.05",
            turn["passed"],
            turn_detail,
        ),
        Measure(
            "P1.loopback_chunks_vs_joined",
            "P1 the same turn over loopback TCP, body posted as chunks ÷ as one joined buffer",
            loopback["ratio"],
            "—",
            None,
            loopback_detail,
        ),
        Measure(
            "P1.tracker_component",
            "P1 component: WireSizeTracker append + size check ÷ json.dumps",
            sizing["worst_ratio"],
            "—",
            None,
            tracker_detail,
        ),
    ]


def _p2(quick: bool) -> tuple[dict[str, Any], list[Measure]]:
    bc = bench_compaction
    raw: dict[str, Any]
    if quick:
        scaling = {
            mb: bc.measure(mb * MIB, mb * bc.MESSAGES_PER_MIB, QUICK_REPEATS) for mb in QUICK_P2_SCALES_MB
        }
        raw = {
            "main": bc.measure(bc.TARGET_BYTES, bc.MESSAGES, QUICK_REPEATS),
            "scaling": scaling,
            "target_ratio": bc.TARGET_RATIO,
        }
    else:
        raw = bench_compaction.run()
    main = raw["main"]
    curve = {str(mb): m["ratio"] for mb, m in raw["scaling"].items()}
    per_mb = [m["compact_ms"] / m["weight_mb"] for m in raw["scaling"].values()]
    detail = (
        f"compaction {main['compact_ms']:.1f} ms vs json.dumps {main['dumps_ms']:.1f} ms; "
        f"{min(per_mb):.1f}–{max(per_mb):.1f} ms per MB over {', '.join(curve)} MB"
    )
    curve_text = ", ".join(f"{mb} MB {ratio:.2f}" for mb, ratio in curve.items())
    return raw, [
        Measure(
            "P2.ratio_5mb",
            "P2 planned compaction ÷ json.dumps (5 MB)",
            main["ratio"],
            "≤ 2",
            main["ratio"] <= bc.TARGET_RATIO,
            detail,
        ),
        Measure(
            "P2.curve",
            "P2 the same ratio from 1 to 16 MB (linear: flat ratio; the largest shown)",
            max(curve.values()),
            "≤ 2 at every size",
            max(curve.values()) <= bc.TARGET_RATIO,
            curve_text,
            data=curve,
        ),
    ]


def _p3(quick: bool) -> tuple[dict[str, Any], list[Measure]]:
    quick_size = {"messages": QUICK_P3_MESSAGES, "target_bytes": QUICK_P3_BYTES, "repeats": QUICK_REPEATS}
    raw = bench_peers.run(**(quick_size if quick else {}))
    label = (
        "P3 recovery Level 2 on a history that entered through a Session, given the facts the session "
        "hands ÷ LangChain trim_messages (5 MB → last 10 msgs)"
    )
    if raw.get("skipped"):
        return raw, [Measure("P3.session", label, None, "< 1", None, raw["skipped"])]
    parts = ", ".join(f"{part} {ms:.2f} ms" for part, ms in raw["session_level2_parts_ms"].items())
    session_detail = (
        f"Level 2 {raw['session_level2_ms']:.2f} ms (archives "
        f"{raw['session_level2_archived_chars'] / MIB:.1f} MB, dropped "
        f"{raw['session_level2_dropped_chars'] / MIB:.1f} MB of {raw['session_messages']:,} messages) vs "
        f"trim_messages {raw['langchain_l2_ms']:.2f} ms (drops and loses it); parts timed alone: {parts}"
    )
    archived, lost = raw["level3_archived_chars"] / MIB, raw["langchain_lost_chars"] / MIB
    cold = "cold caches (fresh messages that never entered a Session, keys hashed at cut time)"
    return raw, [
        Measure("P3.session", label, raw["ratio_session"], "< 1", raw["passed_session"], session_detail),
        Measure(
            "P3.session_recomputing",
            "P3 the same Level 2 without the handed facts (each step scans the history) ÷ LangChain",
            raw["ratio_session_recomputing"],
            "—",
            None,
            f"{raw['session_level2_recomputing_ms']:.2f} ms",
        ),
        Measure(
            "P3.session_accounted",
            "P3 the same Level 2 with the session archive counting recovery's writes, as a turn runs it "
            "÷ LangChain",
            raw["ratio_session_accounted"],
            "—",
            None,
            f"{raw['session_level2_accounted_ms']:.2f} ms",
        ),
        Measure(
            "P3.level3_cold",
            f"P3 compaction Level 3 on {cold} ÷ LangChain",
            raw["ratio_langchain"],
            "—",
            None,
            f"L3 {raw['level3_ms']:.1f} ms (archives {archived:.1f} MB) vs trim_messages "
            f"{raw['langchain_ms']:.1f} ms (loses {lost:.1f} MB)",
        ),
        Measure(
            "P3.level3_cold_no_archive",
            "P3 the same cold cut with an archive that stores nothing ÷ LangChain",
            raw["ratio_no_archive"],
            "—",
            None,
            f"{raw['level3_no_archive_ms']:.1f} ms: the cut without storing (member keys are still hashed)",
        ),
        Measure(
            "P3.compactor_cold",
            "P3 HistoryCompactor without summarizer (trim + L3), cold ÷ LangChain",
            raw["ratio_compactor"],
            "—",
            None,
            f"{raw['compactor_ms']:.1f} ms",
        ),
    ]


def _p4(quick: bool) -> tuple[dict[str, Any], list[Measure]]:
    raw = bench_simulator.run(quick=quick)
    replays, sweeps, passed = raw["replay"], raw["sweep"], raw["passed"]
    load = sweeps["load_average_before"]
    total = replays["total_ms"]
    names = ", ".join(replays["transcripts"])
    return raw, [
        Measure(
            "P4.replay_overhead",
            "P4 in-process replay ÷ library alone (Session + in-memory sender)",
            replays["replay_overhead"],
            "≤ 1.5",
            passed["replay_overhead"],
            f"{total['inprocess']:.0f} ms vs {total['library']:.0f} ms over {names}; "
            f"same work: {replays['same_work']}",
        ),
        Measure(
            "P4.replay_overhead_vs_rendering_library",
            "P4 in-process replay ÷ library rendering each request body (HttpxSender.render)",
            replays["replay_overhead_vs_rendering_library"],
            "—",
            None,
            f"{total['inprocess']:.0f} ms vs {total['library_render']:.0f} ms",
        ),
        Measure(
            "P4.loopback_vs_inprocess",
            "P4 loopback TCP replay ÷ in-process replay",
            replays["loopback_vs_inprocess"],
            "≤ 3",
            passed["loopback_vs_inprocess"],
            f"{total['loopback']:.0f} ms vs {total['inprocess']:.0f} ms",
        ),
        Measure(
            "P4.sweep_speedup",
            f"P4 sweep speed-up, {sweeps['workers']} worker processes vs 1",
            sweeps["sweep_speedup"],
            "≥ 1.7",
            passed["sweep_speedup"],
            f"{sweeps['runs']} runs: {sweeps['one_worker_s']:.1f} s vs {sweeps['n_workers_s']:.1f} s "
            f"(best of {sweeps['repeats']}) on {sweeps['cpus']} CPUs, load average up to "
            f"{max(load.values()):.1f}",
        ),
    ]


def _recovery(quick: bool) -> tuple[dict[str, Any], list[Measure]]:
    raw = bench_recovery.run()
    p5, p6 = raw["P5"], raw["P6"]
    measures = []
    for key, label, target in (
        ("three_quarters", "¾ rule", f"≤ {p5['target']}"),
        ("bisection", "bisection", "—"),
    ):
        oracle = p5[key]["oracle"]
        suffix = "" if key == "three_quarters" else ".bisection"
        measures.append(
            Measure(
                f"P5.vs_oracle{suffix}",
                f"P5 rejected requests ÷ the oracle's fewest (SPEC §§6, 11, 12), every episode kind, {label}",
                oracle["ratio"],
                target,
                p5["passed"] if key == "three_quarters" else None,
                _oracle_detail(oracle),
            )
        )
    m = p5["three_quarters"]
    measures.append(
        Measure(
            "P5.rejected_per_episode",
            "P5 rejected requests per failure episode (metrics.episodes), every kind, ¾ rule: "
            "the absolute mean",
            m["rejected_per_episode"],
            "—",
            None,
            _p5_detail(m),
        )
    )
    d, s = p6["default"], p6["summarize_everything"]
    measures.append(
        Measure(
            "P6.ratio",
            "P6 summarizer cost per 100 turns, default ÷ summarize-everything",
            p6["ratio"],
            "≤ 0.5",
            p6["passed"],
            f"${d['usd_per_100_turns']:.4f} ({d['calls']} calls, {d['chars_lost']:,} chars lost, "
            f"facts surviving {d['fact_survival']:.0%}) vs ${s['usd_per_100_turns']:.4f} ({s['calls']} "
            "calls, "
            f"{s['chars_lost']:,} chars lost, facts surviving {s['fact_survival']:.0%}) over "
            f"{len(p6['equal_outcome_scenarios'])} scenarios with equal outcomes",
        )
    )
    first = sum(d["first_summary_by_scenario"].values())
    summarizing = sum(1 for usd in d["first_summary_by_scenario"].values() if usd)
    measures.append(
        Measure(
            "P6.first_summaries",
            "P6 the default's first summarization in each scenario ÷ summarize-everything's whole cost",
            first / s["usd"] if s["usd"] else None,
            "—",
            None,
            f"${first:.4f} for the first summary of {summarizing} scenarios (of ${d['usd']:.4f} in all) vs "
            f"${s['usd']:.4f}: what the default pays even if each scenario summarized only once",
        )
    )
    measures.append(
        Measure(
            "P6.ratio_bisection",
            "P6 the same with bisection cap learning (cap-bisection)",
            p6["ratio_bisection"],
            "—",
            None,
            f"${p6['bisection']['usd_per_100_turns']:.4f} ({p6['bisection']['calls']} calls)",
        )
    )
    return raw, measures


def _oracle_detail(m: dict[str, Any]) -> str:
    kinds = ", ".join(
        f"{kind} {k['rejected']}/{k['oracle']} ({k['episodes']})" for kind, k in m["by_kind"].items()
    )
    over = "; ".join(
        f"{r['scenario']} turn {r['turn']} ({'+'.join(r['limits'])}) {r['rejected']} vs {r['oracle']}"
        for r in m["over_oracle"]
    )
    return (
        f"{m['rejected']} rejected vs oracle {m['oracle']} over {m['episodes']} episodes (mean "
        f"{m['mean_rejected']:.2f} rejected vs {m['mean_oracle']:.2f} per episode), "
        f"{m['recovered_episodes']} recovered; by first failure kind, rejected/oracle (episodes): "
        f"{kinds}; over the oracle: {over or 'none'}"
    )


def _p5_detail(m: dict[str, Any]) -> str:
    kinds = ", ".join(
        f"{kind} {k['rejected_per_episode']:.2f} ({k['episodes']})" for kind, k in m["by_kind"].items()
    )
    over = "; ".join(f"{r['scenario']} ({r['kind']}) {r['rejected']}" for r in m["over_one"]) or "none"
    return (
        f"{m['episodes']} episodes, {m['recovered_episodes']} recovered; by first failure kind "
        f"(episodes): {kinds}; episodes over 1 request: {over}"
    )


def _p7(quick: bool) -> tuple[dict[str, Any], list[Measure]]:
    raw = bench_long_replay.run(quick=quick)
    (early_lo, early_hi), (late_lo, late_hi) = raw["early_window"], raw["late_window"]
    detail = (
        f"{raw['early_ms']:.2f} ms per turn at turns {early_lo}–{early_hi - 1} vs "
        f"{raw['late_ms']:.2f} ms at turns {late_lo}–{late_hi - 1} ({raw['turns']} turns, "
        f"{raw['compactions']} compactions, {raw['archive_entries']} archive entries, "
        f"{raw['chars_lost']} chars lost; median of {raw['repeats']} replays)"
    )
    label = "P7 per-turn time of a compaction-heavy replay, turn 2,000 ÷ turn 100"
    return raw, [Measure("P7.ratio", label, raw["ratio"], "≤ 1.5", raw["passed"], detail)]


def _p8(quick: bool) -> tuple[dict[str, Any], list[Measure]]:
    raw = bench_async.run(sessions=QUICK_P8_SESSIONS, rounds=1) if quick else bench_async.run()
    ours, theirs = raw["sessions_runs"], raw["raw_runs"]
    n, turns = raw["sessions"], raw["turns"]
    fastest, baseline = min(ours, key=lambda r: r["wall_s"]), min(theirs, key=lambda r: r["wall_s"])
    requests = fastest["requests"]
    cpu = f"{fastest['cpu_s'] / requests * 1e3:.2f} vs {baseline['cpu_s'] / requests * 1e3:.2f} ms"
    ratio_detail = (
        f"{fastest['wall_s']:.1f} s vs {baseline['wall_s']:.1f} s for {requests:,} requests "
        f"({fastest['body_bytes'] / 1e6:.0f} MB, {fastest['rejected']} WAF pages, {fastest['compactions']} "
        f"compactions, {fastest['caps_learned']} caps learned); client CPU per request {cpu} (spooling "
        f"the bodies for the baseline {fastest['spool_s']:.1f} s of the sessions'); fastest of "
        f"{raw['rounds']} alternated rounds, each arm in a fresh process; "
        f"same exchanges: {raw['same_exchanges']}"
    )
    worst = max(ours, key=lambda r: r["loop_lag"]["max_ms"])
    lag, steps, gcs = worst["loop_lag"], worst["steps"], worst["gc"]
    raw_lag = max(theirs, key=lambda r: r["loop_lag"]["max_ms"])
    lag_detail = (
        f"p99 {lag['p99_ms']:.1f} ms, median {lag['median_ms']:.1f} ms, {lag['over_threshold']} of "
        f"{lag['wakeups']} wake-ups over 20 ms; longest session stretch {steps['longest_ms']:.1f} ms, "
        f"{steps['longest_without_gc_ms']:.1f} ms without GC pauses, {worst['alone_longest_ms']:.1f} ms "
        f"for one session alone; {gcs['full_collections']} full GC collections up to "
        f"{gcs['longest_full_ms']:.0f} ms ({gcs['total_ms'] / 1e3:.1f} s of GC in all; a full collection "
        f"at rest {worst['full_gc_ms']['before']:.0f} ms before the sessions, "
        f"{worst['full_gc_ms']['after']:.0f} ms with them alive); "
        f"raw httpx: max {raw_lag['loop_lag']['max_ms']:.1f} ms, p99 {raw_lag['loop_lag']['p99_ms']:.1f} ms, "
        f"longest full GC {raw_lag['gc']['longest_full_ms']:.0f} ms"
    )
    rss_detail = (
        f"peak RSS {worst['peak_rss_mb']:.0f} MB vs {worst['rss_before_mb']:.0f} MB before the sessions "
        f"(tool results pre-generated); {worst['gc_tracked_objects'] / n:.0f} GC-tracked objects per session"
    )
    lost_detail = (
        f"{raw['completed_sessions']} of {n * raw['rounds']} sessions completed their {turns} turns, "
        f"{raw['chars_lost']} chars lost (exact loss ledger over history + archive), "
        f"{len(raw['failures'])} failures"
    )
    label = f"P8 {n} AsyncSessions × {turns} turns through one loopback gateway (128 KB WAF)"
    return raw, [
        Measure(
            "P8.ratio",
            f"{label} ÷ raw httpx.AsyncClient posting the same bodies, wall time",
            raw["ratio"],
            "≤ 1.3",
            raw["passed"]["ratio"],
            ratio_detail,
        ),
        Measure(
            "P8.loop_lag_ms",
            f"{label}: the event loop's longest wake-up delay (a 5 ms sleep probe), ms",
            raw["loop_lag_max_ms"],
            "≤ 20",
            raw["passed"]["loop_lag"],
            lag_detail,
        ),
        Measure(
            "P8.rss_per_session_mb",
            f"{label}: peak RSS per session, MB",
            raw["rss_per_session_mb"],
            "—",
            None,
            rss_detail,
        ),
        Measure(
            "P8.chars_lost",
            f"{label}: chars lost, every session completing its turns",
            float(raw["chars_lost"]),
            "0",
            raw["passed"]["nothing_lost"],
            lost_detail,
        ),
    ]


def _alike_episodes(episodes: list[dict[str, Any]]) -> list[str]:
    """P9's episodes as text, those of one replay with the same counts on one line (turns listed)."""
    alike: dict[tuple[Any, ...], list[int]] = {}
    for e in episodes:
        n = "+".join(map(str, e["candidates"]))
        key = (e["scenario"], e["transcript"], e["blocked"], e["oracle"], n, e["culprits"])
        alike.setdefault(key, []).append(e["turn"])
    lines = []
    for (scenario, transcript, blocked, oracle, n, culprits), turns in alike.items():
        at = f"turn {turns[0]}" if len(turns) == 1 else f"{len(turns)} turns ({', '.join(map(str, turns))})"
        lines.append(f"{scenario} × {transcript} {at}: {blocked} vs {oracle} (n {n}, {culprits} culprits)")
    return lines


def _p9(quick: bool) -> tuple[dict[str, Any], list[Measure]]:
    raw = bench_content.run(transcripts=bench_content.QUICK_TRANSCRIPTS if quick else None)
    episodes = raw["episodes"]
    over = "; ".join(_alike_episodes(raw["over"]))
    single = [e["ratio"] for e in episodes if e["culprits"] <= 1]
    several = [e for e in episodes if e["culprits"] > 1]
    # No search can spend fewer than 1 + k blocked requests on k ≥ 2 culprits: the first block holds them
    # all, and each needs a refused request of its own, with no other culprit in it, to be proven one.
    floor = max((e["blocked"] / (1 + e["culprits"]) for e in several), default=0.0)
    detail = (
        f"{len(episodes)} content episodes over {len(raw['runs'])} replays ({', '.join(raw['scenarios'])} × "
        f"own workload + {len(raw['transcripts'])} format fixtures): {raw['blocked']} blocked vs "
        f"{raw['oracle']}; one-culprit episodes at most {max(single, default=0.0):.2f}; "
        f"{len(several)} episodes of several culprits at most "
        f"{max((e['ratio'] for e in several), default=0.0):.2f} (and at most {floor:.2f} × the 1 + k blocked "
        f"requests no search of k culprits can go below); over 1: {over or 'none'}; "
        f"{len(raw['mixed_episodes'])} episodes with another limit left out; {raw['chars_lost']} chars lost"
    )
    label = "P9 blocked requests per content episode ÷ (1 + ⌈log2 n⌉) per block met, anomaly-scored WAF"
    return raw, [
        Measure(
            "P9.per_episode_max", f"{label}: the worst episode", raw["max"], "≤ 1", raw["passed"], detail
        ),
        Measure(
            "P9.per_episode_mean",
            f"{label}: the mean",
            raw["mean"],
            "≤ 1",
            None if raw["mean"] is None else raw["mean"] <= bench_content.TARGET_RATIO,
            f"over the same {len(episodes)} episodes",
        ),
    ]


def _p10(quick: bool) -> tuple[dict[str, Any], list[Measure]]:
    raw = bench_fill.run()
    under = "; ".join(
        f"{r['scenario']} turn {r['turn']}: {r['retry_bytes']:,} B of {r['learned_cap']:,} ({r['fill']:.2f})"
        for r in raw["under"]
    )
    detail = (
        f"{len(raw['retries'])} retries after a size rejection over {len(raw['scenarios'])} bundled "
        f"scenarios (own workloads), mean {raw['mean'] or 0:.2f}; under 0.75: {under or 'none'}; "
        f"{len(raw['short_histories'])} retries of histories under 75 % of the cap apart; "
        f"{raw['chars_lost']} chars lost"
    )
    label = "P10 retry bytes ÷ learned cap after a size rejection (SPEC §12, fill the cap)"
    return raw, [Measure("P10.fill_min", f"{label}: the least", raw["min"], "≥ 0.75", raw["passed"], detail)]


BENCHMARKS: dict[str, Callable[[bool], tuple[dict[str, Any], list[Measure]]]] = {
    "P1": _p1,
    "P2": _p2,
    "P3": _p3,
    "P4": _p4,
    "P5": _recovery,
    "P7": _p7,
    "P8": _p8,
    "P9": _p9,
    "P10": _p10,
}
RUN_OF = {"P6": "P5"}  # P5 and P6 come from the same replays


# -- output -----------------------------------------------------------------------------------------------


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """Where the numbers come from (absolute times differ between machines; ratios are what compare)."""
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "packages": {name: _version(name) for name in PACKAGES},
    }


def _value_text(measure: Measure) -> str:
    if measure.value is None:
        return "—"
    value = measure.value
    if value == 0:
        return "0"
    return f"{value:.5f}" if value < 0.01 else f"{value:.2f}"


def table_lines(measures: Sequence[Measure]) -> list[str]:
    """The Markdown table of the results."""
    lines = ["| key | measure | target | measured | status | details |", "|---|---|---|---|---|---|"]
    for m in measures:
        shown = f"**{_value_text(m)}**" if m.value is not None else "—"
        lines.append(f"| `{m.key}` | {m.label} | {m.target} | {shown} | {m.status} | {m.detail} |")
    return lines


def rewrite_benchmarks_md(path: Path, table: Sequence[str], header: str) -> None:
    """Replace the text between the markers (the markers stay); add them at the end when missing."""
    block = "\n".join([START_MARKER, header, "", *table, END_MARKER])
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    start, end = text.find(START_MARKER), text.find(END_MARKER)
    if start == -1 or end == -1 or end < start:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    else:
        text = text[:start] + block + text[end + len(END_MARKER) :]
    path.write_text(text, encoding="utf-8")


def _print_table(measures: Sequence[Measure]) -> None:
    width = max(len(m.key) for m in measures)
    for m in measures:
        print(f"{m.key:<{width}}  {_value_text(m):>9}  {m.target:<18} {m.status:<9} {m.detail}")


def _selected(only: str | None) -> list[str]:
    if not only:
        return list(BENCHMARKS)
    wanted = [part.strip().upper() for part in only.split(",") if part.strip()]
    unknown = [w for w in wanted if w not in BENCHMARK_IDS]
    if unknown:
        raise SystemExit(f"--only: unknown benchmark {', '.join(unknown)}; use {', '.join(BENCHMARK_IDS)}")
    return list(dict.fromkeys(RUN_OF.get(w, w) for w in wanted))


def _run_one(name: str, quick: bool, profile_dir: Path | None) -> tuple[dict[str, Any], list[Measure]]:
    if profile_dir is None:
        return BENCHMARKS[name](quick)
    from pyinstrument import Profiler

    profiler = Profiler()
    profiler.start()
    try:
        return BENCHMARKS[name](quick)
    finally:
        profiler.stop()
        profile_dir.mkdir(parents=True, exist_ok=True)
        text = profiler.output_text(unicode=True, color=False)
        (profile_dir / f"{name}.txt").write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats; writes nothing")
    parser.add_argument("--only", help="comma-separated ids (P1..P10); writes nothing")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="write a pyinstrument profile of each benchmark to DIR"
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    load_before = os.getloadavg()
    details: dict[str, Any] = {}
    measures: list[Measure] = []
    for name in _selected(args.only):
        print(f"running {name}…", file=sys.stderr, flush=True)
        raw, rows = _run_one(name, args.quick, args.profile)
        details[name] = raw
        measures.extend(rows)
    machine = {**machine_info(), "load_average_before": load_before, "load_average_after": os.getloadavg()}
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    print()
    _print_table(measures)
    print(
        f"\n{len(measures)} measures in {time.perf_counter() - started:.0f} s on {machine['cpus']} CPUs "
        f"(load average {load_before[0]:.1f} → {machine['load_average_after'][0]:.1f})"
    )

    if not (args.quick or args.only or args.no_write):
        results: dict[str, Any] = {m.key: m.value if m.data is None else m.data for m in measures}
        results.update(
            targets={m.key: m.target for m in measures},
            status={m.key: m.status for m in measures},
            date=date,
            machine=machine,
            details=details,
        )
        text = json.dumps(results, indent=2, ensure_ascii=False, default=str)
        RESULTS_JSON.write_text(text + "\n", encoding="utf-8")
        header = (
            f"Measured {date} on {machine['platform']}, Python {machine['python']}, "
            f"{machine['cpus']} CPUs (load average {load_before[0]:.1f} at the start, "
            f"{machine['load_average_after'][0]:.1f} at the end) "
            "by `python bench/run.py`."
        )
        rewrite_benchmarks_md(BENCHMARKS_MD, table_lines(measures), header)
        print(f"wrote {RESULTS_JSON} and the table of {BENCHMARKS_MD}")
    missed = [m.key for m in measures if m.passed is False]
    if missed:
        print(f"targets missed: {', '.join(missed)}")
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
