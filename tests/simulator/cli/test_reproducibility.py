"""Reproducibility: one seed, the same bytes; figures and tables are regenerated from a run directory."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from simulator.cli import main
from simulator.replay import ReplayResult, replay
from simulator.research.report import FIGURE_FILES, REPORT_DIR, comparison_table, write_report
from simulator.research.run_files import ATTEMPTS_CSV, MANIFEST_JSON, TIMING_COLUMNS, write_attempts_csv
from simulator.research.sweep import sweep

NOTEBOOKS_DIR = Path(__file__).parents[3] / "notebooks"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
IGNORE_OUTPUT = "nbval-ignore-output"
# Small and fast, and between them: a WAF rejection, a learned cap, a context overflow, summaries.
SCENARIOS = ("corporate-128k-waf", "openai-128k-overflow")
SEED = 7
# The run summary columns a report's runs table must give back exactly as the replay computed them.
SUMMARY_NUMBERS = (
    "turns",
    "attempts",
    "recovered_episodes",
    "failed_episodes",
    "rejected_requests",
    "wasted_retries",
    "wire_bytes",
    "summarizer_calls",
    "chars_archived",
    "chars_lost",
    "cache_rebuilds",
)
SUMMARY_FLOATS = ("summarizer_cost_usd", "cache_adjusted_cost_usd", "fact_survival")


def csv_bytes(results: list[ReplayResult], path: Path) -> bytes:
    return write_attempts_csv(results, path, timing=False).read_bytes()


def replays(seed: int = SEED) -> list[ReplayResult]:
    return [replay(None, scenario, seed=seed) for scenario in SCENARIOS]


# -- same seed, same bytes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("transcript", "scenario"),
    [(None, "corporate-128k-waf"), (None, "openai-128k-overflow"), ("coding-120k", "summarizer-refuses")],
)
def test_the_same_seed_gives_a_byte_identical_attempt_table(
    tmp_path: Path, transcript: str | None, scenario: str
) -> None:
    first = replay(transcript, scenario, seed=SEED)
    second = replay(transcript, scenario, seed=SEED)

    assert csv_bytes([first], tmp_path / "first.csv") == csv_bytes([second], tmp_path / "second.csv")
    assert len(first.records) > 1
    assert first.summary["rejected_requests"] + first.summary["summarizer_calls"] > 0
    assert first.notices == second.notices
    assert first.summary == second.summary


def test_the_timing_column_is_the_only_one_left_out(tmp_path: Path) -> None:
    (result,) = replays()[:1]

    with_timing = pd.read_csv(write_attempts_csv([result], tmp_path / "t.csv"))
    without = pd.read_csv(write_attempts_csv([result], tmp_path / "n.csv", timing=False))

    assert [c for c in with_timing.columns if c not in without.columns] == list(TIMING_COLUMNS)


# -- a run directory gives its figures and tables back ------------------------------------------------


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "run"
    code = main(
        ["run", "--scenarios", ",".join(SCENARIOS), "--seed", str(SEED), "--out", str(out), "--no-timing"]
    )
    assert code == 0
    return out


def test_the_cli_attempt_table_is_the_in_process_replays_byte_for_byte(run_dir: Path, tmp_path: Path) -> None:
    assert (run_dir / ATTEMPTS_CSV).read_bytes() == csv_bytes(replays(), tmp_path / "again.csv")


def test_write_report_regenerates_every_figure_from_the_run_directory(run_dir: Path) -> None:
    written = write_report(run_dir)

    manifest = json.loads((run_dir / MANIFEST_JSON).read_text(encoding="utf-8"))
    names = {path.name for path in written}
    budget_curves = sorted(name for name in names if name.startswith("budget-"))
    assert len(budget_curves) == len(manifest["runs"]) == len(SCENARIOS)
    # one policy: every figure but the Pareto plot, which would be a single dot
    assert {f"{stem}.png" for name, stem in FIGURE_FILES.items() if name != "cost_vs_fact_survival"} <= names
    assert f"{FIGURE_FILES['cost_vs_fact_survival']}.png" not in names
    assert {"comparison.csv", "runs.csv", "episodes.csv"} <= names
    assert all(path.parent == run_dir / REPORT_DIR for path in written)
    assert all(path.read_bytes().startswith(PNG_SIGNATURE) for path in written if path.suffix == ".png")


def test_regenerating_the_report_gives_the_same_bytes(run_dir: Path, tmp_path: Path) -> None:
    first = write_report(run_dir, out_dir=tmp_path / "first")
    second = write_report(run_dir, out_dir=tmp_path / "second")

    assert [p.name for p in first] == [p.name for p in second]
    different = [a.name for a, b in zip(first, second, strict=True) if a.read_bytes() != b.read_bytes()]
    assert different == []


def test_the_regenerated_run_table_matches_the_replays(run_dir: Path, tmp_path: Path) -> None:
    write_report(run_dir, out_dir=tmp_path)
    table = pd.read_csv(tmp_path / "runs.csv").set_index("run_id")
    originals = {result.run_id: result for result in replays()}

    assert sorted(table.index) == sorted(originals)
    for run_id, result in originals.items():
        row = table.loc[run_id]
        assert {name: int(row[name]) for name in SUMMARY_NUMBERS} == {
            name: int(result.summary[name]) for name in SUMMARY_NUMBERS
        }
        assert [float(row[name]) for name in SUMMARY_FLOATS] == pytest.approx(
            [float(result.summary[name]) for name in SUMMARY_FLOATS]
        )
        assert (row["outcome"], row["expected_outcome"]) == (result.outcome, result.scenario.expect.outcome)


def test_the_regenerated_comparison_table_matches_the_replays(run_dir: Path, tmp_path: Path) -> None:
    write_report(run_dir, out_dir=tmp_path)
    regenerated = pd.read_csv(tmp_path / "comparison.csv").set_index(["policy", "scenario"])

    expected = comparison_table(pd.DataFrame([result.summary for result in replays()]))
    assert list(regenerated.index) == [("default", scenario) for scenario in SCENARIOS]
    pd.testing.assert_frame_equal(
        regenerated, expected.astype(regenerated.dtypes.to_dict()), check_dtype=False, check_index_type=False
    )


def test_a_sweep_directory_regenerates_the_report_the_sweep_wrote(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    sweep(
        grid={"keep_recent": [4, 8]},
        scenarios=["openai-128k-overflow"],
        seeds=(SEED,),
        workers=1,
        out_dir=out,
        progress=False,
    )
    original = {path.name: path.read_bytes() for path in (out / REPORT_DIR).iterdir()}

    regenerated = {path.name: path.read_bytes() for path in write_report(out, out_dir=tmp_path / "again")}

    assert sorted(regenerated) == sorted(original)
    assert [name for name in original if original[name] != regenerated[name]] == []


# -- the notebooks are stored executed: their outputs are what nbval compares against --------------------


NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))


def test_there_are_notebooks() -> None:
    assert len(NOTEBOOKS) >= 5


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_each_notebook_is_stored_executed_top_to_bottom_with_its_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    cells = [cell for cell in notebook.cells if cell.cell_type == "code"]

    assert [cell.execution_count for cell in cells] == list(range(1, len(cells) + 1)), (
        f"{path.name}: re-execute it top to bottom (python notebooks/execute.py {path.name})"
    )
    assert not [o for cell in cells for o in cell.outputs if o.output_type == "error"]
    checked = [cell for cell in cells if IGNORE_OUTPUT not in cell.metadata.get("tags", [])]
    assert sum(bool(cell.outputs) for cell in checked) >= 2, f"{path.name}: checked cells print nothing"
    assert "SEED = " in cells[0].source
    assert "widgets" not in notebook.metadata
