"""Sweeps: points, validation, rows, cache and resume, executors (processes, threads, Dask), files."""

from __future__ import annotations

import concurrent.futures
import json
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message
from simulator.proxy.scenario import SCENARIOS_DIR
from simulator.research.grid import Uniform, expand_grid, random_points
from simulator.research.metrics import RUN_COLUMNS
from simulator.research.report import SUMMARY_NEEDS, load_run
from simulator.research.sweep import CACHE_DIR, LEADING_COLUMNS, knob_column, sweep
from simulator.transcripts.loaders import transcript_from_messages
from simulator.workloads import ReplayError

SCENARIOS = ("corporate-128k-waf", "gemini-1m-overflow")
TRANSCRIPT = "chat-50k"
GRID = {"budget_ratio": [0.5, 0.75]}
RUNS = 8  # 2 policies × 2 knob values × 2 scenarios
DASK_BUDGET_S = 5.0


def small_sweep(out: Path, **options: Any) -> pd.DataFrame:
    settings: dict[str, Any] = {
        "grid": GRID,
        "scenarios": SCENARIOS,
        "transcripts": TRANSCRIPT,
        "policies": "default,cline-drop-half",
        "workers": 1,
        "figures": False,
        "progress": False,
        "out_dir": out,
    }
    return sweep(**{**settings, **options})


def stable(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.reset_index(drop=True)


# -- points -------------------------------------------------------------------------------------------


def test_a_grid_expands_to_its_cartesian_product_in_grid_order() -> None:
    points = expand_grid({"budget_ratio": [0.5, 0.6, 0.75], "emergency_keep_messages": [6, 10]})

    assert len(points) == 6
    assert points[:2] == [
        {"budget_ratio": 0.5, "emergency_keep_messages": 6},
        {"budget_ratio": 0.5, "emergency_keep_messages": 10},
    ]


def test_no_grid_is_one_point_and_a_range_needs_a_random_search() -> None:
    assert expand_grid(None) == [{}]
    with pytest.raises(ConfigError, match="'budget_ratio' is a range: ranges need a random search"):
        expand_grid({"budget_ratio": Uniform(0.4, 0.8)})


def test_random_search_is_deterministic_per_seed_and_draws_from_the_grid() -> None:
    grid = {
        "budget_ratio": Uniform(0.4, 0.8),
        "emergency_keep_messages": [4, 6, 10],
        "keep_recent": Uniform(2, 9),
    }

    first, again, other = (random_points(grid, 20, seed) for seed in (7, 7, 8))

    assert first == again and first != other
    assert all(0.4 <= p["budget_ratio"] <= 0.8 and p["emergency_keep_messages"] in (4, 6, 10) for p in first)
    assert all(isinstance(p["keep_recent"], int) and 2 <= p["keep_recent"] <= 9 for p in first)


def test_the_random_option_samples_that_many_points(tmp_path: Path) -> None:
    grid = {"budget_ratio": Uniform(0.4, 0.8)}
    frame = small_sweep(tmp_path, grid=grid, random=3, seed=1, policies="default", scenarios=SCENARIOS[:1])

    assert len(frame) == 3 and frame["budget_ratio"].between(0.4, 0.8).all()
    assert list(frame["budget_ratio"]) == [p["budget_ratio"] for p in random_points(grid, 3, 1)]


# -- validation ---------------------------------------------------------------------------------------


def test_an_unknown_knob_is_rejected_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"Policy has no field 'budgetratio'; valid fields: context_window"):
        small_sweep(tmp_path, grid={"budgetratio": [0.5]})

    assert not any(tmp_path.iterdir())


def test_a_bad_knob_value_is_rejected_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"Policy.budget_ratio must be a fraction in \(0, 1\]"):
        small_sweep(tmp_path, grid={"budget_ratio": [0.5, 1.5]})


def test_a_knob_named_like_a_run_column_gets_a_prefix() -> None:
    assert knob_column("context_window") == "policy.context_window"
    assert knob_column("budget_ratio") == "budget_ratio"


# -- rows ------------------------------------------------------------------------------------------------


