"""Policy search with optuna: the best policies for a set of scenarios, against the default.

::

    result = tune(trials=20, scenarios=["openai-128k-overflow", "corporate-128k-waf"], seeds=[0, 1],
                  out_dir="runs/tune")
    print(result.verdict)

A multi-objective study (:data:`simulator.research.objectives.OBJECTIVES`: summarizer USD, fact
survival, rejected requests, failed turns) over the knobs of
:data:`simulator.research.space.SEARCH_SPACE`, under two constraints (no char lost; a recovery rate at
least the default's, :data:`~simulator.research.objectives.CONSTRAINTS`) handed to the sampler with
``Trial.set_constraint``. The default policy is measured first, on the same runs: it is the
reference of the recovery constraint and the policy every other is compared with. It is run beside
the study (its values need not lie in the search space), as the ``default`` row of the trials.

- **Trials** replay every scenario × transcript × seed with their knobs (the runs of
  :func:`simulator.research.sweep.run_one`, cached in ``out_dir/cache`` and shared with sweeps). A
  trial is **pruned** at its first run that loses a char or gives up a turn that the default's run
  of the same scenario, transcript and seed did not give up: its remaining runs are cancelled.
- **Execution** as sweeps (:func:`simulator.research.sweep.executor_for`): processes, any executor,
  or Dask; trials run ``parallel`` at a time (default: one per worker), their runs interleaved.
- **Resumable**: the study lives in ``out_dir/study.journal`` (optuna's journal storage); the same
  call goes on where it stopped (finished trials count, a trial cut off mid-way is re-run from the
  run cache), and asking for more trials extends it.
- **Outputs** (with ``out_dir``): ``trials.csv``/``.md``, the Pareto front ``front.csv``/``.md``/
  ``.png``, the chosen policy as ``policy.env`` and ``policy.toml`` (``ctxsim --policy
  policy.toml``), each knob's importance per objective ``importance.csv``/``.md`` (optuna's PED-ANOVA),
  and a sweep-shaped run directory (attempts, summary, manifest) whose report ``ctxsim report``
  draws, knob responses included.

The chosen policy is the one that beats the default on the most important objective first
(:data:`CHOICE_ORDER`) among the feasible trials that beat it on at least one objective without losing
on another; when none does, the default is on the front and the result says so.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxrecover.errors import ConfigError
from ctxrecover.policy import DEFAULT_POLICY
from simulator.research.objectives import (
    CONSTRAINTS,
    OBJECTIVES,
    constraint_values,
    dominates,
    objective_values,
)
from simulator.research.space import Knob, policy_for, resolve_space, suggest
from simulator.research.sweep import (
    RunSpec,
    Transcripts,
    code_hash,
    executor_for,
    plan_runs,
    read_cached,
    run_one,
    scenario_list,
    transcript_list,
    write_cached,
)
from simulator.research.tune_files import TUNE_FILES, write_tune_files

if TYPE_CHECKING:
    import optuna
    import pandas as pd

    from simulator.proxy.scenario import Scenario
    from simulator.transcripts.loaders import Transcript

__all__ = ["CHOICE_ORDER", "TUNE_FILES", "TuneResult", "tune"]

STUDY_NAME = "ctxsim-tune"
CACHE_DIR = "cache"
DEFAULT_ROLE = "default"
KNOBS_ATTR, PRUNED_ATTR, DEFINITION_ATTR = "knobs", "pruned_because", "definition"
#: Objectives by importance when several trials beat the default: fewer failed turns first.
CHOICE_ORDER: tuple[str, ...] = (
    "failed_turns_per_run",
    "rejected_per_run",
    "fact_survival_pct",
    "summarizer_usd_per_100_turns",
)
MIN_TRIALS_FOR_IMPORTANCE = 4
# PED-ANOVA's warnings about its own inputs (a direction to flip, too few trials to tell knobs apart):
# the table says the same by its values.
IMPORTANCE_WARNINGS: tuple[str, ...] = (
    "PedAnovaImportanceEvaluator computes the importances",
    "Target and region quantiles select the same set of trials",
)


@dataclass(frozen=True)
class TuneResult:
    """What a tune found. ``trials``: one row per finished trial (``number``, ``role``, ``state``,
    the knobs, the objectives, the constraints, ``feasible``, ``on_front``, ``beats_default``,
    ``pruned_because``); ``front``: the feasible trials no other beats; ``chosen``: the chosen trial's
    row (None when the default is on the front); ``verdict``: one sentence saying which;
    ``importance``: knob × objective."""

    study: optuna.Study
    trials: pd.DataFrame
    front: pd.DataFrame
    default: Mapping[str, float]
    chosen: pd.Series | None
    verdict: str
    importance: pd.DataFrame
    files: tuple[Path, ...] = ()


@dataclass(slots=True)
class _Trial:
    trial: optuna.Trial | None  # None for the default's runs
    knobs: dict[str, Any]
    specs: list[RunSpec]
    payloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    futures: list[concurrent.futures.Future[dict[str, Any]]] = field(default_factory=list)


class _InProcess(concurrent.futures.Executor):
    """Runs each submitted run at once, in this process (``workers=1``)."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:  # reported with its run, like a worker's
            future.set_exception(exc)
        return future


