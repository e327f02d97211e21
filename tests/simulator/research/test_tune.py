"""ctxsim tune: a constrained multi-objective search against the default, pruned, resumable."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("optuna", reason="needs the tune extra: pip install 'ctxrecover[tune]'")

from ctxrecover.errors import ConfigError  # noqa: E402
from ctxrecover.policy import DEFAULT_POLICY, Policy  # noqa: E402
from simulator.cli import main, policy_from_spec  # noqa: E402
from simulator.research.objectives import OBJECTIVES, dominates, knob_response  # noqa: E402
from simulator.research.space import SEARCH_SPACE, Knob, field_kind, policy_for, resolve_space  # noqa: E402
from simulator.research.tune import TUNE_FILES, tune  # noqa: E402

SCENARIOS = ("openai-128k-overflow", "bedrock-window-misconfigured")  # two small bundled scenarios
TRIALS = 6


def objectives(row: pd.Series) -> dict[str, float]:
    return {name: float(row[name]) for name in OBJECTIVES}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("tune")
    return out, tune(
        trials=TRIALS, scenarios=SCENARIOS, workers=1, out_dir=out, figures=False, progress=False
    )


def test_tune_beats_the_default_on_an_objective_without_losing_or_says_the_default_is_on_the_front(
    tuned: tuple[Path, object],
) -> None:
    _out, result = tuned
    trials = result.trials
    assert list(trials["role"]) == ["default"] + ["search"] * TRIALS
    assert list(trials["number"].iloc[1:]) == list(range(TRIALS))
    default = trials.iloc[0]
    assert {name: getattr(DEFAULT_POLICY, name) for name in SEARCH_SPACE} == {
        name: default[name] for name in SEARCH_SPACE
    }
    assert result.default == objectives(default)
    beating = trials[trials["beats_default"]]
    if result.chosen is None:
        assert beating.empty and bool(default["on_front"])
        assert result.verdict.startswith(
            "no trial beats the default on one objective without losing on another"
        )
    else:
        chosen = objectives(result.chosen)
        assert dominates(chosen, result.default) and bool(result.chosen["feasible"])
        assert not bool(default["on_front"])  # a trial that beats it pushes it off the front
        better = [o.label for n, o in OBJECTIVES.items() if o.better(chosen[n], result.default[n])]
        assert result.verdict.startswith(f"trial {int(result.chosen['number'])} beats the default on ")
        assert all(label in result.verdict for label in better)
    # every trial on the front is feasible and beaten by no other feasible trial
    feasible = trials[trials["feasible"]]
    for _, row in result.front.iterrows():
        assert bool(row["feasible"])
        assert not any(dominates(objectives(other), objectives(row)) for _, other in feasible.iterrows())


def test_the_chosen_policy_is_written_as_toml_for_policy_and_as_an_env_file(
    tuned: tuple[Path, object],
) -> None:
    out, result = tuned
    source = result.chosen if result.chosen is not None else result.trials.iloc[0]
    knobs = {name: source[name] for name in SEARCH_SPACE}
    loaded, name = policy_from_spec(str(out / TUNE_FILES["toml"]))
    assert name == "policy" and loaded == DEFAULT_POLICY.replace(
        **{k: v.item() if hasattr(v, "item") else v for k, v in knobs.items()}
    )
    env = (out / TUNE_FILES["env"]).read_text(encoding="utf-8").splitlines()
    assert f"CHATCLI_EMERGENCY_KEEP_MESSAGES={knobs['emergency_keep_messages']}" in env
    assert f"CHATCLI_TOOL_RESULT_MAX_CHARS={knobs['tool_result_max_chars']}" in env
    assert any(line.startswith("# budget_ratio = ") and "policy.toml" in line for line in env)
    assert (
        Policy.from_env(
            dict(line.split("=", 1) for line in env if not line.startswith("#"))
        ).emergency_keep_messages
        == knobs["emergency_keep_messages"]
    )


def test_the_front_importances_and_the_run_directory_are_written(tuned: tuple[Path, object]) -> None:
    out, result = tuned
    front = pd.read_csv(out / "front.csv")
    assert list(front["number"]) == list(result.front["number"])
    importance = pd.read_csv(out / "importance.csv", index_col="knob")
    assert list(importance.index) == list(SEARCH_SPACE) and list(importance.columns) == list(OBJECTIVES)
    assert all(0 <= value <= 1 for value in importance.to_numpy().ravel())
    summary = pd.read_csv(out / "summary.csv")
    complete = result.trials[result.trials["state"] == "complete"]
    assert len(summary) == len(complete) * len(SCENARIOS)
    searched = complete[complete["role"] == "search"]
    assert set(summary["policy"]) == {"default", *(f"trial-{n}" for n in searched["number"])}


def test_a_stopped_tune_resumes_and_more_trials_extend_it(tuned: tuple[Path, object], tmp_path: Path) -> None:
    out, first = tuned
    cached = sorted((out / "cache").iterdir())
    more = tune(trials=TRIALS + 2, scenarios=SCENARIOS, workers=1, out_dir=out, figures=False, progress=False)
    assert list(more.trials["number"].iloc[1:]) == list(range(TRIALS + 2))
    kept = more.trials.iloc[: TRIALS + 1][list(OBJECTIVES)]
    assert kept.equals(first.trials[list(OBJECTIVES)])
    assert set(cached) <= set((out / "cache").iterdir())
    # the run directory holds every finished trial, those of the first session included
    summary = pd.read_csv(out / "summary.csv")
    searched = more.trials[(more.trials["role"] == "search") & (more.trials["state"] == "complete")]
    assert set(summary["policy"]) == {"default", *(f"trial-{n}" for n in searched["number"])}
    with pytest.raises(ConfigError, match="this study searched another scenarios"):
        tune(trials=1, scenarios=SCENARIOS[:1], workers=1, out_dir=out, figures=False, progress=False)


def test_a_hopeless_trial_is_pruned_and_an_infeasible_one_never_reaches_the_front(tmp_path: Path) -> None:
    # learning no cap gives up the turn the default recovers under a tight cap: pruned at that run
    never_learn = {"cap_strategy": Knob(choices=("none",))}
    pruned = tune(
        trials=2,
        scenarios=["tight-cap-1.2x-system-prompt"],
        space=never_learn,
        workers=1,
        out_dir=tmp_path / "p",
        figures=False,
        progress=False,
    )
    searched = pruned.trials[pruned.trials["role"] == "search"]
    assert list(searched["state"]) == ["pruned", "pruned"]
    assert all(
        reason.startswith("gave up a turn on tight-cap-1.2x-system-prompt × ")
        for reason in searched["pruned_because"]
    )
    # run to the end instead, the trials are infeasible (they recover less than the default): off the front
    full = tune(
        trials=1,
        scenarios=["tight-cap-1.2x-system-prompt"],
        space=never_learn,
        prune=False,
        workers=1,
        out_dir=tmp_path / "f",
        figures=False,
        progress=False,
    )
    (trial,) = [row for _, row in full.trials.iterrows() if row["role"] == "search"]
    assert trial["state"] == "complete" and trial["recovery_shortfall"] > 0
    assert not trial["feasible"] and not trial["on_front"] and full.chosen is None
    assert full.verdict.startswith("no trial beats the default")


def test_trials_run_in_parallel_on_worker_processes(tmp_path: Path) -> None:
    result = tune(
        trials=3, scenarios=SCENARIOS[:1], workers=2, out_dir=tmp_path, figures=False, progress=False
    )
    assert list(result.trials["state"]) == ["complete"] * 4 and result.trials["number"].iloc[1:].tolist() == [
        0,
        1,
        2,
    ]


def test_the_search_space_fits_the_policy_fields() -> None:
    for name, knob in SEARCH_SPACE.items():
        default = getattr(DEFAULT_POLICY, name)
        if knob.choices:
            assert field_kind(name) == "str" and default in knob.choices, name
        else:
            assert field_kind(name) in ("int", "float") and knob.low <= default <= knob.high, name
            for end in (knob.low, knob.high):  # both ends make valid policies (ordered pairs lifted)
                knobs, policy = policy_for({name: type(default)(end)})
                assert getattr(policy, name) == type(default)(end)
    with pytest.raises(
        ConfigError, match="cannot search chars_per_token; searchable Policy fields: budget_ratio"
    ):
        resolve_space(["chars_per_token"])


def test_knob_response_is_the_mean_and_a_95_percent_t_interval_across_seeds() -> None:
    rows = pd.DataFrame(
        {
            "keep_recent": [4, 4, 4, 8, 8, 8],
            "seed": [0, 1, 2, 0, 1, 2],
            "turns": [10] * 6,
            "summarizer_cost_usd": [0.0] * 6,
            "fact_survival": [1.0] * 6,
            "rejected_requests": [1, 2, 3, 0, 0, 0],
            "failed_episodes": [0] * 6,
            "recovered_episodes": [1] * 6,
            "chars_lost": [0] * 6,
        }
    )
    table = knob_response(rows, ["keep_recent"])
    at_4 = table[(table["value"] == 4) & (table["objective"] == "rejected_per_run")].iloc[0]
    half = 4.303 * 1.0 / math.sqrt(3)  # t(0.975, 2) × stdev(1, 2, 3) / √3
    assert (at_4["mean"], at_4["seeds"]) == (2.0, 3)
    assert at_4["low"] == pytest.approx(2.0 - half) and at_4["high"] == pytest.approx(2.0 + half)
    at_8 = table[(table["value"] == 8) & (table["objective"] == "rejected_per_run")].iloc[0]
    assert (at_8["low"], at_8["mean"], at_8["high"]) == (0.0, 0.0, 0.0)


def test_the_cli_tunes_prints_the_front_and_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t"
    code = main(
        [
            "tune",
            "--trials",
            "2",
            "--scenarios",
            SCENARIOS[0],
            "--workers",
            "1",
            "--no-figures",
            "--out",
            str(out),
        ]
    )
    stdout = capsys.readouterr().out
    assert code == 0
    assert stdout.startswith("Pareto front (feasible trials no other beats):\n| number |")
    assert "\ndefault: summarizer USD per 100 turns " in stdout
    assert ("beats the default on" in stdout) or ("the default is on the front" in stdout)
    assert (out / TUNE_FILES["toml"]).is_file() and (out / TUNE_FILES["journal"]).is_file()
    assert main(["tune", "--trials", "1", "--space", "chars_per_token", "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.startswith("ctxsim: error: tune: cannot search chars_per_token;")


def test_the_report_of_a_tune_draws_each_knob_against_each_objective_and_two_policies_budget_curves(
    tuned: tuple[Path, object],
) -> None:
    from simulator.research.report import write_report

    out, result = tuned
    written = {path.name for path in write_report(out, out_dir=out / "report-check")}
    budget = sorted(name for name in written if name.startswith("budget-"))
    chosen = "default" if result.chosen is None else f"trial-{int(result.chosen['number'])}"
    assert {name.split("--")[2] for name in budget} == {"default", chosen}  # not every trial's runs
    assert len(budget) == len({"default", chosen}) * len(SCENARIOS)
    assert {f"knob-response-{name.replace('_', '-')}.png" for name in OBJECTIVES} <= written
    response = pd.read_csv(out / "report-check" / "knob-response.csv")
    assert set(response["knob"]) == set(SEARCH_SPACE) and set(response["objective"]) == set(OBJECTIVES)
    assert (response["low"] <= response["mean"]).all() and (response["mean"] <= response["high"]).all()


@pytest.mark.slow
def test_trials_run_on_a_dask_local_cluster(tmp_path: Path) -> None:
    pytest.importorskip("distributed", reason="needs the dask extra: pip install 'ctxrecover[dask]'")
    result = tune(
        trials=2,
        scenarios=SCENARIOS[:1],
        dask="local",
        workers=2,
        out_dir=tmp_path,
        figures=False,
        progress=False,
    )
    assert list(result.trials["state"]) == ["complete"] * 3
