"""What a run directory holds: the attempt CSV, the manifest and the quick-look figures.

The quick look (``ctxsim run --figures``) is a budget curve per run and the outcome matrix, drawn
by :mod:`simulator.research.figures` (the full report is ``ctxsim report RUN_DIR``).
:class:`FigureWriter` draws them in a worker process while the replays still run: drawing costs
about as much CPU as the replays, and the overlap hides it only where a core is free.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import subprocess
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ctxrecover.policy import Policy
from simulator.proxy.scenario import Scenario
from simulator.recorder import proxy_cap
from simulator.replay import ReplayResult, expectation_problems

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "ATTEMPTS_CSV",
    "FigureWriter",
    "MANIFEST_JSON",
    "OUTCOME_MATRIX_PNG",
    "TIMING_COLUMNS",
    "code_version",
    "manifest",
    "scenario_entry",
    "write_attempts_csv",
    "write_figures",
    "write_manifest",
]


ATTEMPTS_CSV = "attempts.csv"
MANIFEST_JSON = "manifest.json"
OUTCOME_MATRIX_PNG = "outcome-matrix.png"
TIMING_COLUMNS: tuple[str, ...] = ("elapsed_ms",)
REPO_ROOT = Path(__file__).resolve().parents[2]
GIT_DESCRIBE = ("git", "describe", "--always", "--dirty", "--tags")
GIT_TIMEOUT_S = 5.0
PACKAGE = "ctxrecover"
PNG_METADATA: Mapping[str, None] = MappingProxyType({"Software": None})  # same figure, same bytes
# The figure worker: a fresh interpreter (no fork of a process that may hold threads).
WORKER_START_METHODS: tuple[str, ...] = ("forkserver", "spawn")


def write_attempts_csv(results: Sequence[ReplayResult], path: Path, *, timing: bool = True) -> Path:
    """Every attempt of every replay, :data:`~simulator.research.metrics.RUN_COLUMNS` in order.

    ``timing=False`` leaves out :data:`TIMING_COLUMNS` (wall time), so two runs of
    the same inputs and seed give byte-identical files.
    """
    import pandas as pd

    frame = pd.concat([r.frame for r in results], ignore_index=True)
    if not timing:
        frame = frame.drop(columns=list(TIMING_COLUMNS))
    frame.to_csv(path, index=False, lineterminator="\n")
    return path


def code_version() -> dict[str, str | None]:
    """The package version and ``git describe`` of the checkout (None outside a git checkout)."""
    from importlib import metadata

    try:
        package = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        import ctxrecover

        package = ctxrecover.__version__
    try:
        described = subprocess.run(
            GIT_DESCRIBE, cwd=REPO_ROOT, capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False
        )
        git = described.stdout.strip() if described.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        git = None
    return {"package": package, "git": git or None}


def _policy_fields(policy: Policy) -> dict[str, Any]:
    return {f.name: getattr(policy, f.name) for f in dataclasses.fields(policy) if f.name != "env_problems"}


def scenario_entry(scenario: Scenario) -> dict[str, Any]:
    """A scenario as a manifest records it (runs and sweeps alike): name, source, description, seed,
    its provider (context window included: the budget curves draw it), proxy cap, policy overrides
    and expectation."""
    return {
        "name": scenario.name,
        "source": str(scenario.source) if scenario.source else None,
        "description": scenario.description,
        "seed": scenario.seed,
        "provider": dataclasses.asdict(scenario.provider),
        "proxy_cap": proxy_cap(scenario),
        "policy_overrides": scenario.policy_overrides(),
        "expect": dataclasses.asdict(scenario.expect),
    }


def manifest(
    results: Sequence[ReplayResult],
    *,
    policy: Policy,
    policy_name: str,
    seed: int | None,
    transport: str,
    files: Sequence[str] = (),
) -> dict[str, Any]:
    """The run manifest: code version, policy (every field), scenarios, transcripts and their hashes, seed."""
    scenarios = {r.scenario.name: r.scenario for r in results}
    transcripts = {r.transcript.name: r.transcript for r in results}
    return {
        "code_version": code_version(),
        "policy": {"name": policy_name, "fields": _policy_fields(policy)},
        "seed": seed,
        "transport": transport,
        "scenarios": [scenario_entry(s) for s in scenarios.values()],
        "transcripts": [
            {
                "name": t.name,
                "source": t.source_path,
                "format": t.format,
                "sha256": t.sha256,
                "messages": len(t.messages),
            }
            for t in transcripts.values()
        ],
        "runs": [
            {
                "run_id": r.run_id,
                "scenario": r.scenario.name,
                "transcript": r.transcript.name,
                "seed": r.seed,
                "outcome": r.outcome,
                "expected_outcome": r.scenario.expect.outcome,
                "problems": expectation_problems(r),
                "turns": r.turns,
                "turns_completed": r.turns_completed,
                "attempts": len(r.records),
                "chars_lost": r.chars_lost,
                "fact_survival": r.fact_survival,
                "error": r.error,
            }
            for r in results
        ],
        "files": list(files),
    }


def write_manifest(path: Path, document: Mapping[str, Any]) -> Path:
    """Write a manifest as indented UTF-8 JSON."""
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    return path


def budget_file(result: ReplayResult) -> str:
    """The budget curve's file name: :func:`simulator.research.report.budget_stem` of the run, ``.png``."""
    from simulator.research.report import budget_stem

    stem = budget_stem(
        scenario=result.scenario.name,
        transcript=result.transcript.name,
        policy=result.policy_name,
        seed=result.seed,
    )
    return f"{stem}.png"


