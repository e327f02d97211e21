"""Sweeps: policies × knob points × scenarios × transcripts × seeds, on any executor, cached and resumable.

::

    frame = sweep(grid={"budget_ratio": [0.5, 0.6, 0.75], "emergency_keep_messages": [6, 10]},
                  scenarios=["corporate-128k-waf", "anthropic-200k-overflow"],
                  policies="default,baselines", out_dir="runs/sweep")

One replay (:func:`simulator.replay.replay`) per run; one DataFrame row per run
(:data:`LEADING_COLUMNS`, the knob columns, then :func:`simulator.research.metrics.summarize_run`'s
numbers with ``fact_survival``, ``chars_lost``, ``outcome`` and ``expected_outcome``).

- **Points**: ``grid`` is expanded to its cartesian product, or — with ``random=N`` —
  N points are drawn with ``random.Random(seed)``, each knob from its values or from a
  :class:`Uniform` range. Knobs are Policy fields, validated up front by
  ``Policy.replace`` (an unknown field is an error that lists the valid ones). A
  strategy's own overrides win over the knobs (they define it). A point's runs are
  labelled ``name[knob=value,...]``.
- **Execution**: missing runs go to ``executor`` (any :class:`concurrent.futures.Executor`),
  else a Dask cluster's executor (``dask="local"`` starts a ``LocalCluster``, any other
  value is a scheduler address), else a :class:`~concurrent.futures.ProcessPoolExecutor`
  of ``workers`` processes (``workers=1`` runs in this process). The worker,
  :func:`run_one`, is a picklable top-level function.
- **Cache**: each finished run is written atomically to ``cache_dir/<key>.json``
  (default ``out_dir/cache``) as soon as it finishes. The key hashes the transcript
  (sha256), the policy (label and every field value), the strategy, the scenario (name
  and file hash), the seed and the code (:func:`code_hash`): a rerun computes only what
  changed, and an interrupted sweep resumes where it stopped.
- **Files** (with ``out_dir``): ``attempts.csv`` (every attempt, knob columns added),
  ``summary.csv`` (the rows), ``manifest.json`` (definition, code version, hashes,
  policies, runs) and the report of :func:`simulator.research.report.write_report`.

Progress shows with ``tqdm.auto`` (terminal or notebook); ``progress=None`` lets tqdm
decide (off when not a terminal), True/False force it.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import itertools
import json
import multiprocessing
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxrecover.errors import ConfigError
from ctxrecover.policy import Policy
from simulator.proxy.scenario import Scenario, list_scenarios, load_scenario
from simulator.replay import replay
from simulator.research.baselines import (
    BASELINES,
    POLICY_PRESETS,
    Strategy,
    resolve_policies,
    strategy_fields,
)
from simulator.research.metrics import RUN_COLUMNS, AttemptRecord, records_to_frame
from simulator.research.report import ATTEMPTS_CSV, MANIFEST_JSON, SUMMARY_CSV, write_report
from simulator.research.run_files import code_version, scenario_entry, write_manifest
from simulator.transcripts.loaders import Transcript
from simulator.workloads import load_named_transcript, workload_transcript

if TYPE_CHECKING:
    import pandas as pd
from simulator.research.grid import Uniform, Values, checked_values, expand_grid, random_points

__all__ = [
    "CACHE_DIR",
    "LEADING_COLUMNS",
    "RunSpec",
    "Transcripts",
    "code_hash",
    "executor_for",
    "knob_column",
    "plan_runs",
    "read_cached",
    "rows_frame",
    "run_one",
    "scenario_list",
    "sweep",
    "transcript_list",
    "write_cached",
    "write_outputs",
]


CACHE_DIR = "cache"
CACHE_SUFFIX = ".json"
REPO_ROOT = Path(__file__).resolve().parents[2]
# What the code version hashes: the two packages and the fault pages the middlebox serves.
CODE_GLOBS: tuple[tuple[str, str], ...] = (
    ("ctxrecover", "*.py"),
    ("simulator", "*.py"),
    ("fixtures/pages", "*"),
)
LOCAL_DASK = "local"
PROGRESS_DESC = "ctxsim sweep"
WORKLOAD = "workload"  # how the manifest names a scenario's own transcript
KNOB_PREFIX = "policy."  # a knob whose name is already a column (e.g. context_window) gets this prefix
#: The first columns of a sweep row; knob columns follow, then the run's numbers.
LEADING_COLUMNS: tuple[str, ...] = ("policy", "base_policy", "scenario", "transcript", "seed")
TRAILING_COLUMNS: tuple[str, ...] = (
    "outcome",
    "expected_outcome",
    "turns",
    "turns_total",
    "turns_completed",
    "attempts",
    "failures_by_kind",
    "recovered_episodes",
    "failed_episodes",
    "rejected_requests",
    "wasted_retries",
    "wire_bytes",
    "summarizer_calls",
    "summarizer_cost_usd",
    "provider_cost_usd",
    "input_cost_usd",
    "cache_adjusted_cost_usd",
    "cache_rebuilds",
    "chars_archived",
    "chars_lost",
    "fact_survival",
    "run_id",
    "key",
)
RESERVED_COLUMNS = frozenset(RUN_COLUMNS) | frozenset(LEADING_COLUMNS) | frozenset(TRAILING_COLUMNS)


def knob_column(name: str) -> str:
    """The column of a swept knob: its name, prefixed with ``policy.`` when that is already a column."""
    return f"{KNOB_PREFIX}{name}" if name in RESERVED_COLUMNS else name


def _label(name: str, knobs: Mapping[str, Any]) -> str:
    if not knobs:
        return name
    return f"{name}[{','.join(f'{k}={v}' for k, v in knobs.items())}]"


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run of a sweep: what :func:`run_one` needs, and its cache ``key``.

    ``base`` names the preset or baseline; ``transcript`` is a name or path, a
    :class:`Transcript`, or None for the scenario's own workload.
    """

    key: str
    policy: str
    base: str
    knobs: tuple[tuple[str, Any], ...]
    scenario: Scenario
    transcript: str | Transcript | None
    seed: int