def test_a_sweep_has_one_row_per_policy_point_scenario_and_seed(tmp_path: Path) -> None:
    frame = small_sweep(tmp_path)

    assert len(frame) == RUNS and list(frame.columns[:6]) == [*LEADING_COLUMNS, "budget_ratio"]
    assert frame["policy"].iloc[0] == "default[budget_ratio=0.5]"
    assert set(frame["base_policy"]) == {"default", "cline-drop-half"}
    assert {"fact_survival", "outcome", "expected_outcome", *SUMMARY_NEEDS} <= set(frame.columns)
    assert frame["run_id"].is_unique
    lost = frame.groupby("base_policy")["chars_lost"].sum()
    assert lost["default"] == 0 and lost["cline-drop-half"] > 0


# -- cache and resume -----------------------------------------------------------------------------------


def test_a_rerun_loads_every_run_from_the_cache(tmp_path: Path) -> None:
    first = small_sweep(tmp_path)
    fresh: list[dict[str, Any]] = []

    again = small_sweep(tmp_path, on_result=fresh.append)

    assert (first.attrs["computed"], first.attrs["from_cache"]) == (RUNS, 0)
    assert (again.attrs["computed"], again.attrs["from_cache"]) == (0, RUNS) and fresh == []
    pd.testing.assert_frame_equal(stable(first), stable(again))
    assert len(list((tmp_path / CACHE_DIR).glob("*.json"))) == RUNS


def test_an_interrupted_sweep_resumes_computing_only_the_missing_runs(tmp_path: Path) -> None:
    finished: list[str] = []

    def stop_after_three(payload: dict[str, Any]) -> None:
        finished.append(payload["key"])
        if len(finished) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        small_sweep(tmp_path, on_result=stop_after_three)
    resumed = small_sweep(tmp_path)

    assert (resumed.attrs["computed"], resumed.attrs["from_cache"]) == (RUNS - 3, 3)
    assert set(finished) <= set(resumed["key"])


def test_deleted_cache_files_are_recomputed_and_nothing_else(tmp_path: Path) -> None:
    small_sweep(tmp_path)
    for path in sorted((tmp_path / CACHE_DIR).glob("*.json"))[:2]:
        path.unlink()
    (tmp_path / CACHE_DIR / "garbage.json").write_text("{not json", encoding="utf-8")

    again = small_sweep(tmp_path)

    assert (again.attrs["computed"], again.attrs["from_cache"]) == (2, RUNS - 2)


def test_a_new_grid_value_computes_only_the_new_points(tmp_path: Path) -> None:
    small_sweep(tmp_path)

    wider = small_sweep(tmp_path, grid={"budget_ratio": [0.5, 0.6, 0.75]})

    assert (wider.attrs["computed"], wider.attrs["from_cache"]) == (4, RUNS)


def test_an_edited_scenario_file_is_a_new_run(tmp_path: Path) -> None:
    scenario = tmp_path / "waf.toml"
    text = (SCENARIOS_DIR / "corporate-128k-waf.toml").read_text(encoding="utf-8")
    scenario.write_text(text, encoding="utf-8")
    options: dict[str, Any] = {"scenarios": [scenario], "policies": "default", "grid": None}
    small_sweep(tmp_path / "out", **options)

    scenario.write_text(text.replace('description = """', 'description = """Edited. '), encoding="utf-8")
    edited = small_sweep(tmp_path / "out", **options)
    unchanged = small_sweep(tmp_path / "out", **options)

    assert edited.attrs["computed"] == 1 and unchanged.attrs["computed"] == 0


def test_the_replay_seed_is_part_of_the_run(tmp_path: Path) -> None:
    frame = small_sweep(tmp_path, grid=None, policies="default", scenarios=SCENARIOS[:1], seeds=(0, 1))

    assert list(frame["seed"]) == [0, 1] and frame["key"].is_unique


# -- executors ------------------------------------------------------------------------------------------


def test_two_worker_processes_give_the_same_rows_as_one_process(tmp_path: Path) -> None:
    inline = small_sweep(tmp_path / "inline")

    pooled = small_sweep(tmp_path / "pool", workers=2)

    assert pooled.attrs["computed"] == RUNS
    pd.testing.assert_frame_equal(stable(inline), stable(pooled))


def test_any_executor_can_run_the_sweep(tmp_path: Path) -> None:
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        frame = small_sweep(tmp_path, executor=pool, grid=None, policies="default")

    assert list(frame["outcome"]) == ["recovered", "recovered"]


