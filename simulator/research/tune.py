"""Policy search with optuna: the best policies for a set of scenarios, against the default.

::

    result = tune(trials=20, scenarios=["openai-128k-overflow", "corporate-128k-waf"], seeds=[0, 1],
                  out_dir="runs/tune")
    print(result.verdict)

A multi-objective study (:data:`simulator.research.objectives.OBJECTIVES`: summarizer USD, fact
survival, rejected requests, failed turns) over the knobs of
:data:`simulator.research.space.SEARCH_SPACE`, under two constraints (no char lost; a recovery rate at
least the default's, :data:`~simulator.research.objectives.CONSTRAINTS`) handed to the sampler with
``Trial.set_constraint``. The default policy is trial 0, measured on the same runs: it is the
reference of the recovery constraint and the policy every other is compared with.

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
from types import MappingProxyType
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
from simulator.research.space import policy_for, resolve_space, suggest
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

if TYPE_CHECKING:
    import optuna
    import pandas as pd

    from simulator.proxy.scenario import Scenario
    from simulator.transcripts.loaders import Transcript

__all__ = ["CHOICE_ORDER", "TUNE_FILES", "TuneResult", "tune"]

STUDY_NAME = "ctxsim-tune"
CACHE_DIR = "cache"
TUNE_FILES: Mapping[str, str] = MappingProxyType(
    {
        "journal": "study.journal",
        "trials": "trials",
        "front": "front",
        "importance": "importance",
        "env": "policy.env",
        "toml": "policy.toml",
    }
)
ROLE_ATTR, DEFAULT_ROLE = "role", "default"
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
    trial: optuna.Trial
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
    space: Iterable[str] | None = None,
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
        done = [t for t in _finished(study) if t.user_attrs.get(ROLE_ATTR) != DEFAULT_ROLE]
        if not any(t.user_attrs.get(ROLE_ATTR) == DEFAULT_ROLE for t in _finished(study)):
            defaults = {name: getattr(DEFAULT_POLICY, name) for name in knobs_space}
            study.enqueue_trial(defaults, user_attrs={ROLE_ATTR: DEFAULT_ROLE})
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

    def _ask(self) -> _Trial:
        trial = self.study.ask()
        knobs, _policy = policy_for(suggest(trial, self.space))
        trial.set_user_attr(KNOBS_ATTR, dict(knobs))
        pending = _Trial(trial, knobs, self.specs_for(knobs))
        for spec in pending.specs:
            cached = read_cached(self.cache, spec) if self.cache is not None else None
            if cached is not None:
                pending.payloads[spec.key] = cached
            else:
                pending.futures.append(self.pool.submit(run_one, spec))
        return pending

    def reference(self) -> None:
        """Run (or read back) the default's trial: the recovery rate to meet and the runs to compare."""
        from optuna.trial import TrialState

        finished = [t for t in _finished(self.study) if t.user_attrs.get(ROLE_ATTR) == DEFAULT_ROLE]
        if finished:
            knobs = dict(finished[0].user_attrs[KNOBS_ATTR])
            specs = self.specs_for(knobs)
            found = {spec.key: read_cached(self.cache, spec) if self.cache else None for spec in specs}
            payloads = {key: payload for key, payload in found.items() if payload is not None}
            missing = [spec for spec in specs if spec.key not in payloads]
            payloads |= {spec.key: run_one(spec) for spec in missing}
        else:
            pending = self._ask()
            self._wait(pending, prunable=False)
            payloads = pending.payloads
            self._tell(pending, TrialState.COMPLETE)
        import pandas as pd

        rows = pd.DataFrame([payload["row"] for payload in payloads.values()])
        self.reference_rate = 1 - constraint_values(rows, reference_rate=1.0)["recovery_shortfall"]
        self.payloads |= payloads
        self.default_runs = {_run_of(p["row"]): p["row"] for p in payloads.values()}

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


def _run_of(row: Mapping[str, Any]) -> tuple[str, str, int]:
    return str(row["scenario"]), str(row["transcript"]), int(row["seed"])


# -- results ----------------------------------------------------------------------------------------
def _trial_table(study: optuna.Study, space: Mapping[str, Any]) -> pd.DataFrame:
    import pandas as pd

    rows = []
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
                "role": trial.user_attrs.get(ROLE_ATTR, "search"),
                "state": trial.state.name.lower(),
                **{name: knobs.get(name) for name in space},
                **values,
                **constraints,
                "feasible": complete and all(value <= 0 for value in constraints.values()),
                "pruned_because": trial.user_attrs.get(PRUNED_ATTR),
            }
        )
    table = pd.DataFrame(rows).sort_values("number").reset_index(drop=True)
    feasible = table[table["feasible"]]
    points = [{name: row[name] for name in OBJECTIVES} for _, row in feasible.iterrows()]
    front = {
        number
        for number, point in zip(feasible["number"], points, strict=True)
        if not any(dominates(other, point) for other in points)
    }
    (default,) = [point for point, role in zip(points, feasible["role"], strict=True) if role == DEFAULT_ROLE]
    table["on_front"] = table["number"].isin(front)
    table["beats_default"] = [
        bool(row["feasible"]) and dominates({name: row[name] for name in OBJECTIVES}, default)
        for _, row in table.iterrows()
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
    table = _trial_table(study, space)
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
    from simulator.research.tune_files import write_tune_files

    files = write_tune_files(
        out, result, space, runner.payloads, runner.specs_for, figures, definition, code, loaded
    )
    return dataclasses.replace(result, files=tuple(files))