@contextmanager
def _quiet_optuna() -> Iterator[None]:
    import optuna

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(verbosity)


def _study(out: Path | None, seed: int, definition: Mapping[str, Any]) -> optuna.Study:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage: optuna.storages.BaseStorage
    if out is None:
        storage = optuna.storages.InMemoryStorage()
    else:
        out.mkdir(parents=True, exist_ok=True)
        storage = JournalStorage(JournalFileBackend(str(out / TUNE_FILES["journal"])))
    study = optuna.create_study(
        storage=storage,
        study_name=STUDY_NAME,
        directions=[objective.direction for objective in OBJECTIVES.values()],
        sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=5),
        load_if_exists=True,
    )
    recorded = study.user_attrs.get(DEFINITION_ATTR)
    if recorded is None:
        study.set_user_attr(DEFINITION_ATTR, dict(definition))
    elif recorded != dict(definition):
        changed = sorted(k for k in definition if recorded.get(k) != definition[k])
        raise ConfigError(
            f"{out}: this study searched another {', '.join(changed)}; resume it with the same options "
            "or tune into another --out directory"
        )
    return study


def _resume(study: optuna.Study) -> None:
    """Trials a stopped tune left running are failed and asked again (their finished runs are cached)."""
    from optuna.trial import TrialState

    for stale in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(stale.number, state=TrialState.FAIL)
        study.enqueue_trial(stale.params, user_attrs=dict(stale.user_attrs))


def _finished(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    from optuna.trial import TrialState

    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))