def test_executor_and_dask_are_exclusive(tmp_path: Path) -> None:
    with concurrent.futures.ThreadPoolExecutor() as pool, pytest.raises(ConfigError, match="not both"):
        small_sweep(tmp_path, executor=pool, dask="local")


def test_a_dask_local_cluster_runs_the_sweep(tmp_path: Path) -> None:
    from distributed import LocalCluster

    started = time.perf_counter()
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        frame = small_sweep(tmp_path, dask=cluster.scheduler_address, grid=None, policies="default")

    assert frame.attrs["computed"] == 2 and list(frame["outcome"]) == ["recovered", "recovered"]
    assert time.perf_counter() - started < DASK_BUDGET_S


@pytest.mark.slow
def test_dask_local_starts_and_stops_its_own_cluster(tmp_path: Path) -> None:
    frame = small_sweep(tmp_path, dask="local", grid=None, policies="default", scenarios=SCENARIOS[:1])

    assert list(frame["outcome"]) == ["recovered"]


def test_a_failing_run_raises_with_the_run_named_and_keeps_what_finished(tmp_path: Path) -> None:
    silent = transcript_from_messages("no-replies", [Message.user("hello?")])

    with pytest.raises(ReplayError, match="has no assistant reply") as raised:
        small_sweep(
            tmp_path, grid=None, policies="default", scenarios=SCENARIOS[:1], transcripts=[TRANSCRIPT, silent]
        )

    assert raised.value.__notes__ == ["in the sweep run default × corporate-128k-waf × no-replies × seed 0"]
    assert len(list((tmp_path / CACHE_DIR).glob("*.json"))) == 1


# -- files and progress ---------------------------------------------------------------------------------


def test_the_sweep_directory_holds_attempts_summary_manifest_and_report(tmp_path: Path) -> None:
    frame = small_sweep(tmp_path, scenarios=SCENARIOS[:1], figures=True)

    data = load_run(tmp_path)
    assert set(RUN_COLUMNS) | {"budget_ratio"} <= set(data.attempts.columns)
    assert set(data.attempts["policy"]) == set(frame["policy"])
    assert list(data.summaries["policy"]) == list(frame["policy"])
    manifest = json.loads((tmp_path / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["sweep"]["grid"] == GRID
    assert manifest["sweep"]["policies"] == ["default", "cline-drop-half"]
    assert len(manifest["code_version"]["sha256"]) == 64
    assert manifest["transcripts"][0]["name"] == TRANSCRIPT and len(manifest["scenarios"][0]["sha256"]) == 64
    assert {p["name"] for p in manifest["policies"]} == {"default", "cline-drop-half"}
    assert len(manifest["runs"]) == 4
    report = tmp_path / "report"
    assert (report / "comparison.md").is_file() and (report / "outcome-matrix.png").is_file()


def test_progress_shows_a_bar_only_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small_sweep(tmp_path / "quiet", grid=None, policies="default", scenarios=SCENARIOS[:1])
    quiet = capsys.readouterr().err
    small_sweep(tmp_path / "loud", grid=None, policies="default", scenarios=SCENARIOS[:1], progress=True)
    loud = capsys.readouterr().err

    assert quiet == "" and "ctxsim sweep" in loud and "1/1" in loud


def test_a_sweep_manifest_carries_its_providers_so_budget_curves_show_the_real_window(tmp_path: Path) -> None:
    # openai-128k-overflow: the session assumes 128,000 tokens, the provider rejects near 6,000
    small_sweep(tmp_path, grid=None, policies="default", scenarios=["openai-128k-overflow"], transcripts=None)

    manifest = json.loads((tmp_path / "manifest.json").read_text(encoding="utf-8"))
    (scenario,) = manifest["scenarios"]
    assert scenario["provider"]["context_window"] == 6000
    data = load_run(tmp_path)
    (run_id,) = set(data.attempts["run_id"])
    from simulator.research.figures import budget_curve
    from simulator.research.report import write_report

    written = write_report(tmp_path, out_dir=tmp_path / "report")
    assert [p.name for p in written if p.name.startswith("budget-")]
    figure = budget_curve(
        data.attempts, run_id=run_id, provider_window=scenario["provider"]["context_window"]
    )
    assert "window 6,000 tokens" in figure.get_suptitle()
    tokens = figure.axes[1]
    (window,) = [line for line in tokens.get_lines() if line.get_label() == "provider's context window"]
    assert list(window.get_ydata()) == [6000, 6000]
