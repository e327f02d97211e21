"""What a run directory holds: the attempt CSV, the manifest and the quick-look figures.

Kept small on purpose: research figures belong to :mod:`simulator.research.report`; these are the
run directory's quick look (one budget curve per scenario, one outcome chart). Figures are drawn
with matplotlib's object API on the Agg canvas (no pyplot, no global backend switch), so this
works headless and inside notebooks alike.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ctxrecover.policy import Policy
from ctxrecover.sizes import format_payload_size
from simulator.recorder import proxy_cap
from simulator.replay import ReplayResult, expectation_problems

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "ATTEMPTS_CSV",
    "MANIFEST_JSON",
    "OUTCOMES_PNG",
    "TIMING_COLUMNS",
    "code_version",
    "manifest",
    "write_attempts_csv",
    "write_figures",
    "write_manifest",
]


ATTEMPTS_CSV = "attempts.csv"
MANIFEST_JSON = "manifest.json"
OUTCOMES_PNG = "outcomes.png"
BUDGET_PNG = "budget-{scenario}.png"
TIMING_COLUMNS: tuple[str, ...] = ("elapsed_ms",)
REPO_ROOT = Path(__file__).resolve().parents[2]
GIT_DESCRIBE = ("git", "describe", "--always", "--dirty", "--tags")
GIT_TIMEOUT_S = 5.0
PACKAGE = "ctxrecover"
# Outcome chart: attempt outcome → (category, colour), categories stacked in this order.
OUTCOME_CATEGORIES: Mapping[str, str] = MappingProxyType(
    {
        "ok": "tab:green",
        "recovered": "tab:blue",
        "truncated": "tab:olive",
        "rejected": "tab:orange",
        "failed": "tab:red",
        "fail_fast_floor": "tab:purple",
    }
)
FIGURE_DPI = 100
BUDGET_FIGSIZE = (8.0, 4.0)
KB = 1024


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
        "scenarios": [
            {
                "name": s.name,
                "source": str(s.source) if s.source else None,
                "description": s.description,
                "seed": s.seed,
                "proxy_cap": proxy_cap(s),
                "policy_overrides": s.policy_overrides(),
                "expect": dataclasses.asdict(s.expect),
            }
            for s in scenarios.values()
        ],
        "transcripts": [
            {"name": t.name, "source": t.source_path, "format": t.format, "sha256": t.sha256,
             "messages": len(t.messages)}
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


def _category(outcome: str) -> str:
    if outcome.startswith("recovered@"):
        return "recovered"
    if outcome.startswith("rejected:"):
        return "rejected"
    return outcome


def _budget_axes(ax: Axes, runs: Sequence[ReplayResult]) -> None:
    for result in runs:
        records = result.records
        xs = list(range(1, len(records) + 1))
        sizes = [r.request_bytes / KB for r in records]
        (line,) = ax.plot(xs, sizes, marker=".", linewidth=1, label=f"{result.transcript.name} request")
        learned = [r.learned_cap / KB if r.learned_cap is not None else float("nan") for r in records]
        if any(r.learned_cap is not None for r in records):
            ax.step(xs, learned, where="post", linestyle=":", color=line.get_color(),
                    label=f"{result.transcript.name} learned cap")
        rejected = [(x, s) for x, s, r in zip(xs, sizes, records, strict=True)
                    if _category(r.outcome) in ("rejected", "failed", "fail_fast_floor")]
        if rejected:
            ax.scatter(*zip(*rejected, strict=True), marker="x", color="tab:red", zorder=3,
                       label=f"{result.transcript.name} rejected")
    cap = proxy_cap(runs[0].scenario)
    if cap is not None:
        ax.axhline(cap / KB, color="black", linestyle="--", linewidth=1,
                   label=f"proxy cap {format_payload_size(cap)}")
    ax.set_xlabel("attempt")
    ax.set_ylabel("request body (KB)")
    ax.set_title(f"{runs[0].scenario.name}: request bytes per attempt")
    ax.legend(fontsize="small", loc="best")


def _outcome_axes(ax: Axes, results: Sequence[ReplayResult]) -> None:
    scenarios = list(dict.fromkeys(r.scenario.name for r in results))
    counts = {name: Counter() for name in scenarios}  # type: dict[str, Counter[str]]
    for result in results:
        counts[result.scenario.name].update(_category(r.outcome) for r in result.records)
    left = [0] * len(scenarios)
    for category, colour in OUTCOME_CATEGORIES.items():
        widths = [counts[name][category] for name in scenarios]
        if any(widths):
            ax.barh(scenarios, widths, left=left, color=colour, label=category)
            left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("attempts")
    ax.set_title("attempt outcomes per scenario")
    ax.legend(fontsize="small", loc="lower right")


def write_figures(results: Sequence[ReplayResult], directory: Path) -> list[Path]:
    """A budget curve per scenario and the outcome bar chart, as PNG files in ``directory``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    written: list[Path] = []
    by_scenario: dict[str, list[ReplayResult]] = {}
    for result in results:
        by_scenario.setdefault(result.scenario.name, []).append(result)
    for name, runs in by_scenario.items():
        figure = Figure(figsize=BUDGET_FIGSIZE, dpi=FIGURE_DPI, layout="constrained")
        FigureCanvasAgg(figure)
        _budget_axes(figure.add_subplot(), runs)
        path = directory / BUDGET_PNG.format(scenario=name)
        figure.savefig(path)
        written.append(path)
    height = max(2.5, 0.4 * len(by_scenario) + 1.5)
    figure = Figure(figsize=(8.0, height), dpi=FIGURE_DPI, layout="constrained")
    FigureCanvasAgg(figure)
    _outcome_axes(figure.add_subplot(), results)
    path = directory / OUTCOMES_PNG
    figure.savefig(path)
    written.append(path)
    return written
