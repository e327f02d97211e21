"""The simulator's public namespace: a sorted __all__ that changes only on purpose, cheap to import, and
the one notebooks use (with ctxrecover's)."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import simulator

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PUBLIC_NAMESPACES = frozenset({"simulator", "ctxrecover"})
EXPECTED_PUBLIC_NAMES = {
    # replay, scenarios, gateways and providers
    "ReplayEvent",
    "ReplayResult",
    "TRANSPORTS",
    "expectation_problems",
    "observed",
    "replay",
    "run_line",
    "Expectation",
    "Scenario",
    "ScenarioError",
    "list_scenarios",
    "load_scenario",
    "scenario_from_document",
    "proxy_cap",
    "FAULT_KINDS",
    "LoopbackServer",
    "Middlebox",
    "mount_inprocess",
    "parse_fault_spec",
    "MockProvider",
    "MockService",
    "Reply",
    "make_summarizer",
    # transcripts
    "Transcript",
    "TranscriptError",
    "bundled_transcripts",
    "generate_session",
    "load_named_transcript",
    "load_transcript",
    "transcript_from_messages",
    "workload_transcript",
    # sweeps, baselines, the tuner
    "BASELINES",
    "Strategy",
    "Uniform",
    "sweep",
    "Knob",
    "SEARCH_SPACE",
    "OBJECTIVES",
    "objective_values",
    "TuneResult",
    "front_figure",
    "tune",
    # metrics, reports, figures
    "AttemptRecord",
    "RUN_COLUMNS",
    "episodes",
    "records_to_frame",
    "summarize_run",
    "archived_by_source",
    "comparison_table",
    "failure_counts",
    "load_run",
    "markdown_table",
    "policy_episodes",
    "run_summaries",
    "write_report",
    "budget_curve",
    "outcome_cells",
    "outcome_matrix",
    "rejected_per_episode",
    "summarizer_cost",
    "cost_vs_fact_survival",
    "front_table",
    "knob_response",
    "knob_response_figure",
    "compaction_step",
    "outcome_words",
    "recovery_step",
    # widgets
    "PAYLOAD_CAPS",
    "POLICY_SLIDERS",
    "figure_png",
    "replay_controls",
    "replay_dashboard",
    "run_replay",
    "summary_frame",
}


def test_all_is_sorted() -> None:
    assert simulator.__all__ == sorted(simulator.__all__)


def test_public_names_change_only_on_purpose() -> None:
    assert set(simulator.__all__) == EXPECTED_PUBLIC_NAMES == set(simulator.EXPORTS)


@pytest.mark.parametrize("name", sorted(EXPECTED_PUBLIC_NAMES))
def test_every_public_name_is_the_object_its_module_defines(name: str) -> None:
    module = importlib.import_module(simulator.EXPORTS[name])
    assert getattr(simulator, name) is getattr(module, name)
    assert name in dir(simulator)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'simulator' has no attribute 'nope'"):
        _ = simulator.nope  # type: ignore[attr-defined]


def test_import_does_not_pull_heavy_optional_dependencies() -> None:
    code = (
        "import sys, simulator; "
        "heavy = ('pandas', 'matplotlib', 'optuna', 'ipywidgets', 'numpy', 'ctxrecover.session'); "
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


def _imported_modules(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    found = []
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.append(node.module)
            elif isinstance(node, ast.Import):
                found += [alias.name for alias in node.names]
    return found


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_notebooks_import_only_the_public_namespaces(notebook: Path) -> None:
    ours = [m for m in _imported_modules(notebook) if m.partition(".")[0] in PUBLIC_NAMESPACES]
    assert ours, f"{notebook.name} imports nothing from simulator or ctxrecover"
    assert [m for m in ours if m not in PUBLIC_NAMESPACES] == []