def _policy_for(base: str, knobs: Mapping[str, Any]) -> tuple[Policy, Strategy | None]:
    strategy = BASELINES.get(base)
    policy = POLICY_PRESETS.get(base, POLICY_PRESETS["default"]).replace(**knobs)
    return policy, strategy


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool) or value is None else str(value)


def run_one(spec: RunSpec) -> dict[str, Any]:
    """Replay one run of a sweep and return its cache payload (plain JSON data).

    The payload holds the ``key``, the sweep ``row``, the ``attempts`` (one dict per
    :class:`~simulator.research.metrics.AttemptRecord`) and the manifest's ``run`` entry.
    """
    knobs = dict(spec.knobs)
    policy, strategy = _policy_for(spec.base, knobs)
    result = replay(
        spec.transcript,
        spec.scenario,
        policy=policy,
        seed=spec.seed,
        policy_name=spec.policy,
        strategy=strategy,
    )
    summary = result.summary
    row = {
        "policy": spec.policy,
        "base_policy": spec.base,
        **{knob_column(name): value for name, value in knobs.items()},
        **{name: summary[name] for name in ("scenario", "transcript", "seed")},
        **{name: summary[name] for name in TRAILING_COLUMNS if name in summary},
        "failures_by_kind": ", ".join(f"{k}={n}" for k, n in summary["failures_by_kind"].items()),
        "key": spec.key,
    }
    run = {
        "run_id": result.run_id,
        "key": spec.key,
        "policy": spec.policy,
        "base_policy": spec.base,
        "knobs": knobs,
        "scenario": result.scenario.name,
        "transcript": result.transcript.name,
        "transcript_sha256": result.transcript.sha256,
        "seed": result.seed,
        "outcome": result.outcome,
        "expected_outcome": result.scenario.expect.outcome,
        "turns": result.turns,
        "turns_completed": result.turns_completed,
        "attempts": len(result.records),
        "chars_lost": result.chars_lost,
        "fact_survival": result.fact_survival,
        "error": result.error,
    }
    attempts = [{name: _jsonable(value) for name, value in r.to_row().items()} for r in result.records]
    return {"key": spec.key, "row": row, "attempts": attempts, "run": run}


def code_hash(root: Path = REPO_ROOT) -> str:
    """sha256 of the simulator's code: ctxrecover and simulator sources and the fault pages."""
    digest = hashlib.sha256()
    for folder, pattern in CODE_GLOBS:
        for path in sorted((root / folder).rglob(pattern)):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(path.relative_to(root).as_posix().encode())
                digest.update(b"\0")
                digest.update(path.read_bytes())
    return digest.hexdigest()


def _scenario_hash(scenario: Scenario) -> str:
    if scenario.source is not None and Path(scenario.source).is_file():
        return hashlib.sha256(Path(scenario.source).read_bytes()).hexdigest()
    return hashlib.sha256(repr(scenario).encode()).hexdigest()


def _policy_fields(policy: Policy) -> dict[str, Any]:
    return {name: getattr(policy, name) for name in Policy.fields()}


