"""The benchmark scripts still run: each one at a tiny size, asserting shapes and invariants, never timings.

The numbers themselves are measured by ``python bench/run.py`` (BENCHMARKS.md); these
tests only keep the scripts from rotting as the library and the simulator change.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
TINY_BYTES = 60_000
TINY_MESSAGES = 60


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Import a module of ``bench/`` by name (the scripts import each other as top-level modules)."""
    monkeypatch.syspath_prepend(str(BENCH_DIR))

    def load(name: str) -> ModuleType:
        return importlib.import_module(name)

    return load


def _finite(value: object) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


def test_sizing_bench_sizes_a_tiny_history_exactly(bench: Any) -> None:
    sizing = bench("bench_sizing")
    history = sizing.build_history(messages=TINY_MESSAGES, target_bytes=TINY_BYTES)
    fresh = sizing.build_history(seed=7, messages=9, target_bytes=9_000)[1:]
    for fmt in ("openai-chat", "anthropic"):
        result = sizing.measure(history, fresh, sizing.WireFormat(fmt))
        assert result["exact"] is True
        assert _finite(result["ratio"])


def test_turn_bench_times_steady_turns_through_httpx_sender(bench: Any) -> None:
    turn = bench("bench_turn")
    result = turn.run(messages=TINY_MESSAGES, target_bytes=TINY_BYTES, turns=3, dumps_repeats=1)
    assert result["turns_timed"] == 3
    assert result["requests"] == turn.WARMUP_TURNS + 3 + 1  # warm-up, timed, and the one that keeps its body
    assert result["compactions"] == 0
    assert result["messages"] > TINY_MESSAGES and result["body_bytes"] > TINY_BYTES
    for key in ("turn_ms", "dumps_ms", "render_ms", "ratio"):
        assert _finite(result[key])
    assert result["post_ms"] >= 0 and result["session_ms"] >= 0


def test_turn_bench_over_loopback_posts_both_ways_to_its_own_server(bench: Any) -> None:
    turn = bench("bench_turn")
    result = turn.run_loopback(messages=TINY_MESSAGES, target_bytes=TINY_BYTES, turns=2)
    assert result["turns_timed"] == 2
    assert _finite(result["chunks_ms"]) and _finite(result["joined_ms"]) and _finite(result["ratio"])


def test_compaction_bench_runs_every_level_on_a_tiny_history(bench: Any) -> None:
    compaction = bench("bench_compaction")
    result = compaction.measure(TINY_BYTES, TINY_MESSAGES, 1)
    assert result["level"] == 3
    assert result["levels"] == {"trim": True, "summary": True, "emergency": True, "shrink": True}
    assert _finite(result["ratio"])


def test_peers_bench_archives_what_it_drops_and_meets_the_target_size(bench: Any) -> None:
    pytest.importorskip("langchain_core", reason="pip install -e .[bench] for the LangChain comparison")
    peers = bench("bench_peers")
    result = peers.run(messages=TINY_MESSAGES, target_bytes=TINY_BYTES, repeats=1)
    assert result["level3_kept_chars"] <= result["target_chars"]
    assert result["level3_archived_chars"] >= result["history_chars"] - result["level3_kept_chars"]
    assert 0 < result["langchain_kept_messages"] < result["messages"]
    assert _finite(result["ratio_langchain"])
    # P3.session: Level 2 on the Session's history archives everything it drops
    assert result["session_level2_dropped_chars"] > 0
    assert result["session_level2_archived_chars"] >= result["session_level2_dropped_chars"]
    assert 0 < result["session_level2_kept_messages"] < result["session_messages"]
    for key in ("ratio_session", "ratio_session_recomputing", "ratio_session_accounted"):
        assert _finite(result[key])
    assert set(result["session_level2_parts_ms"]) == {
        "facts",
        "keep_last",
        "put_members",
        "counted_put_members",
    }