def tune(
    *,
    trials: int = 20,
    scenarios: str | Scenario | Iterable[str | Path | Scenario] | None = None,
    transcripts: str | Transcript | Iterable[str | Path | Transcript] | None = None,
    seeds: Iterable[int] = (0,),
    space: Iterable[str] | Mapping[str, Knob] | None = None,
    seed: int = 0,
    executor: concurrent.futures.Executor | None = None,
    workers: int | None = None,
    dask: str | None = None,
    parallel: int | None = None,
    prune: bool = True,
    out_dir: str | Path | None = None,
    figures: bool = True,
    progress: bool | None = None,
) -> TuneResult:
    """Search ``trials`` policies besides the default (module doc); raises :class:`ConfigError` for a
    bad definition before anything runs. ``seed`` seeds the sampler, ``seeds`` the replays."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ConfigError(f"tune needs a number of trials >= 1, got {trials!r}")
    if executor is not None and dask is not None:
        raise ConfigError("give either executor= or dask=, not both")
    knobs_space = resolve_space(space)
    scenario_objects = scenario_list(scenarios)
    transcript_items = transcript_list(transcripts)
    seed_list = list(seeds)
    if not seed_list or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seed_list):
        raise ConfigError(f"seeds must be integers >= 0, got {seed_list!r}")
    out = None if out_dir is None else Path(out_dir)
    definition = {
        "space": list(knobs_space),
        "scenarios": [s.name for s in scenario_objects],
        "transcripts": [t if isinstance(t, str) or t is None else t.name for t in transcript_items],
        "seeds": seed_list,
        "sampler_seed": seed,
    }
    code = code_hash()
    loaded = Transcripts()

    def specs_for(knobs: Mapping[str, Any]) -> list[RunSpec]:
        resolved = [("default", DEFAULT_POLICY, None)]
        return plan_runs(
            resolved, [dict(knobs)], scenario_objects, transcript_items, seed_list, code=code, loaded=loaded
        )

    with _quiet_optuna():
        study = _study(out, seed, definition)
        _resume(study)
        done = _finished(study)
        cache = None if out is None else out / CACHE_DIR
        with executor_for(executor, workers, dask) as pool:
            runner = _Runner(study, pool or _InProcess(), cache, specs_for, knobs_space, prune)
            runner.reference()
            runner.search(max(0, trials - len(done)), parallel or _slots(pool, workers), progress)
        return _result(study, knobs_space, out, runner, figures, definition, code, loaded)


def _slots(pool: concurrent.futures.Executor | None, workers: int | None) -> int:
    if pool is None:
        return 1
    return workers or getattr(pool, "_max_workers", None) or 2


class _Runner:
    """Asks trials, runs their replays on the pool, prunes the hopeless ones, tells the results."""

    def __init__(
        self,
        study: optuna.Study,
        pool: concurrent.futures.Executor,
        cache: Path | None,
        specs_for: Any,
        space: Mapping[str, Any],
        prune: bool,
    ) -> None:
        self.study, self.pool, self.cache = study, pool, cache
        self.specs_for, self.space, self.prune = specs_for, space, prune
        self.payloads: dict[str, dict[str, Any]] = {}  # every run seen, by key
        self.default_runs: dict[tuple[str, str, int], Mapping[str, Any]] = {}
        self.reference_rate = 1.0
        self.default_knobs: dict[str, Any] = {}
        self.default_rows: pd.DataFrame | None = None

    def _ask(self) -> _Trial:
        trial = self.study.ask()
        knobs, _policy = policy_for(suggest(trial, self.space))
        trial.set_user_attr(KNOBS_ATTR, dict(knobs))
        pending = _Trial(trial, knobs, self.specs_for(knobs))
        self._submit(pending)
        return pending

    def _submit(self, pending: _Trial) -> None:
        for spec in pending.specs:
            cached = read_cached(self.cache, spec) if self.cache is not None else None
            if cached is not None:
                pending.payloads[spec.key] = cached
            else:
                pending.futures.append(self.pool.submit(run_one, spec))

    def reference(self) -> None:
        """Run (or read back from the cache) the default's runs: the recovery rate to meet, the runs
        to compare with."""
        import pandas as pd

        self.default_knobs = {name: getattr(DEFAULT_POLICY, name) for name in self.space}
        pending = _Trial(None, self.default_knobs, self.specs_for(self.default_knobs))
        self._submit(pending)
        self._wait(pending, prunable=False)
        self.default_rows = pd.DataFrame([pending.payloads[spec.key]["row"] for spec in pending.specs])
        self.reference_rate = (
            1 - constraint_values(self.default_rows, reference_rate=1.0)["recovery_shortfall"]
        )
        self.payloads |= pending.payloads
        self.default_runs = {_run_of(p["row"]): p["row"] for p in pending.payloads.values()}

    def _wait(self, pending: _Trial, *, prunable: bool) -> str | None:
        """Collect ``pending``'s runs; the reason it was pruned, or None when every run finished."""
        for future in concurrent.futures.as_completed(pending.futures):
            if future.cancelled():
                continue
            payload = future.result()
            if self.cache is not None:
                write_cached(self.cache, payload)
            pending.payloads[payload["key"]] = payload
            reason = self._hopeless(payload["row"]) if prunable and self.prune else None
            if reason is not None:
                for other in pending.futures:
                    other.cancel()
                return reason
        if prunable and self.prune:
            for payload in pending.payloads.values():
                reason = self._hopeless(payload["row"])
                if reason is not None:
                    return reason
        return None

    def _hopeless(self, row: Mapping[str, Any]) -> str | None:
        where = f"{row['scenario']} × {row['transcript']} × seed {row['seed']}"
        if int(row["chars_lost"]):
            return f"lost {int(row['chars_lost']):,} chars on {where}"
        default = self.default_runs.get(_run_of(row))
        if default is not None and int(row["failed_episodes"]) > int(default["failed_episodes"]):
            return f"gave up a turn on {where}, which the default recovered"
        return None

    def _tell(self, pending: _Trial, state: Any, reason: str | None = None) -> None:
        from optuna.trial import TrialState

        self.payloads |= pending.payloads
        assert pending.trial is not None  # the default's runs are never told
        if state == TrialState.PRUNED:
            pending.trial.set_user_attr(PRUNED_ATTR, reason)
            self.study.tell(pending.trial, state=TrialState.PRUNED)
            return
        import pandas as pd

        rows = pd.DataFrame([pending.payloads[spec.key]["row"] for spec in pending.specs])
        for name, value in constraint_values(rows, reference_rate=self.reference_rate).items():
            pending.trial.set_constraint(name, value)
        values = objective_values(rows)
        self.study.tell(pending.trial, [values[name] for name in OBJECTIVES])

    def search(self, count: int, parallel: int, progress: bool | None) -> None:
        from optuna.trial import TrialState
        from tqdm.auto import tqdm

        with tqdm(
            total=count, desc="ctxsim tune", unit="trial", disable=None if progress is None else not progress
        ) as bar:
            in_flight: list[_Trial] = []
            asked = 0
            while asked < count or in_flight:
                while asked < count and len(in_flight) < max(1, parallel):
                    in_flight.append(self._ask())
                    asked += 1
                pending = in_flight.pop(0)
                reason = self._wait(pending, prunable=True)
                self._tell(pending, TrialState.PRUNED if reason else TrialState.COMPLETE, reason)
                bar.update()