def _run_key(identity: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()


def _read_cache(path: Path, key: str) -> dict[str, Any] | None:
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) and payload.get("key") == key else None


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class _Runs:
    """The missing runs as they finish: ``(spec, payload)``, or ``(spec, error)`` for a run that raised.

    Without an executor (``workers=1``) they run one by one in this process; :meth:`cancel`
    stops what has not started (pending futures, or the rest of the serial loop).
    """

    def __init__(self, executor: concurrent.futures.Executor | None, specs: list[RunSpec]) -> None:
        self.executor = executor
        self.specs = specs
        self.futures: dict[concurrent.futures.Future[dict[str, Any]], RunSpec] = {}
        self.cancelled = False

    def __iter__(self) -> Iterator[tuple[RunSpec, dict[str, Any] | Exception]]:
        if self.executor is None:
            for spec in self.specs:
                if self.cancelled:
                    return
                try:
                    yield spec, run_one(spec)
                except Exception as exc:  # reported to the caller with its run
                    yield spec, exc
            return
        self.futures = {self.executor.submit(run_one, spec): spec for spec in self.specs}
        for future in concurrent.futures.as_completed(self.futures):
            if future.cancelled():
                continue
            try:
                yield self.futures[future], future.result()
            except Exception as exc:  # reported to the caller with its run
                yield self.futures[future], exc

    def cancel(self) -> None:
        self.cancelled = True
        for future in self.futures:
            future.cancel()


# Imported once by the forkserver, so each worker starts with them loaded (~1 s per sweep otherwise).
WORKER_PRELOAD = ("simulator.research.sweep", "pandas")


def _process_context() -> multiprocessing.context.BaseContext:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(WORKER_PRELOAD))
    return context


@contextmanager
def executor_for(
    executor: concurrent.futures.Executor | None, workers: int | None, dask: str | None
) -> Iterator[concurrent.futures.Executor | None]:
    """``executor``, else a Dask cluster's executor (``local`` or an address), else a process pool of
    ``workers`` (None: one per CPU); None for ``workers=1`` (run in this process)."""
    if executor is not None:
        yield executor
        return
    if dask is not None:
        from distributed import Client, LocalCluster

        with ExitStack() as stack:
            if dask == LOCAL_DASK:
                cluster = stack.enter_context(
                    LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None)
                )
                client = stack.enter_context(Client(cluster))
            else:
                client = stack.enter_context(Client(dask))
            yield client.get_executor()
        return
    if workers == 1:
        yield None
        return
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=_process_context()) as pool:
        yield pool


def scenario_list(scenarios: str | Scenario | Iterable[str | Path | Scenario] | None) -> list[Scenario]:
    """Scenarios by name, path or object (a comma-separated string too); None: every bundled one."""
    if scenarios is None:
        items: list[str | Path | Scenario] = list(list_scenarios())
    elif isinstance(scenarios, str | Scenario):
        items = [scenarios] if isinstance(scenarios, Scenario) else [s.strip() for s in scenarios.split(",")]
    else:
        items = list(scenarios)
    loaded = [item if isinstance(item, Scenario) else load_scenario(item) for item in items if item]
    if not loaded:
        raise ConfigError("no scenario given; name bundled scenarios or scenario files")
    return loaded


def transcript_list(
    transcripts: str | Transcript | Iterable[str | Path | Transcript] | None,
) -> list[str | Transcript | None]:
    """Transcripts by name, path or object (a comma-separated string too); None: each scenario's own."""
    if transcripts is None:
        return [None]
    if isinstance(transcripts, str | Transcript):
        return (
            [transcripts]
            if isinstance(transcripts, Transcript)
            else [t.strip() for t in transcripts.split(",") if t.strip()]
        )
    return [item if isinstance(item, Transcript) else str(item) for item in transcripts]


class Transcripts:
    """Transcripts of a sweep, loaded once in this process for their hashes."""

    def __init__(self) -> None:
        self.loaded: dict[str, Transcript] = {}

    def get(self, item: str | Transcript | None, scenario: Scenario) -> Transcript:
        if isinstance(item, Transcript):
            return self.loaded.setdefault(f"object:{item.sha256}", item)
        key = f"{WORKLOAD}:{scenario.name}:{_scenario_hash(scenario)}" if item is None else item
        if key not in self.loaded:
            self.loaded[key] = workload_transcript(scenario) if item is None else load_named_transcript(item)
        return self.loaded[key]


def _transcript_label(item: str | Transcript | None) -> str:
    return WORKLOAD if item is None else item.name if isinstance(item, Transcript) else item