def test_peers_bench_says_how_to_install_langchain_when_it_is_missing(
    bench: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    peers = bench("bench_peers")

    def missing(budget: int) -> None:
        raise ImportError("No module named 'langchain_core'")

    monkeypatch.setattr(peers, "langchain_trim", missing)
    result = peers.run(messages=TINY_MESSAGES, target_bytes=TINY_BYTES, repeats=1)
    assert result["skipped"] == "skipped: pip install -e .[bench]"
    assert result["passed"] is None


@pytest.mark.slow
def test_simulator_bench_replays_the_same_work_three_ways_and_sweeps(bench: Any) -> None:
    simulator_bench = bench("bench_simulator")
    replays = simulator_bench.measure_replay(["coding-120k"], 1)
    assert replays["same_work"] is True
    assert set(replays["total_ms"]) == {"library", "library_render", "inprocess", "loopback"}
    assert _finite(replays["replay_overhead"]) and _finite(replays["loopback_vs_inprocess"])
    sweeps = simulator_bench.measure_sweep(
        ["rate-limit-429"], workers=2, policies=["default"], seeds=[0], repeats=1
    )
    assert sweeps["runs"] == 1
    assert _finite(sweeps["sweep_speedup"])


def test_recovery_bench_counts_every_episode_kind_and_summarizer_cost(bench: Any) -> None:
    recovery = bench("bench_recovery")
    result = recovery.run(scenarios=["floor-too-big", "openai-128k-overflow", "rst-after-256k"])
    for key in ("three_quarters", "bisection"):
        p5 = result["P5"][key]
        # every kind counts: a 413 at the floor, a context overflow and a reset (SPEC §6 plain retry first)
        assert set(p5["by_kind"]) == {"payload_too_large", "context_overflow", "transient_network"}
        assert p5["episodes"] == 3 == len(p5["rows"])
        assert p5["rejected"] == sum(r["rejected"] for r in p5["rows"])
        assert p5["rejected_per_episode"] == p5["rejected"] / 3
        oracle = p5["oracle"]  # the reset earns its plain retry (SPEC §2.4, §11): 2 requests, oracle 2
        assert oracle["episodes"] == 3 and oracle["rejected"] == p5["rejected"]
        assert [(r["kind"], r["oracle"]) for r in oracle["rows"]] == [
            ("payload_too_large", 1),
            ("context_overflow", 1),
            ("transient_network", 2),
        ]
        assert oracle["ratio"] == oracle["rejected"] / oracle["oracle"]
        assert p5["over_one"] == [r for r in p5["rows"] if r["rejected"] > 1]
    p6 = result["P6"]
    assert p6["equal_outcome_scenarios"]
    assert p6["default"]["chars_lost"] == 0
    assert p6["ratio"] is None or p6["ratio"] >= 0
    # openai-128k-overflow plants 14 facts and rst-after-256k 45: the default keeps every one recallable,
    # the peer does not
    assert p6["default"]["facts"] == p6["summarize_everything"]["facts"] == 14 + 45
    assert p6["default"]["fact_survival"] == 1.0 > p6["summarize_everything"]["fact_survival"]
    assert 0 <= p6["default"]["facts_in_context"] <= p6["default"]["fact_survival"]
    scopes = p6["by_summary_scope"]
    assert set(scopes) == {"segment", "incremental", "target"}
    assert scopes[p6["summary_scope"]]["usd"] == p6["default"]["usd"]
    assert all(m["chars_lost"] == 0 and m["fact_survival"] == 1.0 for m in scopes.values())


def test_long_replay_bench_times_early_and_late_turns_of_a_compacting_replay(bench: Any) -> None:
    long_replay = bench("bench_long_replay")
    result = long_replay.run(session_turns=70, repeats=1)
    assert result["turns"] > long_replay.EARLY_WINDOW[1]
    assert result["late_window"] == [max(150, result["turns"] - 100), result["turns"]]
    assert result["compactions"] > result["turns"] // 10  # compaction-heavy
    assert result["outcome"] == "ok" and result["chars_lost"] == 0
    assert _finite(result["early_ms"]) and _finite(result["late_ms"]) and _finite(result["ratio"])


@pytest.mark.slow
def test_async_bench_runs_sessions_and_the_raw_baseline_on_the_same_bodies(
    bench: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = bench("run")
    monkeypatch.setattr(runner, "QUICK_P8_SESSIONS", 3)
    raw, measures = runner._p8(quick=True)
    assert [m.key for m in measures] == [
        "P8.ratio",
        "P8.loop_lag_ms",
        "P8.rss_per_session_mb",
        "P8.chars_lost",
    ]
    assert raw["sessions"] == 3 and raw["turns"] == 40 and raw["rounds"] == 1
    # every session finished its turns with nothing lost, and met the WAF: the block and the size
    # experiment refused, a cap learned, a compaction
    assert raw["completed_sessions"] == 3 and raw["chars_lost"] == 0 and raw["nothing_lost"] is True
    (ours,), (theirs,) = raw["sessions_runs"], raw["raw_runs"]
    assert ours["caps_learned"] == 3 and ours["rejected"] >= 6 and ours["compactions"] >= 3
    assert ours["largest_body"] >= 128_000 > ours["body_bytes"] / ours["requests"]
    # the baseline posted the very same bodies and met the same pages
    assert raw["same_exchanges"] is True
    # 40 turns, the refused requests, and each session's one-word route probe (it passed)
    assert sum(theirs["statuses"].values()) == ours["requests"] == 3 * 40 + ours["rejected"] + 3
    for run in (ours, theirs):
        assert _finite(run["wall_s"]) and run["loop_lag"]["wakeups"] > 0 and run["steps"]["stretches"] > 0
    assert _finite(raw["ratio"]) and raw["loop_lag_max_ms"] >= 0 and raw["rss_per_session_mb"] >= 0
    assert ours["gc_tracked_objects"] > 0 and ours["alone_longest_ms"] > 0


def test_content_bench_divides_each_content_episode_s_blocked_requests_by_its_oracle(
    bench: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, content = bench("run"), bench("bench_content")
    assert content.anomaly_scenarios() == ["crs-agent-content-withheld", "crs-system-prompt-blocked"]
    monkeypatch.setattr(content, "QUICK_TRANSCRIPTS", ())  # each scenario's own workload only
    raw, measures = runner._p9(quick=True)
    assert [m.key for m in measures] == ["P9.per_episode_max", "P9.per_episode_mean"]
    # crs-agent-content-withheld: one tool result among 4 new parts, found in 1 + ⌈log2 4⌉ = 3 blocked
    # requests; crs-system-prompt-blocked's own workload ends on the content floor (not a content episode)
    assert [
        (e["scenario"], e["candidates"], e["culprits"], e["blocked"], e["oracle"]) for e in raw["episodes"]
    ] == [("crs-agent-content-withheld", [4], 1, 3, 3)]
    assert raw["max"] == raw["mean"] == 1.0 and raw["passed"] is True and raw["chars_lost"] == 0
    assert [r["outcome"] for r in raw["runs"]] == ["content_withheld", "content_floor"]


def test_fill_bench_divides_each_retry_after_a_size_rejection_by_the_learned_cap(bench: Any) -> None:
    runner, fill = bench("run"), bench("bench_fill")
    raw = fill.run(scenarios=["nginx-1m-413", "screenshots-128k-waf", "openai-128k-overflow"])
    # nginx: one 413 at turn 120, retried at 0.82 of the cap; the screenshots: a 98 KB screenshot
    # cannot be split, so the first retry keeps one of two (0.69); an overflow is not a size rejection
    rows = [(r["scenario"], r["turn"], round(r["fill"], 2)) for r in raw["retries"]]
    assert rows == [
        ("nginx-1m-413", 120, 0.82),
        ("screenshots-128k-waf", 2, 0.69),
        ("screenshots-128k-waf", 13, 0.96),
    ]
    assert all(r["retry_bytes"] <= r["learned_cap"] < r["rejected_bytes"] for r in raw["retries"])
    assert raw["min"] == raw["retries"][1]["fill"] and raw["passed"] is False and raw["chars_lost"] == 0
    assert "P10" in runner.BENCHMARK_IDS and "P10" in runner.BENCHMARKS


def test_run_writes_one_key_per_measure_and_keeps_the_prose(
    bench: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runner = bench("run")
    measure = runner.Measure("PX.ratio", "a fake measure", 0.5, "≤ 1", True, "detail")
    monkeypatch.setattr(runner, "BENCHMARKS", {"PX": lambda quick: ({"raw": 1}, [measure])})
    results, markdown = tmp_path / "results.json", tmp_path / "BENCHMARKS.md"
    markdown.write_text(
        f"# Benchmarks\n\nprose before\n\n{runner.START_MARKER}\nold\n{runner.END_MARKER}\n\nprose after\n"
    )
    monkeypatch.setattr(runner, "RESULTS_JSON", results)
    monkeypatch.setattr(runner, "BENCHMARKS_MD", markdown)
    assert runner.main([]) == 0
    written = json.loads(results.read_text())
    assert written["PX.ratio"] == 0.5
    assert written["status"] == {"PX.ratio": "met"}
    assert {"date", "machine", "targets", "details"} <= set(written)
    text = markdown.read_text()
    assert "prose before" in text and "prose after" in text and "\nold\n" not in text
    assert "| `PX.ratio` | a fake measure | ≤ 1 | **0.50** | met | detail |" in text


def test_run_rejects_an_unknown_benchmark_id(bench: Any) -> None:
    runner = bench("run")
    with pytest.raises(SystemExit, match="unknown benchmark P11"):
        runner.main(["--only", "P11"])


def test_classify_peers_bench_scores_ctxrecover_and_reports_a_missing_peer(
    bench: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    peers = bench("bench_classify_peers")

    def absent() -> None:
        raise ImportError("No module named 'litellm'")

    monkeypatch.setattr(peers, "_litellm_reader", absent)
    result = peers.run(limit=12)
    assert result["samples"] == 12
    assert result["litellm"] == {"status": peers.SKIPPED}
    scored = result["ctxrecover"]["with_status"]
    assert sum(entry["total"] for entry in scored["per_kind"].values()) == 12
    assert 0.0 <= scored["overall"] <= 1.0
    assert "litellm: skipped" in peers.table(result)


def test_classify_peers_bench_scores_litellm_on_the_same_samples(
    bench: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    if importlib.util.find_spec("litellm") is None:  # not imported here: the bench sets its env first
        pytest.skip("pip install -e .[peers] for the LiteLLM comparison")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never the network
    peers = bench("bench_classify_peers")
    result = peers.run(limit=12)
    theirs = result["litellm"]["with_status"]
    assert sum(entry["total"] for entry in theirs["per_kind"].values()) == 12
    assert set(theirs["per_kind"]) == set(result["ctxrecover"]["with_status"]["per_kind"])
    assert result["litellm"]["version"]