def _python(value: Any) -> Any:
    """A table cell as the plain Python value the trial ran with (numpy scalars unwrapped)."""
    return value.item() if hasattr(value, "item") else value


def _run_of(row: Mapping[str, Any]) -> tuple[str, str, int]:
    return str(row["scenario"]), str(row["transcript"]), int(row["seed"])


# -- results ----------------------------------------------------------------------------------------
def _trial_table(study: optuna.Study, space: Mapping[str, Any], runner: _Runner) -> pd.DataFrame:
    import pandas as pd

    default_values = objective_values(runner.default_rows)
    default_constraints = constraint_values(runner.default_rows, reference_rate=runner.reference_rate)
    rows: list[dict[str, Any]] = [
        {
            "number": pd.NA,
            "role": DEFAULT_ROLE,
            "state": "complete",
            **runner.default_knobs,
            **default_values,
            **default_constraints,
            "feasible": all(value <= 0 for value in default_constraints.values()),
            "pruned_because": None,
        }
    ]
    for trial in _finished(study):
        complete = trial.values is not None
        constraints = {name: trial.system_attrs.get(f"constraints:{name}", math.nan) for name in CONSTRAINTS}
        values = (
            dict(zip(OBJECTIVES, trial.values, strict=True))
            if complete
            else dict.fromkeys(OBJECTIVES, math.nan)
        )
        knobs = trial.user_attrs.get(KNOBS_ATTR, trial.params)
        rows.append(
            {
                "number": trial.number,
                "role": "search",
                "state": trial.state.name.lower(),
                **{name: knobs.get(name) for name in space},
                **values,
                **constraints,
                "feasible": complete and all(value <= 0 for value in constraints.values()),
                "pruned_because": trial.user_attrs.get(PRUNED_ATTR),
            }
        )
    table = pd.DataFrame(rows)
    table["number"] = table["number"].astype("Int64")
    points = [{name: row[name] for name in OBJECTIVES} for _, row in table.iterrows()]
    feasible = [point for point, ok in zip(points, table["feasible"], strict=True) if ok]
    table["on_front"] = [
        bool(ok) and not any(dominates(other, point) for other in feasible)
        for point, ok in zip(points, table["feasible"], strict=True)
    ]
    table["beats_default"] = [
        bool(ok) and dominates(point, default_values)
        for point, ok in zip(points, table["feasible"], strict=True)
    ]
    return table