def _noted(error: Exception, spec: RunSpec) -> Exception:
    error.add_note(
        f"in the sweep run {spec.policy} × {spec.scenario.name} × "
        f"{_transcript_label(spec.transcript)} × seed {spec.seed}"
    )
    return error


def _progress(total: int, initial: int, progress: bool | None) -> Any:
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        initial=initial,
        desc=PROGRESS_DESC,
        unit="run",
        disable=None if progress is None else not progress,
    )


def sweep(
    *,
    grid: Mapping[str, Values] | None = None,
    random: int | None = None,
    seed: int = 0,
    scenarios: str | Scenario | Iterable[str | Path | Scenario] | None = None,
    transcripts: str | Transcript | Iterable[str | Path | Transcript] | None = None,
    policies: str | Iterable[str] = ("default",),
    seeds: Iterable[int] = (0,),
    executor: concurrent.futures.Executor | None = None,
    workers: int | None = None,
    dask: str | None = None,
    cache_dir: str | Path | None = None,
    out_dir: str | Path | None = None,
    figures: bool = True,
    progress: bool | None = None,
    on_result: Callable[[dict[str, Any]], Any] | None = None,
) -> pd.DataFrame:
    """Run every policy × knob point × scenario × transcript × seed; one row per run (see the module doc).

    ``scenarios`` (default: every bundled one) and ``transcripts`` (default: each
    scenario's workload) take names, paths or objects; ``policies`` takes preset and
    baseline names or ``baselines`` (:func:`simulator.research.baselines.resolve_policies`).
    ``seed`` seeds the random search, ``seeds`` the replays. ``on_result`` sees each
    freshly computed payload right after it is cached. The frame's ``attrs`` say how
    many runs were ``computed`` and how many came ``from_cache``. Raises
    :class:`~ctxrecover.errors.ConfigError` for a bad definition before anything runs.
    """

    if executor is not None and dask is not None:
        raise ConfigError("give either executor= or dask=, not both")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ConfigError(f"workers must be a positive number of processes, got {workers!r}")
    points = random_points(grid or {}, random, seed) if random is not None else expand_grid(grid)
    resolved = resolve_policies(policies)
    for _name, policy, _strategy in resolved:
        for point in points:
            policy.replace(**point)  # raises ConfigError naming the field or value
    scenario_objects = scenario_list(scenarios)
    transcript_items = transcript_list(transcripts)
    seed_list = list(seeds)
    if not seed_list or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seed_list):
        raise ConfigError(f"seeds must be integers >= 0, got {seed_list!r}")

    code = code_hash()
    loaded = Transcripts()
    specs = plan_runs(
        resolved, points, scenario_objects, transcript_items, seed_list, code=code, loaded=loaded
    )

    cache = Path(cache_dir) if cache_dir is not None else Path(out_dir) / CACHE_DIR if out_dir else None
    payloads: dict[str, dict[str, Any]] = {}
    if cache is not None:
        for spec in specs:
            found = read_cached(cache, spec)
            if found is not None:
                payloads[spec.key] = found
    from_cache = len({spec.key for spec in specs if spec.key in payloads})
    missing = list({spec.key: spec for spec in specs if spec.key not in payloads}.values())
    computed = 0
    if missing:
        with (
            _progress(len(missing) + from_cache, from_cache, progress) as bar,
            executor_for(executor, workers, dask) as pool,
        ):
            runs = _Runs(pool, missing)
            failure: Exception | None = None
            try:
                for spec, outcome in runs:
                    if isinstance(outcome, Exception):  # stop what has not started, keep what finishes
                        if failure is None:
                            failure = _noted(outcome, spec)
                            runs.cancel()
                        continue
                    payloads[spec.key] = outcome
                    if cache is not None:
                        write_cached(cache, outcome)
                    computed += 1
                    bar.update()
                    if on_result is not None:
                        on_result(outcome)
            except BaseException:
                runs.cancel()
                raise
            if failure is not None:
                raise failure

    knob_columns = list(dict.fromkeys(knob_column(k) for point in points for k in point))
    frame = rows_frame(specs, payloads, knob_columns)
    if out_dir is not None:
        write_outputs(
            Path(out_dir),
            frame,
            specs,
            payloads,
            knob_columns,
            figures,
            definition={
                "grid": {
                    k: (v if not isinstance(v, Uniform) else {"uniform": [v.low, v.high]})
                    for k, v in checked_values(grid or {}).items()
                },
                "random": random,
                "seed": seed,
                "policies": [name for name, _p, _s in resolved],
                "scenarios": [s.name for s in scenario_objects],
                "transcripts": [_transcript_label(t) for t in transcript_items],
                "seeds": seed_list,
            },
            code=code,
            resolved=resolved,
            loaded=loaded,
        )
    frame.attrs["computed"] = computed
    frame.attrs["from_cache"] = from_cache
    return frame