def _warm_up() -> None:
    """Import the plotting stack while the replays run (the first figure then starts at once)."""
    import matplotlib.backends.backend_agg  # noqa: F401
    import pandas  # noqa: F401

    import simulator.research.figures  # noqa: F401


def _save_png(figure: Any, path: Path) -> Path:
    figure.savefig(path, format="png", metadata=dict(PNG_METADATA))
    return path


def _draw_budget(frame: pd.DataFrame, provider_window: int, path: Path) -> Path:
    from simulator.research.figures import budget_curve

    return _save_png(budget_curve(frame, provider_window=provider_window), path)


def _draw_matrix(summaries: pd.DataFrame, path: Path) -> Path:
    from simulator.research.figures import outcome_matrix

    return _save_png(outcome_matrix(summaries), path)


def _summaries(results: Sequence[ReplayResult]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame([r.summary for r in results])


class FigureWriter:
    """Draws a run directory's figures in a worker process, overlapping the replays.

    ``add(result)`` queues the run's budget curve as soon as its replay ends;
    ``finish(results)`` queues the outcome matrix and waits for every file. Use it as a
    context manager so the worker stops even when a replay fails::

        with FigureWriter(out) as figures:
            for ...:
                figures.add(replay(...))
            paths = figures.finish(results)
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        methods = multiprocessing.get_all_start_methods()
        method = next(m for m in WORKER_START_METHODS if m in methods)
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context(method))
        self._warm = self._pool.submit(_warm_up)
        self._pending: list[Future[Path]] = []

    def add(self, result: ReplayResult) -> None:
        """Queue the budget curve of one finished replay."""
        path = self.directory / budget_file(result)
        self._pending.append(
            self._pool.submit(_draw_budget, result.frame, result.scenario.provider.context_window, path)
        )

    def finish(self, results: Sequence[ReplayResult]) -> list[Path]:
        """Queue the outcome matrix of ``results``, wait for every figure, return their paths in order."""
        self._pending.append(
            self._pool.submit(_draw_matrix, _summaries(results), self.directory / OUTCOME_MATRIX_PNG)
        )
        self._warm.result()
        return [future.result() for future in self._pending]

    def __enter__(self) -> FigureWriter:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def write_figures(results: Sequence[ReplayResult], directory: Path) -> list[Path]:
    """The quick-look figures of ``results`` in ``directory``, drawn in this process.

    A budget curve per run (named as ``ctxsim report`` names it, :func:`budget_file`) and the
    outcome matrix (:data:`OUTCOME_MATRIX_PNG`); :class:`FigureWriter` draws the same files
    in a worker process.
    """
    written = [
        _draw_budget(r.frame, r.scenario.provider.context_window, Path(directory) / budget_file(r))
        for r in results
    ]
    return [*written, _draw_matrix(_summaries(results), Path(directory) / OUTCOME_MATRIX_PNG)]