def _choose(table: pd.DataFrame) -> pd.Series | None:
    candidates = table[table["beats_default"]]
    if candidates.empty:
        return None
    keys = [(name, OBJECTIVES[name].direction == "minimize") for name in CHOICE_ORDER]
    ordered = candidates.sort_values([k for k, _ in keys], ascending=[a for _, a in keys], kind="stable")
    return ordered.iloc[0]


def _verdict(table: pd.DataFrame, chosen: pd.Series | None, default: Mapping[str, float]) -> str:
    searched = table[table["role"] != DEFAULT_ROLE]
    counts = (
        f"{len(searched)} trials: {int(searched['feasible'].sum())} feasible, "
        f"{int((searched['state'] == 'pruned').sum())} pruned"
    )
    if chosen is None:
        return (
            f"no trial beats the default on one objective without losing on another: the default is on "
            f"the front ({counts})"
        )
    better = [
        OBJECTIVES[name].label for name in OBJECTIVES if OBJECTIVES[name].better(chosen[name], default[name])
    ]
    return (
        f"trial {int(chosen['number'])} beats the default on {', '.join(better)} without losing on the "
        f"others ({counts})"
    )


def _lower_is_better(index: int, flip: bool) -> Callable[[optuna.trial.FrozenTrial], float]:
    """Objective ``index`` of a trial, negated when higher is better (PED-ANOVA ranks low values)."""

    def target(trial: optuna.trial.FrozenTrial) -> float:
        value = float(trial.values[index])
        return -value if flip else value

    return target


def _importance(study: optuna.Study, space: Mapping[str, Any]) -> pd.DataFrame:
    import optuna
    import pandas as pd
    from optuna.trial import TrialState

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    table = pd.DataFrame(index=pd.Index(list(space), name="knob"))
    if len(complete) < MIN_TRIALS_FOR_IMPORTANCE:
        return table
    for index, (name, objective) in enumerate(OBJECTIVES.items()):
        with warnings.catch_warnings():
            for message in IMPORTANCE_WARNINGS:
                warnings.filterwarnings("ignore", message=message)
            found = optuna.importance.get_param_importances(
                study,
                evaluator=optuna.importance.PedAnovaImportanceEvaluator(),
                params=list(space),
                target=_lower_is_better(index, objective.direction == "maximize"),
            )
        table[name] = [round(found.get(knob, 0.0), 4) for knob in space]
    return table


def _result(
    study: optuna.Study,
    space: Mapping[str, Any],
    out: Path | None,
    runner: _Runner,
    figures: bool,
    definition: Mapping[str, Any],
    code: str,
    loaded: Transcripts,
) -> TuneResult:
    table = _trial_table(study, space, runner)
    default_row = table[table["role"] == DEFAULT_ROLE].iloc[0]
    default = {name: float(default_row[name]) for name in OBJECTIVES}
    chosen = _choose(table)
    front = table[table["on_front"]]
    result = TuneResult(
        study=study,
        trials=table,
        front=front,
        default=default,
        chosen=chosen,
        verdict=_verdict(table, chosen, default),
        importance=_importance(study, space),
    )
    if out is None:
        return result
    payloads = dict(runner.payloads)  # trials finished in an earlier session: their runs are cached
    for _, row in table[table["state"] == "complete"].iterrows():
        for spec in runner.specs_for({name: _python(row[name]) for name in space}):
            if spec.key not in payloads and runner.cache is not None:
                cached = read_cached(runner.cache, spec)
                if cached is not None:
                    payloads[spec.key] = cached
    files = write_tune_files(
        out,
        trials=result.trials,
        front=result.front,
        importance=result.importance,
        chosen=result.chosen,
        verdict=result.verdict,
        space=space,
        payloads=payloads,
        specs_for=runner.specs_for,
        figures=figures,
        definition=definition,
        code=code,
        loaded=loaded,
    )
    return dataclasses.replace(result, files=tuple(files))