def plan_runs(
    resolved: Sequence[tuple[str, Policy, Strategy | None]],
    points: list[dict[str, Any]],
    scenarios: list[Scenario],
    transcripts: list[str | Transcript | None],
    seeds: list[int],
    *,
    code: str,
    loaded: Transcripts,
) -> list[RunSpec]:
    """One :class:`RunSpec` per policy × point × scenario × transcript × seed, keyed for the cache."""
    specs: list[RunSpec] = []
    for (name, _policy, strategy), point, scenario, item, run_seed in itertools.product(
        resolved, points, scenarios, transcripts, seeds
    ):
        policy, _ = _policy_for(name, point)
        effective = policy if strategy is None else strategy.apply(policy)
        label = _label(name, point)
        transcript = loaded.get(item, scenario)
        identity = {
            "transcript_sha256": transcript.sha256,
            "policy": {"name": label, "fields": _policy_fields(effective)},
            "strategy": name if strategy is not None else None,
            "scenario": {"name": scenario.name, "sha256": _scenario_hash(scenario)},
            "seed": run_seed,
            "code": code,
        }
        specs.append(RunSpec(_run_key(identity), label, name, tuple(point.items()), scenario, item, run_seed))
    return specs


def read_cached(cache: Path, spec: RunSpec) -> dict[str, Any] | None:
    """The cached payload of ``spec`` in ``cache``, or None (missing, unreadable or another key's)."""
    return _read_cache(cache / f"{spec.key}{CACHE_SUFFIX}", spec.key)


def write_cached(cache: Path, payload: dict[str, Any]) -> None:
    """Store a :func:`run_one` payload in ``cache``, atomically."""
    _write_atomically(cache / f"{payload['key']}{CACHE_SUFFIX}", json.dumps(payload))


def rows_frame(
    specs: list[RunSpec], payloads: Mapping[str, dict[str, Any]], knob_columns: list[str]
) -> pd.DataFrame:
    """The sweep rows of ``specs`` (one per run, in order): leading columns, knobs, the run's numbers."""
    import pandas as pd

    frame = pd.DataFrame([payloads[spec.key]["row"] for spec in specs])
    ordered = [*LEADING_COLUMNS, *knob_columns, *[c for c in TRAILING_COLUMNS if c in frame.columns]]
    return frame[ordered]


def write_outputs(
    out: Path,
    frame: pd.DataFrame,
    specs: list[RunSpec],
    payloads: dict[str, dict[str, Any]],
    knob_columns: list[str],
    figures: bool,
    *,
    definition: dict[str, Any],
    code: str,
    resolved: list[tuple[str, Policy, Strategy | None]],
    loaded: Transcripts,
    kind: str = "sweep",
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Write a sweep (or tune) directory: attempts, summary, manifest (``kind``, ``extra`` entries
    added) and, with ``figures``, its report."""
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    parts = []
    for spec in specs:
        attempts = records_to_frame(AttemptRecord(**row) for row in payloads[spec.key]["attempts"])
        for name, value in spec.knobs:
            attempts[knob_column(name)] = value
        parts.append(attempts)
    pd.concat(parts, ignore_index=True).to_csv(out / ATTEMPTS_CSV, index=False, lineterminator="\n")
    frame.to_csv(out / SUMMARY_CSV, index=False, lineterminator="\n")
    files = [ATTEMPTS_CSV, SUMMARY_CSV, MANIFEST_JSON]
    scenarios = {spec.scenario.name: spec.scenario for spec in specs}
    manifest = {
        "kind": kind,
        "code_version": {**code_version(), "sha256": code},
        kind: definition,
        **(extra or {}),
        "knob_columns": knob_columns,
        "policies": [
            {
                "name": name,
                "strategy": None if strategy is None else strategy_fields(strategy),
                "fields": _policy_fields(policy if strategy is None else strategy.apply(policy)),
            }
            for name, policy, strategy in resolved
        ],
        "scenarios": [{**scenario_entry(s), "sha256": _scenario_hash(s)} for s in scenarios.values()],
        "transcripts": [
            {"name": t.name, "source": t.source_path, "format": t.format, "sha256": t.sha256}
            for t in {t.sha256: t for t in loaded.loaded.values()}.values()
        ],
        "runs": [payloads[spec.key]["run"] for spec in specs],
        "files": files,
    }
    write_manifest(out / MANIFEST_JSON, manifest)
    if figures:
        write_report(out)
